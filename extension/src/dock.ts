/**
 * The docked dashboard: `strategy.dashboard(docked=True)` in a notebook opens the cluster's
 * overview page (`/individual-interdist-overview`) in a main-area panel split to the right
 * of that notebook, where it stays in view and live while the cells run (the Dask scheduler
 * feeds it, not the notebook's output).
 *
 * The kernel's output carries `application/vnd.interdist.dock+json` (`IDockRequest`, made by
 * `interdist/dashboard/docked.py`); each notebook's rendermime renders it with `DockNote`,
 * a one-line note with a link that brings the panel to the front, and docks the page:
 *
 * - once per output: each display has a new `token`, remembered in localStorage, so a
 *   reloaded page that renders the saved output again does not reopen a closed panel;
 * - once per notebook and page: a second display (the cell run again, after Kernel > Restart
 *   too) points the open panel at the new cluster instead of opening another;
 * - without taking the keyboard from the notebook (`activate: false`).
 *
 * A panel is an IFrame of a server page (through Jupyter's proxy, as the sidebar opens them),
 * so JupyterLab's layout restorer brings it back after a page reload, with no widget state;
 * while any is open, the clusters are polled and a panel whose cluster is gone follows the
 * next cluster of its notebook.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ICluster, IPage, REFRESH_MS, fetchClusters, pageAt } from './clusters';

export const DOCK_MIME = 'application/vnd.interdist.dock+json';
/** The command the layout restorer calls to open a docked panel again after a reload. */
export const OPEN_DOCKED = 'interdist:open-docked';

/** What the kernel asks for (`DockRequest` in `interdist/dashboard/docked.py`). */
export interface IDockRequest {
  version: number;
  /** The page's name, "overview". */
  page: string;
  /** Its path on a dashboard, "/individual-interdist-overview". */
  path: string;
  scheduler_address: string;
  cluster_id: string | null;
  /** The page's URL from the kernel's side (its dashboard link): the note's fallback link. */
  url: string | null;
  /** New for each display: an output docks once. */
  token: string;
}

/** What a docked panel shows (saved by the layout restorer): whose page, on which cluster now. */
export interface IDocked {
  /** The notebook's path: the panel follows its clusters. */
  notebook: string;
  /** The page's path on a dashboard. */
  path: string;
  /** The page's name in the sidebar ("Interdist Overview"). */
  name: string;
  clusterId: string;
  kernel: string | null;
  /** The page's URL on that cluster, for the browser (through Jupyter's proxy when local). */
  url: string;
}

/** Whether a request was docked: `why` not (null when it was), and the page's URL for the browser when known. */
export interface IDockResult {
  why: string | null;
  url?: string;
}

/** The notebook an output is in: its panel's id (for the split) and its path (the panel's owner). */
export interface INotebookRef {
  id: string;
  path: string;
}

const TOKENS_KEY = 'interdist:docked-tokens';
const TOKENS_KEPT = 200;

/** Whether the output with `token` has not docked before (and from now on it has). */
export function claim(token: string): boolean {
  let tokens: string[] = [];
  try {
    tokens = JSON.parse(window.localStorage.getItem(TOKENS_KEY) ?? '[]');
  } catch {
    tokens = [];
  }
  if (!Array.isArray(tokens)) {
    tokens = [];
  }
  if (tokens.includes(token)) {
    return false;
  }
  tokens.push(token);
  try {
    window.localStorage.setItem(TOKENS_KEY, JSON.stringify(tokens.slice(-TOKENS_KEPT)));
  } catch {
    // no storage (private mode): a reload may dock the output again, nothing worse
  }
  return true;
}

function basename(path: string): string {
  return path.split('/').pop() || path;
}

function stateOf(cluster: ICluster, page: IPage, path: string, notebook: string): IDocked {
  return { notebook, path, name: page.name, clusterId: cluster.id, kernel: cluster.kernel_id ?? null, url: page.url };
}

/** The docked panels: opened by `dock`, restored by the layout restorer, following their notebook's cluster. */
export class Docks {
  constructor(
    private readonly app: JupyterFrontEnd,
    private readonly icon: LabIcon,
    private readonly canSplit = true
  ) {
    this.tracker.widgetAdded.connect(() => {
      this.startPolling();
      void this.refresh(); // a restored panel learns at once whether its cluster is still there
    });
  }

  readonly tracker = new WidgetTracker<MainAreaWidget<IFrame>>({ namespace: 'interdist-docked' });

  /** What `widget` shows (what the layout restorer saves). */
  state(widget: MainAreaWidget<IFrame>): IDocked | undefined {
    return this._states.get(widget.id);
  }

  /** The open panel of `notebook`'s page at `path`. */
  find(notebook: string, path: string): MainAreaWidget<IFrame> | undefined {
    return this.tracker.find(w => {
      const s = this._states.get(w.id);
      return s !== undefined && s.notebook === notebook && s.path === path;
    });
  }

  /**
   * A new panel showing `state`, split to the right of the main-area widget `ref` when given. A restored
   * panel (`checked` false) loads its page only once the server lists its cluster (or it followed a new one):
   * the page of a cluster that is gone is an error from the proxy.
   */
  open(state: IDocked, ref?: string, activate = false, checked = true): MainAreaWidget<IFrame> {
    // Bokeh needs scripts and its websocket back to the dashboard's own origin.
    const content = new IFrame({ sandbox: ['allow-scripts', 'allow-same-origin'] });
    content.addClass('jp-interdist-iframe');
    const widget = new MainAreaWidget({ content });
    widget.id = `interdist-docked-${Private.nextId++}`;
    widget.addClass('jp-interdist-docked');
    widget.title.icon = this.icon;
    widget.title.closable = true;
    const note = new Widget();
    note.addClass('jp-interdist-docked-note');
    widget.toolbar.addItem('interdist-note', note);
    this._notes.set(widget.id, note);
    widget.disposed.connect(() => {
      this._states.delete(widget.id);
      this._notes.delete(widget.id);
      if (this._states.size === 0) {
        this.stopPolling(); // the last panel closed (the tracker may still hold it: it hears this after us)
      }
    });
    this.show(widget, state, checked ? 'live' : 'checking');
    void this.tracker.add(widget);
    this.app.shell.add(widget, 'main', ref ? { mode: 'split-right', ref, activate } : { activate });
    return widget;
  }

  /**
   * Dock the page a kernel's output asks for beside `notebook`: a new panel, or the open one of that
   * notebook and page pointed at the request's cluster.
   */
  async dock(request: IDockRequest, notebook: INotebookRef): Promise<IDockResult> {
    let clusters: ICluster[];
    try {
      clusters = await fetchClusters();
    } catch (err) {
      return { why: `could not list the clusters: ${err}` };
    }
    const cluster =
      clusters.find(c => c.scheduler_address === request.scheduler_address) ??
      clusters.find(c => request.cluster_id !== null && c.id === request.cluster_id);
    if (!cluster) {
      return { why: 'its cluster is not one the server lists (not started by interdist on this host?)' };
    }
    const page = pageAt(cluster, request.path);
    if (!page) {
      return { why: cluster.pages_error ?? `its dashboard has no page ${request.path}` };
    }
    if (!this.canSplit) {
      return { why: 'this page has no JupyterLab main area to dock it in', url: page.url };
    }
    const state = stateOf(cluster, page, request.path, notebook.path);
    const open = this.find(notebook.path, request.path);
    if (open) {
      this.show(open, state, 'live');
    } else {
      this.open(state, notebook.id);
    }
    return { why: null, url: page.url };
  }

  /** Bring `notebook`'s panel for `request` to the front, docking it again if it was closed. */
  async reveal(request: IDockRequest, notebook: INotebookRef): Promise<IDockResult> {
    let widget = this.find(notebook.path, request.path);
    if (!widget) {
      const result = await this.dock(request, notebook);
      if (result.why !== null) {
        return result;
      }
      widget = this.find(notebook.path, request.path);
    }
    if (widget) {
      this.app.shell.activateById(widget.id);
    }
    return { why: null };
  }

  /** Point each panel whose cluster is gone at the next cluster of its notebook (or say it waits for one). */
  follow(clusters: ICluster[]): void {
    this.tracker.forEach(widget => {
      const was = this._states.get(widget.id);
      if (!was) {
        return;
      }
      if (clusters.some(c => c.id === was.clusterId)) {
        this.show(widget, was, 'live');
        return;
      }
      for (const cluster of clusters) {
        const page = pageAt(cluster, was.path);
        const mine = cluster.notebook === was.notebook || (was.kernel !== null && cluster.kernel_id === was.kernel);
        if (page && mine) {
          this.show(widget, stateOf(cluster, page, was.path, was.notebook), 'live');
          return;
        }
      }
      this.show(widget, was, 'gone');
    });
  }

  /** Ask the server for the clusters and follow them (not twice at once). */
  async refresh(): Promise<void> {
    if (this._busy) {
      return;
    }
    this._busy = true;
    try {
      this.follow(await fetchClusters());
    } catch {
      // the server is restarting, or the network is down: the next poll tries again
    } finally {
      this._busy = false;
    }
  }

  /** Show `state` in `widget`: its page when live; a gone cluster's page stays as it last was (or blank). */
  private show(widget: MainAreaWidget<IFrame>, state: IDocked, how: 'live' | 'gone' | 'checking'): void {
    const before = this._states.get(widget.id);
    this._states.set(widget.id, state);
    if (how === 'live' && widget.content.url !== state.url) {
      widget.content.url = state.url;
    }
    const notebook = basename(state.notebook);
    widget.title.label = `${state.name} (${notebook})`;
    widget.title.caption = state.url;
    widget.toggleClass('jp-mod-gone', how === 'gone');
    const note = this._notes.get(widget.id);
    if (note) {
      note.node.textContent = {
        live: `live: the cluster of ${notebook}`,
        gone: `the cluster of ${notebook} is gone: this panel follows the notebook's next one`,
        checking: `looking for the cluster of ${notebook}…`
      }[how];
    }
    if (before && before.url !== state.url) {
      void this.tracker.save(widget); // the layout restorer keeps the new cluster's page
    }
  }

  private startPolling(): void {
    if (this._timer !== null) {
      return;
    }
    this._timer = window.setInterval(() => {
      if (document.visibilityState !== 'hidden') {
        void this.refresh();
      }
    }, REFRESH_MS);
  }

  private stopPolling(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
  }

  private _states = new Map<string, IDocked>();
  private _notes = new Map<string, Widget>();
  private _timer: number | null = null;
  private _busy = false;
}

/** The kernel's request, rendered in the notebook: one line and a link to the panel; docks the page once. */
export class DockNote extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly docks: Docks,
    private readonly notebook: (() => INotebookRef) | null
  ) {
    super();
    this.addClass('jp-interdist-dock-note');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const request = model.data[DOCK_MIME] as unknown as IDockRequest;
    const notebook = this.notebook;
    if (notebook === null) {
      this.say(request, { why: 'not in a notebook: no panel to dock it beside' });
      return;
    }
    this.say(request, { why: null });
    // An output from an untrusted notebook opens nothing by itself; its link still does.
    if (model.trusted && claim(request.token)) {
      this.say(request, await this.docks.dock(request, notebook()));
    }
  }

  private say(request: IDockRequest, result: IDockResult): void {
    this.node.replaceChildren();
    const text = document.createElement('span');
    if (result.why === null) {
      text.textContent = `interdist dashboard (${request.page}) docked at the right → `;
      const show = document.createElement('a');
      show.className = 'jp-interdist-dock-show';
      show.href = '#';
      show.textContent = 'show it';
      show.title = 'Bring the docked dashboard to the front (opens it again if it was closed)';
      show.onclick = event => {
        event.preventDefault();
        if (this.notebook) {
          void this.docks.reveal(request, this.notebook()).then(revealed => {
            if (revealed.why !== null) {
              this.say(request, revealed);
            }
          });
        }
      };
      this.node.append(text, show);
      return;
    }
    text.textContent = `interdist dashboard (${request.page}): not docked, ${result.why}. `;
    this.node.append(text);
    // the server's URL (through Jupyter's proxy) when the cluster was found, else the kernel's
    const url = result.url ?? request.url;
    if (url) {
      const link = document.createElement('a');
      link.href = url;
      link.target = '_blank';
      link.rel = 'noopener noreferrer';
      link.textContent = 'Open the page ↗';
      this.node.append(link);
    }
  }
}

/** The renderer factory of one notebook's rendermime (`notebook` names that notebook). */
export function dockRendererFactory(
  docks: Docks,
  notebook: (() => INotebookRef) | null
): IRenderMime.IRendererFactory {
  return {
    safe: true, // it shows text and a link; the page comes from the server's list, never from the output
    mimeTypes: [DOCK_MIME],
    defaultRank: 0,
    createRenderer: () => new DockNote(docks, notebook)
  };
}

namespace Private {
  export let nextId = 0;
}
