"""What the replicas wrote and warned in a step, shown in the notebook (``DaskGroup.execute``, group.py).

Their output is printed in the cell that ran the step, each line labelled ``[replica r]``; their warnings are
issued again here, under this process's filters (``replica/user_code.py`` keeps both on the workers).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from interdist.protocol import Reply


def show_output(replies: list[Reply]) -> None:
    """Print what each replica wrote in the step, ``[replica r] `` before each line, in rank order: to
    this process's stdout and stderr, so in a notebook to the cell that ran the step."""
    for rank, rep in enumerate(replies):
        chunks = rep.get("output")
        if not chunks:
            continue
        prefix = f"[replica {rank}] "
        for name, text in chunks:
            stream = sys.stderr if name == "stderr" else sys.stdout
            lines = text.splitlines(keepends=True)
            stream.write("".join(prefix + (ln if ln.endswith("\n") else ln + "\n") for ln in lines))
        sys.stdout.flush()
        sys.stderr.flush()


#: The registry of the warnings replicas raised (``issue_warnings``): one for the process, so that a warning
#: a loop of steps raises shows once per place, as Python shows a script's own.
_WARNED: dict[Any, Any] = {}


def issue_warnings(replies: list[Reply]) -> None:
    """Issue again, here, the warnings each replica's function raised in the step (in rank order), under this
    process's filters: a script's ``warnings.simplefilter("ignore")``, ``-W error``, ``pytest.warns`` and
    ``catch_warnings`` see them, and the default shows each place once (``_WARNED``), not once per step and
    replica, labelled with the replica that raised it first. The category is the replica's when this process
    has it (builtins, a class of the script), else ``UserWarning``."""
    for rank, rep in enumerate(replies):
        raised = rep.get("user_warnings")
        if not raised:
            continue
        shown = warnings.showwarning
        if _printed_by_python():  # shown labelled; a recorder's (catch_warnings, pytest) sees them as they are
            warnings.showwarning = _labelled(rank)
        try:
            for category, message, filename, lineno in raised:
                warnings.warn_explicit(message, _category(category), filename, lineno, registry=_WARNED)
        finally:
            warnings.showwarning = shown


def _printed_by_python() -> bool:
    """Whether a warning issued now is printed by Python's own ``showwarning`` (not recorded by
    ``catch_warnings(record=True)``, which keeps ``showwarning`` and swaps the function behind it)."""
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    return warnings.showwarning is getattr(warnings, "_showwarning_orig", None) and (
        getattr(impl, "__module__", None) == "warnings" and getattr(impl, "__name__", None) == "_showwarnmsg_impl"
    )


def _labelled(rank: int) -> Any:
    def labelled(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        text = warnings.formatwarning(message, category, filename, lineno, line)
        stream = sys.stderr if file is None else file
        stream.write("".join(f"[replica {rank}] {ln}" for ln in text.splitlines(keepends=True)))

    return labelled


def _category(path: str) -> type[Warning]:
    module, _, qualname = path.partition(":")
    found: Any = sys.modules.get(module)
    for name in qualname.split("."):
        found = getattr(found, name, None)
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning
