"""One replica: runs programs for its step inside a replica context, owns its state.

Knows nothing of Dask: a worker plugin (``plugin.py``) or the in-process group
(``local_group.py``) hands it a transport and an ``emit`` for events. The same
class therefore runs the default strategy in the notebook and each replica on a
worker.
"""

from __future__ import annotations

import functools
import pickle
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import cloudpickle

from interdist import _context, _gpu, _nest, events
from interdist._convert import small_values, summarize_with_sketch
from interdist.collectives.algorithms import AUTO, Collectives
from interdist.collectives.base import Transport
from interdist.config import settings
from interdist.errors import CollectiveAbortedError
from interdist.protocol import (
    VARIABLE_KEY,
    CreatedVariable,
    GroupSpec,
    Reply,
    StoreRef,
    resolving,
)
from interdist.protocol_errors import dump_exception
from interdist.replica import faults
from interdist.replica.context import ReplicaContext
from interdist.replica.event_rows import SENT, EventRows
from interdist.replica.results import encode, held_copy
from interdist.replica.user_code import begin_output, call_user, end_output, trim_traceback
from interdist.replica.view import make_view
from interdist.values.variables import PlainVariableProxy, plain_updates

if TYPE_CHECKING:
    from interdist.replica.central import CentralState

_T = TypeVar("_T")
_ENTERED, _EXITED, _DONE = events.ENTERED_ROW, events.EXITED_ROW, events.DONE_ROW


class Replica(EventRows):
    """State and execution of one replica of one group (its events: ``EventRows``)."""

    worker: Any  # the Dask worker, set by the worker plugin (replica programs that read Dask collections)
    central_state: CentralState  # central storage's bookkeeping, made on first use (replica/central.py)

    def __init__(
        self,
        group_id: str,
        rank: int,
        spec: GroupSpec,
        transport: Transport,
        emit: Callable[[dict[str, Any]], None],
        abort_peers: Callable[[int, str], None],
    ) -> None:
        self.group_id = group_id
        self.rank = rank
        self.spec = spec  # world_size, devices, kind, parameter_devices, ...
        self.world_size: int = spec["world_size"]
        self.devices: list[str] = spec["devices"]
        self.device: str = self.devices[rank]
        # GPU replicas keep their values as CuPy arrays on the worker's GPU (CUDA device 0 there).
        self.on_gpu = _gpu.is_gpu_device(self.device)
        if self.on_gpu:
            _gpu.require_gpu(f"the worker of replica {rank} ({self.device})")
        choice = spec.get("all_reduce") or {}  # from the strategy's cross_device_ops
        self.collectives = Collectives(
            transport,
            lambda: float(spec.get("timeout") or settings.collective_timeout),
            choice.get("algorithm", AUTO),
            choice.get("root", 0),
        )
        self.transport = transport
        self._sink = emit
        self.step_events = []
        # This step's collective rows not sent yet, and the one in progress (event_rows.py); the lock orders them
        self._rows = []
        self._rows_step = -1
        self._open = None
        self._emit_lock = threading.Lock()
        # idist.debug.inject (replica/faults.py): the fault armed here, and what the hooks read (only while a
        # user program runs, so that system programs neither fire nor drop it)
        self.injected: faults.Injected | None = None
        self.armed_fault: faults.Injected | None = None
        self.before_emit: Callable[[], None] | None = None  # called once before the next event (fused.py)
        self._abort_peers = abort_peers
        self.store: dict[str, Any] = {}
        self.variables: dict[int, Any] = {}
        self.step = -1
        self.seq = 0
        self.in_collective: tuple[str, int] | None = None  # (op, seq) of the collective this replica is in
        self.touched: set[int] = set()
        self.diverged: set[int] = set()
        self.shared_results: dict[int, Any] = {}  # id -> object, for this step's merge_call results
        self.warnings: list[str] = []
        self.lock = threading.Lock()  # one program at a time
        # Called with True when a program starts and False when it ends (central storage keeps
        # per-program read caches and update counts: replica/variable.py).
        self.program_hooks: list[Callable[[bool], None]] = []

        self.view = make_view(self)
        self.context = ReplicaContext._for_replica(self)

    # -- collectives ---------------------------------------------------------
    def collective(self, op: str, nbytes: int, call: Callable[[int, int, str], _T], resolve: bool = True) -> _T:
        """Run one collective with its events; ``call(step, seq, what)`` does it (``resolve=False``: arrays only)."""
        if self.armed_fault is not None:
            faults.fire(self, "collective", op)
        self.seq = seq = self.seq + 1
        what = f"{op} #{seq} of step {self.step} on replica {self.rank}"
        self.in_collective = (op, seq)  # named in the reply if the step fails in it (client/replies.py)
        aborted = self.transport.mailbox.aborted(self.step)
        if aborted is not None:
            # A step aborted before this replica got here (a peer failed, the notebook was interrupted):
            # send nothing, so that no peer can complete this collective (and apply an update) without it.
            raise CollectiveAbortedError(f"{what} was aborted: {aborted}")
        # The events, as rows of a ``collectives`` record (events.COLLECTIVES): the ENTERED row is kept open (``_open``)
        # until the EXITED one makes it a DONE row (one row, the commonest), or a flush meanwhile sends it on its own.
        step = self.step
        if self.before_emit is not None:
            self._before_event()
        entered = (_ENTERED, t_in := time.time(), op, seq, nbytes)
        if self._open is None:
            self._open = entered
        else:  # (a collective within another's call: the rows at once, the outer one's first)
            with self._emit_lock:
                outer, self._open = self._open, SENT  # (SENT first: a flush within ``_row`` must not send it too)
                if outer is not SENT:
                    self._row(outer)
                self._row(entered)
        try:
            if not resolve:
                result = call(step, seq, what)
            else:
                with resolving(self):  # handles in peers' payloads become this replica's objects
                    result = call(step, seq, what)
        except BaseException:
            with self._emit_lock:  # (``_open`` holds ours, or SENT or None: a nested one never leaves its own)
                unsent, self._open = self._open is entered, None
                if unsent:
                    self._row(entered)
            raise
        t = self.collectives.last_timing
        t_out, nb, alg, backend = time.time(), max(nbytes, t.nbytes), t.algorithm or op, self.transport.name
        with self._emit_lock:
            unsent, self._open = self._open is entered, None
            if unsent:
                self._row((_DONE, t_in, nbytes, t_out, op, seq, nb, alg, backend, t.wait_s, t.transfer_s))
            else:
                self._row((_EXITED, t_out, op, seq, nb, alg, backend, t.wait_s, t.transfer_s))
        self.in_collective = None
        return result

    def exchange(self, op: str, obj: Any, nbytes: int = 0) -> list[Any]:
        return self.collective(op, nbytes, lambda s, q, w: self.collectives.exchange(s, q, obj, w))

    # -- execution -----------------------------------------------------------
    def execute(
        self, step: int, fn_bytes: bytes, args_bytes: bytes, system: bool, buffers: list[Any] | None = None
    ) -> Reply:
        """Run one program for ``step``; never raises: failures become the reply.

        ``buffers``: the out-of-band buffers of ``args_bytes`` (pickle protocol 5), if any.
        """
        with self.lock:
            self.step = step
            self.seq = 0
            self.touched = set()
            self.warnings = []
            self.shared_results = {}
            self.created: list[CreatedVariable] = []  # variables this step's program created (view.py)
            self.plain_proxies: dict[int, PlainVariableProxy] = {}  # plain variables the program uses
            self.transport.mailbox.begin_step(step)
            for hook in self.program_hooks:
                hook(True)
            fn_name = "?"
            self.in_collective = None
            output = begin_output()  # what the program prints goes back with its reply (user_code.py)
            t0 = time.time()
            try:
                with resolving(self):
                    fn = cloudpickle.loads(fn_bytes)
                    args, kwargs = cloudpickle.loads(args_bytes, buffers=buffers or ())
                fn_name = getattr(fn, "__qualname__", getattr(fn, "__name__", type(fn).__name__))
                program = "run" if not system else fn_name
                self.emit_msg(events.RunStarted.msg(self.group_id, step, self.rank, t0, fn_name, program))
                held: dict[int, Any] = {}  # a user function's copies of held values (results.py)
                if args or kwargs:
                    deref = self._deref if system else functools.partial(held_copy, self, held)
                    args, kwargs = _nest.map_structure(deref, (args, kwargs))
                if self.on_gpu:
                    _gpu.use_device0()  # this thread's current device: the worker's GPU
                    args, kwargs = _gpu.inputs_to_device((args, kwargs))  # as TF places inputs on the device
                arg_ids: dict[int, int] = {}
                if system:
                    result = fn(self, *args, **kwargs)
                else:
                    arg_ids = {id(x): i for i, x in enumerate(_nest.flatten((args, kwargs))) if x is not None}
                    if self.injected is not None:
                        faults.begin(self, "run", fn_name)
                    if self.armed_fault is not None:
                        faults.fire(self, "step")
                    with _context.enter(self.view, self.context):
                        result = call_user(fn, args, kwargs)
                reply: Reply = {"ok": True, "result": dump_result(encode(self, result, step, arg_ids, held))}
            except BaseException as exc:  # noqa: BLE001 - every failure must reach the notebook
                secondary = isinstance(exc, CollectiveAbortedError)
                tb, frames = trim_traceback(exc)  # the user's frames only
                released = self._released_by(exc)
                if released is not None:  # a peer's failure or the notebook's interrupt: not one more failure
                    self.emit(
                        events.ReplicaReleased(
                            self.group_id, self.step, self.rank, time.time(), events.abort_culprit(released), released
                        )
                    )
                else:
                    self._abort_peers(self.step, f"replica {self.rank} raised {type(exc).__name__}: {exc}")
                    self.emit(
                        events.ReplicaFailed(
                            self.group_id, self.step, self.rank, time.time(), f"{type(exc).__name__}: {exc}", tb
                        )
                    )
                reply = {
                    "ok": False,
                    "secondary": secondary,
                    "error": dump_exception(exc),
                    "traceback": tb,
                    "type": type(exc).__name__,
                    "message": str(exc),
                    "frames": frames,
                }
                if self.in_collective is not None:
                    reply["collective"] = list(self.in_collective)
            finally:
                self._emit_variable_updates(step)
                for hook in self.program_hooks:
                    hook(False)
                trim = getattr(self.transport, "trim", None)
                if trim is not None:
                    trim()  # large shared-memory segments go back after each program
            self.emit_msg(
                events.RunFinished.msg(
                    self.group_id,
                    step,
                    self.rank,
                    time.time(),
                    fn_name,
                    "run" if not system else fn_name,
                    time.time() - t0,
                    reply["ok"],
                )
            )
            if self.injected is not None:
                faults.end(self)  # a user program that did not reach the armed fault drops it, with a warning
            if self.warnings:
                reply["warnings"] = list(self.warnings)
            if self.seq and reply["ok"]:
                reply["collectives"] = self.seq  # to tell a peer left waiting in the next one why
            if self.step != step and reply["ok"]:
                reply["last_step"] = self.step  # a fused program's: the step its function returned in
            printed = end_output(output)
            if printed:
                reply["output"] = printed
            if output is not None and output.warned:
                reply["user_warnings"] = output.warned
            with self._emit_lock:
                if self._rows or self._unsent():
                    self._flush_rows()
                reply["events"], self.step_events = self.step_events, []
            if self.created:
                reply["created"] = self.created
            updates = plain_updates(self.plain_proxies)
            if updates:
                reply["plain_updates"] = cloudpickle.dumps(updates)  # arrays: not msgpack-able
            return reply

    def _released_by(self, exc: BaseException) -> str | None:
        """Why the program was released, when ``exc`` is an abort's doing (a peer failed, the notebook was
        interrupted) rather than a failure of this replica's own; None for its own failure."""
        if not isinstance(exc, (CollectiveAbortedError, KeyboardInterrupt)):
            return None
        reason = self.transport.mailbox.aborted(self.step)
        if reason is None and isinstance(exc, CollectiveAbortedError):
            reason = str(exc).partition(" was aborted: ")[2] or str(exc)
        return reason

    def _deref(self, x: Any) -> Any:
        if isinstance(x, StoreRef):
            try:
                return self.store[x.key]
            except KeyError:
                raise KeyError(f"value {x.key} is no longer held by replica {self.rank}") from None
        return x

    def _emit_variable_updates(self, step: int) -> None:
        for var_id in sorted(self.touched):
            event = self.variable_event(var_id, step)
            if event is not None:
                self.emit(event)

    def variable_event(self, var_id: int, step: int) -> events.VariableUpdated | None:
        """The ``VariableUpdated`` event that describes this replica's copy of ``var_id`` now (None: no copy)."""
        var = self.variables.get(var_id)
        if var is None:
            return None
        norm, checksum, sketch = summarize_with_sketch(var.raw, events.SKETCH_BLOCKS, events.SMALL_VALUES)
        values = small_values(var.raw, events.SMALL_VALUES)
        return events.VariableUpdated(
            self.group_id, step, self.rank, time.time(), var_id, var.name, self.device, norm, checksum, values, sketch
        )

    def release(self, keys: list[str]) -> None:
        for k in keys:
            if k.startswith(VARIABLE_KEY):
                # The notebook's handle is gone: so is this copy (as a TF variable goes with its object).
                self.variables.pop(int(k[len(VARIABLE_KEY) :]), None)
            else:
                self.store.pop(k, None)


def dump_result(encoded: Any) -> bytes:
    """A reply's result: plain pickle (~10 us for the usual metadata, against ~55 us for cloudpickle),
    cloudpickle for what plain pickle cannot name (classes and functions made by the notebook's code)."""
    try:
        return pickle.dumps(encoded, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - PicklingError, AttributeError, TypeError for local objects
        data: bytes = cloudpickle.dumps(encoded)
        return data
