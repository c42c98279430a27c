"""Record the event stream of a short training run into ``recorded_events.json``.

Run from the repository root: ``.venv/bin/python -m tests.dashboard.record_events``.
Times are rebased to start at 1000.0 s so the file reads easily; nothing else changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import interdist as idist

from ._training import train

OUT = Path(__file__).with_name("recorded_events.json")


def main() -> None:
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        train(s, steps=3)
        s.events.wait_for(lambda evs: sum(e.kind == "run-finished" and e.fn == "step" for e in evs) >= 6)
        evs = [e.to_msg() for e in s.events.events]
    t0 = min(m["time"] for m in evs)
    for m in evs:
        m["time"] = round(m["time"] - t0 + 1000.0, 6)
        m["group"] = "recorded"
    OUT.write_text("[\n" + ",\n".join(json.dumps(m) for m in evs) + "\n]\n")  # one event a line
    print(f"wrote {len(evs)} events to {OUT}")


if __name__ == "__main__":
    main()
