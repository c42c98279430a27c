"""The live dashboard: a model fed only by events, and Bokeh views of it.

Used inline (``strategy.dashboard()``) and as Dask dashboard pages
(``/individual-interdist-*``). ``dask scheduler --preload interdist.dashboard``
adds the pages to a scheduler started elsewhere: importing this module registers
them (the scheduler builds its dashboard before it calls ``dask_setup``), and
``dask_setup`` starts collecting events at once.
"""

from __future__ import annotations

from interdist.dashboard.inline import InlineDashboard, show
from interdist.dashboard.model import DashboardModel, ModelHub
from interdist.dashboard.pages import dask_setup, register_pages

register_pages()

__all__ = ["DashboardModel", "InlineDashboard", "ModelHub", "dask_setup", "register_pages", "show"]
