"""Load BokehJS into the notebook page along with the dashboard: offline, once per page, no banner.

``jupyter_bokeh``'s widget views call ``window.Bokeh`` but never load it: without
``bokeh.io.output_notebook()`` every view is a "Failed to create view ... reading
'require'" box. So the dashboard's display starts with one more output, the one
``output_notebook`` would publish, made for this use:

- INLINE: BokehJS itself travels in the output (about 2 MB: the core, widgets and
  tables bundles, the only ones the views need), so no CDN and no server is needed.
- Saved with the cell: a reloaded (trusted) notebook renders it again before the
  widget views are created, so the views come back after a page reload.
- Once per page: the script loads a bundle only when ``window.Bokeh`` lacks it, so a
  second dashboard, or JupyterLab rendering the output again, costs nothing.
- Two renderings of the same script: ``application/vnd.bokehjs_load.v0+json`` is run
  by jupyter_bokeh's renderer in JupyterLab and Notebook 7 (the pages where its
  widgets run), ``application/javascript`` by frontends that run JavaScript outputs
  in the page the widgets share (classic Notebook, VS Code). No ``text/plain``: where
  neither runs (an untrusted notebook, a static viewer) the output shows nothing.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bokeh.resources import Component

LOAD_MIME_TYPE = "application/vnd.bokehjs_load.v0+json"  # bokeh.io.notebook.LOAD_MIME_TYPE
JS_MIME_TYPE = "application/javascript"

# The bundles the views need, each with the attribute it sets on window.Bokeh once loaded
# ("" for the core bundle, which is window.Bokeh[version] itself).
COMPONENTS: dict[Component, str] = {"bokeh": "", "bokeh-widgets": "Widgets", "bokeh-tables": "Tables"}


@functools.cache
def loader_js() -> str:
    """The script: each bundle of ``COMPONENTS`` that ``window.Bokeh`` (this version) lacks, run in order."""
    from bokeh import __version__
    from bokeh.resources import Resources

    parts = []
    for component, attribute in COMPONENTS.items():
        source = Resources(mode="inline", components=[component]).js_raw[0]  # then bokeh's set_log_level line
        # A bundle is a script that expects `this` to be the window: run it as a function called on it.
        parts.append(f"[{json.dumps(attribute)}, function () {{\n{source}\n}}]")
    bundles = ",\n".join(parts)
    return (
        "(function (root) {\n"
        f"  const version = {json.dumps(__version__)};\n"
        "  const has = (attribute) => {\n"
        "    const bokeh = root.Bokeh === undefined ? undefined : root.Bokeh[version];\n"
        '    return bokeh !== undefined && (attribute === "" || bokeh[attribute] !== undefined);\n'
        "  };\n"
        f"  const bundles = [\n{bundles}\n  ];\n"
        "  for (const [attribute, load] of bundles) {\n"
        "    if (!has(attribute)) load.call(root);\n"
        "  }\n"
        "})(window);\n"
    )


def loader_bundle() -> dict[str, str]:
    """The output's data: the same script under both MIME types (see the module's docstring)."""
    js = loader_js()
    return {LOAD_MIME_TYPE: js, JS_MIME_TYPE: js}


def publish() -> None:
    """Publish the loader as a display_data output of the running cell."""
    from bokeh.io.notebook import publish_display_data

    publish_display_data(loader_bundle())
