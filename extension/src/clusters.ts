/**
 * The live interdist clusters, as the server extension lists them (`GET /interdist/clusters`,
 * `interdist/lab/handlers.py`): what the sidebar shows and what open pages follow.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** How often the visible sidebar, and an open docked dashboard, ask the server for the clusters. */
export const REFRESH_MS = 3000;

/** One dashboard page of a cluster, as the server lists it. */
export interface IPage {
  name: string;
  url: string;
}

/** One live interdist cluster, as the server lists it. */
export interface ICluster {
  id: string;
  /** The notebook's file name, else its kernel, else its process. */
  name: string;
  /** The notebook's path on the server, when the cluster runs in a notebook's kernel. */
  notebook?: string | null;
  kernel_id?: string | null;
  /** The Dask dashboard's own page, for the browser (through the proxy when local). */
  dashboard_url?: string | null;
  pid: number;
  scheduler_address: string;
  dashboard_link: string | null;
  n_workers: number;
  created: number;
  pages: IPage[];
  pages_error?: string | null;
}

/** The clusters from the server extension (pages included). */
export async function fetchClusters(): Promise<ICluster[]> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'interdist', 'clusters');
  const response = await ServerConnection.makeRequest(url, {}, settings);
  if (!response.ok) {
    throw new ServerConnection.ResponseError(response);
  }
  const data = await response.json();
  return (data.clusters ?? []) as ICluster[];
}

/** Who started a cluster: its notebook, else its kernel (a restart keeps the kernel's id). */
export function ownerOf(cluster: ICluster): string | null {
  return cluster.notebook ?? cluster.kernel_id ?? null;
}

/** The page of `cluster` at `path` on its dashboard (`/individual-interdist-overview`), if it lists one. */
export function pageAt(cluster: ICluster, path: string): IPage | undefined {
  // A page reached without Jupyter's proxy carries the dashboard's token as ``?token=``: its path is
  // what names it.
  return cluster.pages.find(p => p.url.split('?')[0].endsWith(path));
}
