/**
 * An inline dashboard whose kernel is gone becomes a static snapshot.
 *
 * The inline dashboard (`strategy.dashboard()`) is an ipywidget. When its notebook's kernel
 * restarts, shuts down or dies, ipywidgets marks each of its views disconnected (a broken-chain
 * icon on every part of it) and, after a page reload, shows "Error displaying widget: model not
 * found" in its place. The dashboard carries its own state as static HTML, in a hidden child that
 * its redraws keep current (`interdist/dashboard/snapshot.py`). So as the kernel goes, each
 * dashboard in that notebook is replaced, in the notebook's model, by a plain `text/html` output:
 * a banner that says what happened, then that snapshot (from the dashboard's view when this page
 * drew it; else the `text/html` its output was displayed with, its state as first shown). It
 * renders at once, is saved with the notebook, and renders the same after a reload, with or
 * without this extension (and in nbviewer or GitHub). The CSS (`style/base.css`) hides the
 * broken-chain icons of a disconnected dashboard that has no snapshot (one from an older interdist).
 *
 * Why here and not in the kernel: an `update_display` sent by the kernel as it shuts down reaches
 * nothing. `KernelConnection.restart()` disposes the kernel's futures and comms and forgets which
 * outputs hold which display id before it asks the server to restart, and drops messages of the
 * old session; and after a reload no output is tied to a display id any more.
 */
import type { DocumentRegistry } from '@jupyterlab/docregistry';
import type { Widget } from '@lumino/widgets';

/** What is used of a notebook panel (typed by shape: `@jupyterlab/notebook` is not a dependency). */
export interface INotebookPanelLike extends Widget {
  content: Widget & { widgets: ReadonlyArray<ICellLike> };
}

interface ICellLike {
  model: {
    type: string;
    outputs?: {
      readonly length: number;
      get(index: number): { data: Record<string, unknown> };
      set(index: number, output: any): void;
    };
  };
  outputArea?: { widgets: ReadonlyArray<Widget> };
}

const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

/** Kernel statuses after which the notebook's widgets are gone for good. */
const GONE: Record<string, string> = {
  restarting: 'restarted',
  autorestarting: 'died and restarted',
  dead: 'died',
  terminating: 'shut down'
};

/** A notebook's kernel goes: freeze its dashboards. */
export function freezeOnKernelLoss(
  panel: INotebookPanelLike,
  context: DocumentRegistry.IContext<DocumentRegistry.IModel>
): void {
  const session = context.sessionContext;
  session.statusChanged.connect((_, status) => {
    const what = GONE[status];
    if (what && !context.isDisposed) {
      freeze(panel, what);
    }
  });
  session.kernelChanged.connect((_, change) => {
    if (change.oldValue && !context.isDisposed) {
      freeze(panel, change.newValue ? 'was changed' : 'shut down');
    }
  });
}

/**
 * Replace each dashboard in `panel` by its snapshot; how many were. The snapshot is the one its view holds
 * (its last state); for a dashboard not drawn on this page (a reloaded page that had not drawn it yet), the
 * one its output's bundle holds (as it was when displayed).
 */
export function freeze(panel: INotebookPanelLike, what: string): number {
  let frozen = 0;
  for (const cell of panel.content.widgets) {
    const outputs = cell.model.outputs;
    if (cell.model.type !== 'code' || !outputs) {
      continue;
    }
    for (let index = 0; index < outputs.length; index++) {
      const data = outputs.get(index).data;
      if (!data[WIDGET_MIME]) {
        continue;
      }
      const node = cell.outputArea?.widgets[index]?.node;
      const view = node?.querySelector('.interdist-dashboard .interdist-snapshot-widget .widget-html-content');
      const last = view?.innerHTML.trim();
      const html = data['text/html'];
      const shown = Array.isArray(html) ? html.join('') : typeof html === 'string' ? html : '';
      if (last) {
        outputs.set(index, snapshotOutput(last, what, 'as it last was'));
      } else if (shown.includes('interdist-snapshot')) {
        outputs.set(index, snapshotOutput(shown, what, 'as it was when shown (this page had not drawn it since)'));
      } else {
        continue;
      }
      frozen++;
    }
  }
  return frozen;
}

/** The output that takes a dashboard's place: a banner, then its last state. */
export function snapshotOutput(html: string, what: string, state: string): any {
  const when = new Date().toLocaleTimeString();
  const banner =
    "<div class='interdist-frozen-banner' style='padding:4px 8px;margin:0 0 6px;border-left:4px solid #9ca3af;" +
    "background:#f3f4f6;color:#374151;font-size:13px'>" +
    `<b>Kernel ${what}</b> at ${when}: the interdist dashboard ${state}, a static snapshot. ` +
    'Run its cell again for a live one.</div>';
  return {
    output_type: 'display_data',
    data: {
      'text/html': `<div class='interdist-frozen'>${banner}${html}</div>`,
      'text/plain': `interdist dashboard: kernel ${what} at ${when}; its last state is kept as HTML`
    },
    metadata: { interdist: { frozen: true } }
  };
}
