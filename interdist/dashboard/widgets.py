"""The widgets the inline dashboard is made of, beyond ipywidgets' own: ``DashboardBox``, the box that keeps
the dashboard alive and a static snapshot of it, and ``LiveBokehModel``, a Bokeh view whose state is current
whenever a frontend reads it. ipywidgets, Bokeh and ``jupyter_bokeh`` are imported at the first use. Split from
``inline.py``, which re-exports ``DashboardBox``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from interdist.dashboard import bokehjs
from interdist.dashboard.snapshot import snapshot_html

if TYPE_CHECKING:
    from interdist.dashboard.inline import InlineDashboard


@functools.cache
def _box_class() -> Any:
    import ipywidgets as w

    class _DashboardBox(w.VBox):  # type: ignore[misc]  # ipywidgets is untyped
        """A VBox that keeps its dashboard alive (``box.dashboard``) as long as it is shown.

        It carries the class ``interdist-dashboard`` and a hidden ``HTML`` child (class
        ``interdist-snapshot-widget``) holding the dashboard's state as static HTML
        (``snapshot.snapshot_html``), kept current by the redraws: what the JupyterLab extension
        puts in the dashboard's place once its kernel is gone (see ``interdist.dashboard.snapshot``).
        """

        dashboard: InlineDashboard | None = None
        snapshot: Any = None  # the hidden HTML child

        def update_snapshot(self) -> None:
            """Put the dashboard's current state in the hidden snapshot child (sent only when it changed)."""
            dashboard, child = self.dashboard, self.snapshot
            if dashboard is None or child is None:
                return
            threshold_s = float(getattr(dashboard.views.get("status"), "threshold_s", 5.0))
            text = snapshot_html(dashboard.model, threshold_s)
            if child.value != text:
                child.value = text

        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            # Shown (a cell's result or display()): first the output that loads BokehJS, saved with
            # the cell so that a reloaded page loads it again, then the views, drawn from the current state.
            bokehjs.publish()
            if self.dashboard is not None:
                self.dashboard.resync()
            bundle = super()._repr_mimebundle_(**kwargs)
            # the state as static HTML too, for frontends without widgets (nbconvert, static viewers)
            if isinstance(bundle, dict) and self.snapshot is not None and self.snapshot.value:
                bundle["text/html"] = self.snapshot.value
            return bundle

    return _DashboardBox


@functools.cache
def _live_bokeh_model_class() -> Any:
    from bokeh.core.json_encoder import serialize_json
    from jupyter_bokeh import BokehModel

    class LiveBokehModel(BokehModel):  # type: ignore[misc]  # jupyter_bokeh is untyped
        """A ``BokehModel`` whose state, whenever a frontend reads it, holds its document as it is now.

        ``render_bundle`` is the document as it was when last set; the changes since went
        out as patches to the views open then. A page reloaded while the kernel runs asks
        for every widget's state (``request_states``) and would draw those views as they
        were first shown ("no variables yet" beside a running dashboard).
        """

        def __init__(self, model: Any, lock: Any, before: Callable[[], Any] | None = None, **kwargs: Any) -> None:
            self._interdist_lock = lock  # first: BokehModel.__init__ already sends the state (get_state)
            self._interdist_before = before  # brings the view up to the model (one in a hidden tab may lag)
            super().__init__(model, **kwargs)

        def _sync_model(self, model: Any, content: dict[str, Any], buffers: list[Any]) -> None:
            # The browser sends back every change of its document, the rows the kernel streamed to it
            # included: applied again here, they doubled the Python source's rows (288 rows for 162
            # measured), and the next full redraw (a tab switch, a reload) drew every bar twice. The views'
            # rows only ever come from the kernel: rows from the browser are dropped; the rest (a widget's
            # value, a range the user panned) is applied under the dashboard's lock, as redraws are.
            if content.get("event") == "jsevent" and content.get("kind") in ("ColumnsStreamed", "ColumnsPatched"):
                return
            with self._interdist_lock:
                super()._sync_model(model, content, buffers)

        def get_state(self, key: Any = None, drop_defaults: bool = False) -> Any:
            state = super().get_state(key, drop_defaults)
            if "render_bundle" in state:
                with self._interdist_lock:
                    if self._interdist_before is not None:
                        self._interdist_before()
                    state["render_bundle"] = serialize_json(self._model_to_traits(self._model))
            return state

    return LiveBokehModel


def DashboardBox(children: list[Any]) -> Any:  # noqa: N802 - named as the widget class it makes
    import ipywidgets as w

    snapshot = w.HTML(value="", layout=w.Layout(display="none"))
    snapshot.add_class("interdist-snapshot-widget")
    box = _box_class()([*children, snapshot])
    box.add_class("interdist-dashboard")
    box.snapshot = snapshot
    return box
