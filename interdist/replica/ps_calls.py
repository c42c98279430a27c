"""How a step (and the notebook) calls handlers on ps and worker tasks: ``Connection``, watched calls.

A call to a parameter server that cannot connect, or whose connection breaks, asks the scheduler
whether the task is still there (``UnavailableError`` when gone); while it waits its task is watched
(``ps_liveness``: ``TaskFrozenError`` when frozen). Split from ``ps_step.py``, which re-exports it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from interdist.errors import TaskFrozenError, UnavailableError
from interdist.replica import ps_liveness

#: Seconds a call waits to connect to a parameter server before asking the scheduler whether it is
#: still there (Dask's own connect timeout is 30 s: a dead ps must be named sooner).
PS_CONNECT_TIMEOUT = 2.0


def unavailable(task: str, address: str, why: str) -> UnavailableError:
    if task.startswith("/job:worker/"):
        return UnavailableError(f"worker {task} (Dask worker {address}) is unavailable: {why}", task=task)
    return UnavailableError(
        f"parameter server {task} (Dask worker {address}) is unavailable: {why}. A parameter server's "
        "variables are lost with its process: once it is back (a nanny restarts it, or start a worker "
        "with the same name), call strategy.recover(checkpoint) to restore them from the last checkpoint "
        "and go on (TF's answer: restart the parameter server and restore from a checkpoint)",
        task=task,
    )


class Connection:
    """Calls handlers on workers from a thread that is not the event loop's.

    A call to a parameter server (its address in ``tasks``) that cannot connect within
    ``PS_CONNECT_TIMEOUT``, or whose connection breaks, asks the scheduler whether the worker is
    still there: gone, it raises ``UnavailableError`` naming the task; there, it is tried once more
    with Dask's own timeout (every ps handler may run twice: a step's updates apply once).

    While such a call waits, its task is watched (``ps_liveness``): a frozen one (stopped, or not
    answering) raises ``TaskFrozenError`` naming it within about ``settings.frozen_after`` seconds
    (``2 * frozen_after`` where its process state cannot be seen); a slow one that answers is waited for.
    """

    #: ps addresses found gone: later calls to them fail at once (``ClientConnection`` keeps them).
    lost: dict[str, UnavailableError]
    #: tasks found frozen: later calls to them look again first, and fail at once while still frozen.
    frozen: dict[str, TaskFrozenError]

    def _sync(self, coro_fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def _rpc(self, address: str) -> Any:
        raise NotImplementedError

    def _scheduler(self) -> Any:
        raise NotImplementedError

    def call_many(
        self,
        calls: list[tuple[str, str, dict[str, Any]]],
        tasks: dict[str, str] | None = None,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """``[(address, handler, kwargs)]`` concurrently; the results in order. ``tasks``: the ps
        tasks' names by address, for the calls that go to parameter servers (watched, see the class).
        ``return_exceptions``: a call's error is its result instead of being raised."""
        tasks = tasks or {}
        lost = getattr(self, "lost", None)
        if lost and not return_exceptions:
            for a, _, _ in calls:
                if a in lost:
                    raise lost[a]
        memo = getattr(self, "frozen", None)

        async def one(a: str, h: str, kw: dict[str, Any]) -> Any:
            if a not in tasks:
                return await getattr(self._rpc(a), h)(**kw)
            self._learn_soon(a)
            if memo and a in memo:
                await self._check_still_frozen(a, memo)
            judge = ps_liveness.Judge(a)
            try:
                return await self._watched(a, tasks[a], h, kw, PS_CONNECT_TIMEOUT, judge)
            except UnavailableError as e:  # raised by the ps itself (a new process, a late update) or the watch
                raise self._named(a, tasks[a], e, memo) from None
            except (TimeoutError, OSError) as e:
                if not await self._listed(a):
                    err = unavailable(tasks[a], a, f"its worker left the cluster ({type(e).__name__}: {e})")
                    if lost is not None:
                        lost[a] = err
                    raise err from None
                try:  # still listed: slow, or the scheduler has not seen it die yet
                    return await self._watched(a, tasks[a], h, kw, None, judge)
                except UnavailableError as e2:
                    raise self._named(a, tasks[a], e2, memo) from None
                except (TimeoutError, OSError) as e2:
                    raise unavailable(tasks[a], a, f"it does not answer ({type(e2).__name__}: {e2})") from None

        async def go() -> list[Any]:
            return list(
                await asyncio.gather(*[one(a, h, kw) for a, h, kw in calls], return_exceptions=return_exceptions)
            )

        return list(self._sync(go)) if calls else []

    def call_tasks(self, calls: list[tuple[str, str, dict[str, Any], str]]) -> list[Any]:
        """``[(address, handler, kwargs, task)]`` concurrently, each watched (worker tasks: the
        coordinator's steps and datasets); a call's error is its result: ``TaskFrozenError`` when its
        task is frozen, ``OSError``/``TimeoutError`` when it is gone."""

        async def one(a: str, h: str, kw: dict[str, Any], task: str) -> Any:
            self._learn_soon(a)
            return await self._watched(a, task, h, kw, None, ps_liveness.Judge(a))

        async def go() -> list[Any]:
            return list(await asyncio.gather(*[one(*c) for c in calls], return_exceptions=True))

        return list(self._sync(go)) if calls else []

    def call_task(self, address: str, handler: str, kwargs: dict[str, Any], task: str) -> Any:
        """One call of ``call_tasks``; its error is raised."""
        result = self.call_tasks([(address, handler, kwargs, task)])[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _named(
        self, address: str, task: str, e: UnavailableError, memo: dict[str, TaskFrozenError] | None
    ) -> UnavailableError:
        """``e`` naming ``task``; a frozen task is remembered (``memo``)."""
        if isinstance(e, TaskFrozenError):
            err = e if e.task is not None else frozen_error(task, address, str(e))
            if memo is not None:
                memo[address] = err
            return err
        return e if e.task is not None else unavailable(task, address, str(e))

    async def _call(
        self,
        address: str,
        handler: str,
        kwargs: dict[str, Any],
        connect_timeout: float | None,
        comms: list[Any] | None = None,
    ) -> Any:
        """One call, connecting within ``connect_timeout`` seconds (None: Dask's own timeout); the
        comm it uses is appended to ``comms`` (so that a watch can abort it)."""
        raise NotImplementedError

    async def _watched(
        self,
        address: str,
        task: str,
        handler: str,
        kwargs: dict[str, Any],
        connect_timeout: float | None,
        judge: ps_liveness.Judge,
    ) -> Any:
        """``_call``, looking at its task while it waits (``ps_liveness``); a frozen task raises
        ``TaskFrozenError`` and the call's connection is aborted (never put back in the pool)."""
        loop = asyncio.get_running_loop()
        if judge.gone:  # seen gone by an earlier attempt of this call
            raise OSError(f"the process of {task} at {address} is gone")
        comms: list[Any] = []
        call = asyncio.ensure_future(self._call(address, handler, kwargs, connect_timeout, comms))
        # An update carries the time after which its ps refuses it (``not_after``): the call gives up
        # only after that, so an update given up on is never applied late.
        not_after = kwargs.get("not_after")
        earliest = loop.time() + (max(0.0, not_after - time.time()) + 1.0 if not_after is not None else 0.0)
        probe: asyncio.Future[bool] | None = None
        probe_started = 0.0
        wait = ps_liveness.FIRST_CHECK
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=wait)
                if done:
                    return call.result()
                wait = ps_liveness.CHECK_EVERY
                now = loop.time()
                why = judge.look(now)
                if judge.reset:  # this process was stopped itself: the probe in flight says nothing
                    if probe is not None:
                        probe.cancel()
                    probe, judge.reset = None, False
                if judge.gone:
                    raise OSError(f"the process of {task} at {address} is gone")
                if why is None:
                    if probe is not None and probe.done():
                        judge.heard(bool(probe.result()), probe_started)
                        probe = None
                    if probe is None:
                        probe_started = now
                        probe = asyncio.ensure_future(self._probe(address, judge.probe_bound()))
                    why = judge.silence(now, probe_started)
                if why is not None and now >= earliest:
                    raise frozen_error(task, address, why)
        finally:
            if probe is not None and not probe.done():
                probe.cancel()
            if not call.done():
                _abandon(call, comms)

    async def _probe(self, address: str, bound: float) -> bool:
        """Whether the task's event loop answers Dask's ``identity`` within ``bound`` seconds."""
        comms: list[Any] = []
        task = asyncio.ensure_future(self._call(address, "identity", {}, bound, comms))
        try:
            done, _ = await asyncio.wait({task}, timeout=bound)
            return bool(done) and not task.cancelled() and task.exception() is None
        finally:
            if not task.done():
                _abandon(task, comms)

    async def _check_still_frozen(self, address: str, memo: dict[str, TaskFrozenError]) -> None:
        """A task found frozen before: raise at once if it still is, else forget it."""
        pid = ps_liveness.local_pid(address)
        answers = None
        if pid is None or ps_liveness.process_state(pid) in (None, "gone"):
            answers = await self._probe(address, STILL_FROZEN_PROBE)
        err = memo.get(address)
        if err is not None and ps_liveness.still_frozen(address, answers):
            raise TaskFrozenError(str(err), task=err.task)
        memo.pop(address, None)

    def _learn_soon(self, address: str) -> None:
        """Ask the task at ``address`` for its pid and host once, in the background (``ps_liveness``)."""
        if address in ps_liveness.peers or address in _learning:
            return

        async def learn() -> None:
            try:
                info = await asyncio.wait_for(
                    self._call(address, "interdist_ps_whoami", {}, PS_CONNECT_TIMEOUT), 2 * PS_CONNECT_TIMEOUT
                )
                ps_liveness.learn(address, info)
            except Exception:  # noqa: BLE001, S110 - without its pid, the task is watched by probes
                pass
            finally:
                _learning.pop(address, None)

        _learning[address] = asyncio.ensure_future(learn())

    async def _listed(self, address: str) -> bool:
        """Whether the scheduler still lists the worker at ``address`` (waits up to 1 s for it to leave:
        a killed worker's stream closes at once, but the scheduler may not have read that yet)."""
        deadline = asyncio.get_running_loop().time() + 1.0
        while True:
            try:
                info = await asyncio.wait_for(self._scheduler().identity(n_workers=-1), 5)
            except (TimeoutError, OSError):
                return True  # the scheduler does not answer: no verdict, keep trying the worker
            if address not in info.get("workers", {}):
                return False
            if asyncio.get_running_loop().time() >= deadline:
                return True
            await asyncio.sleep(0.1)


#: Seconds a call to a task found frozen before waits for a probe's answer before failing at once.
STILL_FROZEN_PROBE = 2.0

# The ``whoami`` calls in flight, by address (kept referenced until done).
_learning: dict[str, asyncio.Future[None]] = {}


def _abandon(call: asyncio.Future[Any], comms: list[Any]) -> None:
    """Stop waiting for ``call``: abort its connection (a frozen peer would never let it close
    cleanly, and a pooled comm must never carry this call's late reply to the next one)."""
    for comm in comms:
        comm.abort()
    call.cancel()
    call.add_done_callback(lambda f: f.cancelled() or f.exception())


def frozen_error(task: str, address: str, why: str) -> TaskFrozenError:
    if not task.startswith("/job:worker/"):
        return TaskFrozenError(
            f"parameter server {task} (Dask worker {address}) is frozen: {why}. What the call sent was not "
            "applied (a ps refuses an update that reaches it after its sender gave up). Its variables are "
            "intact: once its process resumes (SIGCONT), the strategy goes on; if it never does, restart "
            "its worker and call strategy.recover(checkpoint)",
            task=task,
        )
    return TaskFrozenError(
        f"worker {task} (Dask worker {address}) is frozen: {why}. Its step is run on another worker; "
        "once its process resumes (SIGCONT), it takes steps again",
        task=task,
    )
