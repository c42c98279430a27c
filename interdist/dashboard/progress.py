"""The dashboard model's account of the user's runs: the run each step belongs to (``run #13``, the number
the errors use), the training steps, and the steps finished and their rate.

``RunProgress`` is a base of ``DashboardModel`` (``model.py``), whose ``feed`` gives it the run events; split
from there.
"""

from __future__ import annotations

import bisect
import time
from collections import deque

from interdist import events
from interdist.dashboard.replica_state import FUSED_PROGRAM

# Bounded history: a long training run must not grow the notebook's memory.
MAX_STEPS = 5000
MAX_PENDING_STEPS = 64  # steps kept while waiting for a late replica's batch (its checksums, its finish)


class RunProgress:
    """The runs, steps and rates part of ``DashboardModel``: fed ``StepSent``, ``RunStarted`` and ``RunFinished``.

    >>> from interdist import events
    >>> from interdist.dashboard import DashboardModel
    >>> m = DashboardModel()
    >>> m.feed(events.RunStarted("g", 1, 0, 10.0, "step", "run"))
    >>> m.feed(events.RunFinished("g", 1, 0, 11.0, "step", "run", 1.0, True))
    >>> m.run_label(1), m.run_label(2), m.steps_finished
    ('run #1', 'after run #1', 1)
    """

    def __init__(self) -> None:
        self.steps_done: deque[tuple[float, int]] = deque(maxlen=MAX_STEPS)  # (time, step) of finished run steps
        self.steps_finished = 0  # all of them, also those that left steps_done
        self._starting: dict[int, set[int]] = {}  # step -> replicas that started it
        self._finishing: dict[int, set[int]] = {}  # step -> replicas that finished it
        self._counted: set[int] = set()  # steps already counted as finished
        self.running_step: int | None = None
        self.last_fn = ""
        self.runs = 0  # the user's run calls: the notebook's number (StepSent), else counted as they start
        self.run_of_step: dict[int, int] = {}  # step -> run number (the last MAX_STEPS)
        self._run_steps: list[int] = []  # the keys of run_of_step, sorted
        self._runs_forgotten = False  # the oldest steps' numbers were dropped (MAX_STEPS)
        self._fused: dict[int, int] = {}  # replica -> run number of the run_steps call it is inside
        self.train_steps = 0  # the user's steps seen: a run call is one, run_steps(n) n of them
        self.train_step_of: dict[int, int] = {}  # step -> its training step number (the last MAX_STEPS)

    def _number_run(self, step: int, number: int | None = None) -> int:
        """The user's run number of ``step``: a new one unless given, or already known."""
        known = self.run_of_step.get(step)
        if known is not None:
            return known
        if number is None:
            self.runs += 1
            number = self.runs
        self.runs = max(self.runs, number)
        self.run_of_step[step] = number
        bisect.insort(self._run_steps, step)
        if len(self.run_of_step) > MAX_STEPS:
            del self.run_of_step[self._run_steps.pop(0)]
            self._runs_forgotten = True
        return number

    def _sent(self, e: events.StepSent) -> None:
        """The notebook's own number for a call: its steps are named by it ("run #3"), as its errors do."""
        for step in range(e.step, e.step + max(1, e.steps)):
            self._number_run(step, e.run)
        self.last_fn = e.fn

    def _started(self, e: events.RunStarted) -> None:
        if e.program == FUSED_PROGRAM:  # one user call (run_steps): its inner steps share its number
            self._fused[e.replica] = self._number_run(e.step)
            return
        if e.program != "run":
            return
        self._number_run(e.step, self._fused.get(e.replica))
        if e.step not in self.train_step_of:
            self.train_steps += 1
            self.train_step_of[e.step] = self.train_steps
            if len(self.train_step_of) > MAX_STEPS:
                del self.train_step_of[next(iter(self.train_step_of))]
        self.last_fn = e.fn
        if e.step not in self._counted:
            self._starting.setdefault(e.step, set()).add(e.replica)
            self.running_step = e.step

    def _finished(self, e: events.RunFinished, world_size: int) -> None:
        """A replica finished ``e.step``; counted as finished once ``world_size`` replicas (and every one
        that started it) have."""
        if e.program == FUSED_PROGRAM:
            self._fused.pop(e.replica, None)
        if e.program != "run" or e.step in self._counted:
            return
        done = self._finishing.setdefault(e.step, set())
        done.add(e.replica)
        # Finished when every replica known to exist, and every one that started it, has
        # finished it. On a scheduler a replica is known once its first batch came, so
        # the first steps may count with fewer; a step is counted once.
        if done >= self._starting.get(e.step, set()) and len(done) >= world_size:
            self._counted.add(e.step)
            self._finishing.pop(e.step, None)
            self._starting.pop(e.step, None)
            self.steps_done.append((e.time, e.step))
            self.steps_finished += 1
            if self.running_step == e.step:
                self.running_step = None
        for s in [s for s in self._counted if s < e.step - MAX_PENDING_STEPS]:
            self._counted.discard(s)
        for d in (self._finishing, self._starting):
            for s in [s for s in d if s < e.step - MAX_PENDING_STEPS]:
                del d[s]

    def steps_per_second(self, window: int = 20) -> float:
        """Finished steps per second over the last ``window`` steps (0 before two have finished)."""
        recent = list(self.steps_done)[-window:]
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return 0.0
        return (len(recent) - 1) / (recent[-1][0] - recent[0][0])

    def recent_rate(self, window_s: float = 10.0, now: float | None = None) -> float:
        """Steps per second over the steps finished in the last ``window_s`` seconds (0 with fewer than two).

        Not since the start: a notebook idles between cells, and an average over that idle time
        (0.6 steps/s for a loop that ran at 4) says nothing about the loop.
        """
        now = time.time() if now is None else now
        times = [t for t, _ in list(self.steps_done)[-1000:] if t >= now - window_s]
        if len(times) < 2 or times[-1] <= times[0]:
            return 0.0
        return (len(times) - 1) / (times[-1] - times[0])

    def run_label(self, step: int) -> str:
        """``run #13`` for a step of the user's 13th ``run`` (or ``run_steps``) call, the number the errors
        use; for the engine's own programs (creating a variable, an assignment from the notebook) the
        run they came after: ``after run #13``, or ``before run #1``."""
        n = self.run_of_step.get(step)
        if n is not None:
            return f"run #{n}"
        i = bisect.bisect_left(self._run_steps, step)
        if i:
            return f"after run #{self.run_of_step[self._run_steps[i - 1]]}"
        return f"step {step}" if self._runs_forgotten else "before run #1"
