"""Where a replica calls its user's function: the one place an interrupt from the notebook may land,
what the function prints, and which frames of a failure are the user's.

The notebook's Kernel > Interrupt reaches a replica as a ``KeyboardInterrupt`` raised in the thread
that runs its program (``worker/thread.py``), but only while that thread runs the user's own code:
below :func:`call_user`, with no interdist frame in between. Inside interdist's code (a collective
half sent, a variable update, ``merge_fn``, the bookkeeping around a program) it waits, and the
step's abort releases the collectives instead, so an interrupt never leaves a transport, a
variable or a reply half done.

**Output.** On a worker (:func:`enable_capture`), what a replica's thread writes to ``sys.stdout``
and ``sys.stderr`` while it runs a program (``print``, a ``logging`` handler that writes to
``sys.stderr``) is kept (:func:`begin_output`) and travels back with the step's reply; the notebook
prints it as ``[replica r] ...`` in the cell that ran the step (``client/group.py``). Its warnings
travel as warnings: the notebook issues them again, under its own filters. Other threads write to
the worker's own streams, as before.

**Tracebacks.** :func:`user_traceback` cuts a replica's failure down to the user's frames, for the
exception the notebook raises and for its text.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from interdist import autodiff

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

#: What one replica's output may take in one step's reply; the rest is counted, not kept.
OUTPUT_LIMIT = 64 * 1024


def call_user(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: a replica function (or a fused loop's step function) of the user; a value
    it computed on a GradientTape leaves as its plain value (as a TF tensor leaves a tape)."""
    return autodiff.detach(fn(*args, **kwargs))


def in_user_code(frame: FrameType | None) -> bool:
    """Whether ``frame`` (a thread's innermost frame) is the user's code called by :func:`call_user`."""
    while frame is not None:
        code = frame.f_code
        if code is call_user.__code__:
            return True
        if code.co_filename.startswith(_PACKAGE_DIR):
            return False  # interdist's own code (called from the user's, or not in a replica function at all)
        frame = frame.f_back
    return False


# -- output -------------------------------------------------------------------------
class Output:
    """One replica's output in one step: ``[(stream, text), ...]`` in the order written, bounded."""

    __slots__ = ("chunks", "dropped", "size", "warned")

    def __init__(self) -> None:
        self.chunks: list[list[str]] = []  # [stream, text]: "stdout" or "stderr"
        self.size = 0
        self.dropped = 0  # characters past OUTPUT_LIMIT
        self.warned: list[list[Any]] = []  # [category "module:qualname", message, filename, lineno]: warnings

    def write(self, stream: str, text: str) -> None:
        room = OUTPUT_LIMIT - self.size
        if len(text) > room:
            self.dropped += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        if not text:
            return
        self.size += len(text)
        if self.chunks and self.chunks[-1][0] == stream:
            self.chunks[-1][1] += text
        else:
            self.chunks.append([stream, text])

    def as_reply(self) -> list[list[str]] | None:
        """The reply's ``output``, or None when nothing was written."""
        if self.dropped:
            self.chunks.append(["stderr", f"… {self.dropped} more characters (kept: {OUTPUT_LIMIT} a step)\n"])
        return self.chunks or None


_capturing = threading.local()


class _Router(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` of a worker: a write from a thread that captures goes to its
    ``Output``, any other to the stream it wraps."""

    def __init__(self, name: str, stream: Any) -> None:
        self._name = name
        self._stream = stream

    def write(self, text: str) -> int:
        out: Output | None = getattr(_capturing, "output", None)
        if out is None:
            return int(self._stream.write(text))
        out.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        if getattr(_capturing, "output", None) is None:
            self._stream.flush()

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return int(self._stream.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]  # the wrapped stream's
        return str(getattr(self._stream, "encoding", "utf-8"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


_enabled = False
_show_warning: Any = None  # the process's own ``warnings.showwarning``, for the threads that do not capture

#: Warnings one replica's step keeps (their text repeats in a loop; the notebook shows each place once).
WARNINGS_LIMIT = 64


def _keep_warning(
    message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: str | None = None
) -> None:
    """``warnings.showwarning`` on a worker: a warning of a thread that captures goes back with its step's reply,
    to be issued again in the notebook (``replica_output.issue_warnings``), where the script's filters decide whether it
    shows (``ignore``, ``error``, once per place); any other, as before."""
    out: Output | None = getattr(_capturing, "output", None)
    if out is None or file is not None:
        _show_warning(message, category, filename, lineno, file, line)
        return
    if len(out.warned) < WARNINGS_LIMIT:
        out.warned.append([f"{category.__module__}:{category.__qualname__}", str(message), filename, lineno])


def enable_capture() -> None:
    """Keep what replica programs write in this process (a worker's): ``sys.stdout``/``sys.stderr`` route
    each thread's writes, and ``warnings.showwarning`` their warnings. Not in the notebook, where the default
    strategy's replica writes to the cell."""
    global _enabled, _show_warning
    if _enabled:
        return
    _enabled = True
    _show_warning, warnings.showwarning = warnings.showwarning, _keep_warning
    if not isinstance(sys.stdout, _Router):
        sys.stdout = _Router("stdout", sys.stdout)
    if not isinstance(sys.stderr, _Router):
        sys.stderr = _Router("stderr", sys.stderr)


def begin_output() -> Output | None:
    """Keep what this thread writes from now on, until :func:`end_output` (None where capture is off)."""
    if not _enabled:
        return None
    out = Output()
    _capturing.output = out
    return out


def end_output(out: Output | None) -> list[list[str]] | None:
    """Stop keeping this thread's writes; what ``out`` kept, as the reply's ``output``."""
    if out is None:
        return None
    _capturing.output = None
    return out.as_reply()


# -- tracebacks -----------------------------------------------------------------------
def _interdist_frame(tb: TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR)


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with interdist's frames left out: from the user's function (below :func:`call_user`) on,
    without the frames of interdist's own code it called (a collective that raised). None when no frame
    is left (a failure in interdist's own program): the caller then keeps ``tb`` as it is."""
    frames: list[TracebackType] = []
    t = tb
    while t is not None:
        if t.tb_frame.f_code is call_user.__code__:
            frames = []  # what came before is how interdist got to the user's function
        elif not _interdist_frame(t):
            frames.append(t)
        t = t.tb_next
    out: TracebackType | None = None
    for t in reversed(frames):
        out = TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def trim_traceback(exc: BaseException) -> tuple[str, list[list[Any]]]:
    """Cut ``exc``'s traceback (and those of the exceptions it chains) to the user's frames.

    Returns its text and its frames as ``[file, line, function, (column, end column)]``, from which the notebook
    builds the traceback it raises with (``client/replies.py``): the notebook has the source of a
    notebook cell in its ``linecache``; a worker has not.
    """
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        cut = user_traceback(e.__traceback__)
        if cut is not None:
            e.__traceback__ = cut
        e = e.__cause__ or e.__context__
    frames: list[list[Any]] = []
    for f in traceback.extract_tb(exc.__traceback__):
        cols = [f.colno, f.end_colno] if f.end_lineno == f.lineno and f.colno is not None else []
        frames.append([f.filename, f.lineno, f.name, *cols])
    return "".join(traceback.format_exception(exc)), frames
