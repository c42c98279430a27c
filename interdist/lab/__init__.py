"""interdist in JupyterLab: the Jupyter server extension behind the sidebar.

``pip install 'interdist[lab]'`` installs the prebuilt JupyterLab extension
(``@interdist/jupyterlab``) and enables this server extension, which answers
``GET /interdist/clusters`` (behind Jupyter's own authentication) with the live
embedded interdist clusters of this user and their interdist dashboard pages.
See :mod:`interdist.lab.registry` for how clusters are found.
"""

from __future__ import annotations

from typing import Any


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "../labextension", "dest": "@interdist/jupyterlab"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "interdist.lab"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from interdist.lab.handlers import setup_handlers

    setup_handlers(serverapp.web_app)
    serverapp.log.info("interdist: /interdist/clusters registered")
