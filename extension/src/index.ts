/**
 * interdist in JupyterLab: a left-sidebar panel listing the live interdist
 * clusters of this user (from the server extension's `/interdist/clusters`),
 * each with its interdist dashboard pages; a page opens in a main-area IFrame.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  IFrame,
  InputDialog,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { LabIcon, refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

const PLUGIN_ID = '@interdist/jupyterlab:plugin';

namespace CommandIDs {
  export const open = 'interdist:open-dashboard-page';
  export const refresh = 'interdist:refresh';
}

/** One dashboard page of a cluster, as the server lists it. */
export interface IPage {
  name: string;
  url: string;
}

/** One live interdist cluster, as the server lists it. */
export interface ICluster {
  id: string;
  pid: number;
  scheduler_address: string;
  dashboard_link: string | null;
  n_workers: number;
  created: number;
  pages: IPage[];
  pages_error?: string | null;
}

const interdistIcon = new LabIcon({
  name: 'interdist:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<circle cx="8" cy="3" r="2"/><circle cx="3" cy="13" r="2"/><circle cx="13" cy="13" r="2"/>' +
    '<path d="M7.5 4.5h1v3l4 4-.7.7L8 8.4l-3.8 3.8-.7-.7 4-4z"/></g></svg>'
});

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

/** The sidebar: one entry per cluster, one link per interdist page. */
class ClusterPanel extends Widget {
  constructor(private readonly openPage: (page: IPage, cluster: ICluster) => void) {
    super();
    this.id = 'interdist-sidebar';
    this.addClass('jp-interdist-panel');
    this.title.icon = interdistIcon;
    this.title.caption = 'interdist';

    const header = document.createElement('div');
    header.className = 'jp-interdist-header';
    const title = document.createElement('span');
    title.className = 'jp-interdist-title';
    title.textContent = 'interdist';
    const button = document.createElement('button');
    button.className = 'jp-interdist-refresh jp-Button jp-mod-minimal';
    button.title = 'Refresh the list of interdist clusters';
    refreshIcon.element({ container: button, tag: 'span' });
    button.onclick = () => void this.refresh();
    header.append(title, button);

    this._list = document.createElement('div');
    this._list.className = 'jp-interdist-clusters';
    this.node.append(header, this._list);
  }

  get clusters(): ICluster[] {
    return this._clusters;
  }

  async refresh(): Promise<void> {
    try {
      this._clusters = await fetchClusters();
      this._error = null;
    } catch (err) {
      this._clusters = [];
      this._error = `could not list the clusters: ${err}`;
    }
    this.render();
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  private render(): void {
    this._list.replaceChildren();
    if (this._error) {
      this._list.append(this.note(this._error));
      return;
    }
    if (this._clusters.length === 0) {
      this._list.append(this.note('No interdist cluster is running. Create a strategy in a notebook, then refresh.'));
      return;
    }
    for (const cluster of this._clusters) {
      const item = document.createElement('div');
      item.className = 'jp-interdist-cluster';
      item.dataset.scheduler = cluster.scheduler_address;
      const name = document.createElement('div');
      name.className = 'jp-interdist-cluster-name';
      name.textContent = `${cluster.scheduler_address}`;
      const info = document.createElement('div');
      info.className = 'jp-interdist-cluster-info';
      const since = new Date(cluster.created * 1000).toLocaleTimeString();
      info.textContent = `${cluster.n_workers} worker(s) · pid ${cluster.pid} · since ${since}`;
      item.append(name, info);
      if (cluster.dashboard_link) {
        const link = document.createElement('a');
        link.className = 'jp-interdist-dashboard-link';
        link.href = cluster.dashboard_link;
        link.target = '_blank';
        link.rel = 'noopener noreferrer';
        link.textContent = 'Dask dashboard ↗';
        item.append(link);
      }
      const pages = document.createElement('ul');
      pages.className = 'jp-interdist-pages';
      for (const page of cluster.pages) {
        const li = document.createElement('li');
        const button = document.createElement('button');
        button.className = 'jp-interdist-page';
        button.textContent = page.name;
        button.title = page.url;
        button.onclick = () => this.openPage(page, cluster);
        li.append(button);
        pages.append(li);
      }
      if (cluster.pages.length === 0) {
        item.append(this.note(cluster.pages_error ?? 'no interdist pages on this dashboard'));
      }
      item.append(pages);
      this._list.append(item);
    }
  }

  private note(text: string): HTMLElement {
    const p = document.createElement('p');
    p.className = 'jp-interdist-note';
    p.textContent = text;
    return p;
  }

  private _list: HTMLElement;
  private _clusters: ICluster[] = [];
  private _error: string | null = null;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A sidebar listing the live interdist clusters and their dashboard pages.',
  autoStart: true,
  optional: [ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const tracker = new WidgetTracker<MainAreaWidget<IFrame>>({ namespace: 'interdist' });

    const openPage = (page: IPage, cluster: ICluster): void => {
      const existing = tracker.find(w => w.content.url === page.url);
      if (existing) {
        app.shell.activateById(existing.id);
        return;
      }
      // Bokeh needs scripts and its websocket back to the dashboard's own origin.
      const content = new IFrame({ sandbox: ['allow-scripts', 'allow-same-origin'] });
      content.url = page.url;
      content.addClass('jp-interdist-iframe');
      const widget = new MainAreaWidget({ content });
      widget.id = `interdist-page-${Private.nextId++}`;
      widget.title.label = `${page.name} (${cluster.scheduler_address.replace(/^tcp:\/\//, '')})`;
      widget.title.icon = interdistIcon;
      widget.title.closable = true;
      void tracker.add(widget);
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };

    const panel = new ClusterPanel(openPage);
    app.shell.add(panel, 'left', { rank: 300 });
    restorer?.add(panel, 'interdist-sidebar');

    app.commands.addCommand(CommandIDs.refresh, {
      label: 'interdist: refresh clusters',
      execute: () => panel.refresh()
    });
    app.commands.addCommand(CommandIDs.open, {
      label: 'interdist: open dashboard page',
      execute: async () => {
        await panel.refresh();
        const choices = new Map<string, [IPage, ICluster]>();
        for (const cluster of panel.clusters) {
          for (const page of cluster.pages) {
            choices.set(`${page.name} — ${cluster.scheduler_address}`, [page, cluster]);
          }
        }
        if (choices.size === 0) {
          app.shell.activateById(panel.id);
          return;
        }
        const result = await InputDialog.getItem({
          title: 'Open an interdist dashboard page',
          items: [...choices.keys()]
        });
        const chosen = result.button.accept && result.value ? choices.get(result.value) : undefined;
        if (chosen) {
          openPage(...chosen);
        }
      }
    });
    palette?.addItem({ command: CommandIDs.open, category: 'interdist' });
    palette?.addItem({ command: CommandIDs.refresh, category: 'interdist' });
  }
};

namespace Private {
  export let nextId = 0;
}

export default plugin;
