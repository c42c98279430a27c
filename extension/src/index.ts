/**
 * interdist in JupyterLab: a left-sidebar panel listing the live interdist
 * clusters of this user (from the server extension's `/interdist/clusters`),
 * each named by its notebook (or kernel) and listing its interdist dashboard
 * pages; a page opens in a main-area IFrame that fills its tab. Page URLs are
 * what the server gives: paths through Jupyter's own proxy
 * (`{base_url}proxy/{port}/...`) for a dashboard on the server's host, so they
 * work on JupyterHub, Binder or any remote server. The list refreshes itself
 * every few seconds while the panel is visible; a page whose cluster is gone
 * (its kernel restarted) follows the new cluster of the same notebook.
 *
 * In each notebook, too: `strategy.dashboard(docked=True)` docks the overview
 * page to the right of the notebook (`dock.ts`), and an inline dashboard whose
 * kernel is gone becomes a static snapshot (`freeze.ts`).
 */
import {
  ILabShell,
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
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { LabIcon, refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { ICluster, IPage, REFRESH_MS, fetchClusters, ownerOf } from './clusters';
import { DOCK_MIME, Docks, IDocked, OPEN_DOCKED, dockRendererFactory } from './dock';
import { INotebookPanelLike, freezeOnKernelLoss } from './freeze';

export { DOCK_MIME, ICluster, IPage, REFRESH_MS, fetchClusters };

const PLUGIN_ID = '@interdist/jupyterlab:plugin';

namespace CommandIDs {
  export const open = 'interdist:open-dashboard-page';
  export const refresh = 'interdist:refresh';
}

const interdistIcon = new LabIcon({
  name: 'interdist:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<circle cx="8" cy="3" r="2"/><circle cx="3" cy="13" r="2"/><circle cx="13" cy="13" r="2"/>' +
    '<path d="M7.5 4.5h1v3l4 4-.7.7L8 8.4l-3.8 3.8-.7-.7 4-4z"/></g></svg>'
});

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

  /** Called with the clusters after every refresh. */
  onRefresh: ((clusters: ICluster[]) => void) | null = null;

  async refresh(): Promise<void> {
    try {
      this._clusters = await fetchClusters();
      this._error = null;
    } catch (err) {
      this._clusters = [];
      this._error = `could not list the clusters: ${err}`;
    }
    // Redraw only on a change: a steady list keeps its hover and focus while it polls.
    const shown = JSON.stringify([this._clusters, this._error]);
    if (shown !== this._shown) {
      this._shown = shown;
      this.render();
    }
    this.onRefresh?.(this._clusters);
  }

  protected onAfterShow(): void {
    void this.refresh();
    this.startPolling();
  }

  protected onAfterHide(): void {
    this.stopPolling();
  }

  protected onBeforeDetach(): void {
    this.stopPolling();
  }

  dispose(): void {
    this.stopPolling();
    super.dispose();
  }

  private startPolling(): void {
    if (this._timer !== null) {
      return;
    }
    this._timer = window.setInterval(() => {
      // Not while the browser tab is in the background, nor twice at once on a slow server.
      if (document.visibilityState === 'hidden' || this._busy) {
        return;
      }
      this._busy = true;
      void this.refresh().finally(() => {
        this._busy = false;
      });
    }, REFRESH_MS);
  }

  private stopPolling(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
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
      item.dataset.kernel = cluster.kernel_id ?? '';
      const name = document.createElement('div');
      name.className = 'jp-interdist-cluster-name';
      name.textContent = cluster.name;
      name.title = cluster.notebook ?? (cluster.kernel_id ? `kernel ${cluster.kernel_id}` : `process ${cluster.pid}`);
      const info = document.createElement('div');
      info.className = 'jp-interdist-cluster-info';
      const since = new Date(cluster.created * 1000).toLocaleTimeString();
      info.textContent = `${cluster.n_workers} worker(s) · ${cluster.scheduler_address} · since ${since}`;
      item.append(name, info);
      const dashboard = cluster.dashboard_url ?? cluster.dashboard_link;
      if (dashboard) {
        const link = document.createElement('a');
        link.className = 'jp-interdist-dashboard-link';
        link.href = dashboard;
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
  private _shown = '';
  private _timer: number | null = null;
  private _busy = false;
}

/** What an open page shows: which cluster, whose (its notebook or kernel; null: a script's) and which page. */
interface IOpened {
  clusterId: string;
  owner: string | null;
  pageName: string;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'A sidebar listing the live interdist clusters and their dashboard pages; docked dashboards; ' +
    'static snapshots of inline dashboards whose kernel is gone.',
  autoStart: true,
  optional: [ICommandPalette, ILayoutRestorer, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    labShell: ILabShell | null
  ) => {
    const tracker = new WidgetTracker<MainAreaWidget<IFrame>>({ namespace: 'interdist' });
    const opened = new WeakMap<MainAreaWidget<IFrame>, IOpened>();
    const label = (page: IPage, cluster: ICluster) => `${page.name} (${cluster.name})`;

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
      widget.title.label = label(page, cluster);
      widget.title.caption = page.url;
      opened.set(widget, { clusterId: cluster.id, owner: ownerOf(cluster), pageName: page.name });
      widget.title.icon = interdistIcon;
      widget.title.closable = true;
      void tracker.add(widget);
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };

    const panel = new ClusterPanel(openPage);
    // A page whose cluster is gone (the kernel restarted, the notebook ran again) follows the new
    // cluster of the same notebook: the same page, with the new run's values.
    panel.onRefresh = clusters => {
      const live = new Set(clusters.map(c => c.id));
      tracker.forEach(widget => {
        const was = opened.get(widget);
        if (!was || was.owner === null || live.has(was.clusterId)) {
          return;
        }
        for (const cluster of clusters) {
          const page = cluster.pages.find(p => p.name === was.pageName);
          if (page && ownerOf(cluster) === was.owner) {
            widget.content.url = page.url;
            widget.title.caption = page.url;
            widget.title.label = label(page, cluster);
            opened.set(widget, { ...was, clusterId: cluster.id });
            return;
          }
        }
      });
    };
    app.shell.add(panel, 'left', { rank: 300 });
    restorer?.add(panel, 'interdist-sidebar');

    // Docked dashboards: opened by a notebook's output, brought back by the layout restorer.
    // JupyterLab's main area splits; Notebook 7's holds one document (there, the note's link opens the page).
    const docks = new Docks(app, interdistIcon, labShell !== null);
    app.commands.addCommand(OPEN_DOCKED, {
      label: 'interdist: open a docked dashboard',
      execute: args =>
        docks.find(String(args.notebook), String(args.path)) ??
        docks.open(args as unknown as IDocked, undefined, false, false)
    });
    void restorer?.restore(docks.tracker, {
      command: OPEN_DOCKED,
      args: widget => ({ ...docks.state(widget) }),
      name: widget => {
        const state = docks.state(widget);
        return state ? `${state.notebook}:${state.path}` : widget.id;
      }
    });
    // Each notebook renders its docking requests (so a request knows which notebook to dock beside), and
    // freezes its inline dashboards when its kernel goes.
    app.docRegistry.addWidgetExtension('Notebook', {
      createNew: (widget, context) => {
        const notebook = widget as unknown as INotebookPanelLike & {
          content: { rendermime: { addFactory(factory: IRenderMime.IRendererFactory, rank?: number): void } };
        };
        notebook.content.rendermime.addFactory(
          dockRendererFactory(docks, () => ({ id: widget.id, path: context.path })),
          0
        );
        freezeOnKernelLoss(notebook, context);
      }
    });

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
            choices.set(`${page.name} — ${cluster.name} (${cluster.scheduler_address})`, [page, cluster]);
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
