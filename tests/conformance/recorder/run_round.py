"""Run a round of recorded cases (tests/conformance/tf_cases.json for round 1, tf_cases_<N>.json after) on interdist with runner.run_case.

    .venv/bin/python tests/conformance/recorder/run_round.py [--round N] [-k SUBSTR] [--out FILE]
"""
import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from runner import run_case  # noqa: E402


def _alarm(*_):
    raise TimeoutError("case took too long")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="")
    ap.add_argument("--round", type=int, default=2, help="1: tf_cases.json, N > 1: tf_cases_<N>.json")
    ap.add_argument("--out", default=None)
    ap.add_argument("--timeout", type=int, default=120)
    a = ap.parse_args()
    logging.disable(logging.CRITICAL)
    a.out = a.out or f"/tmp/r{a.round}/idist_results.json"
    cases = json.loads((HERE.parent / ("tf_cases.json" if a.round == 1 else f"tf_cases_{a.round}.json")).read_text())
    sel = [c for c in cases if a.k in c["id"]]
    res = {}
    signal.signal(signal.SIGALRM, _alarm)
    for c in sel:
        t = time.time()
        signal.alarm(a.timeout)
        try:
            ok, msg = run_case(c)
        except BaseException as e:  # noqa: BLE001
            ok, msg = False, f"runner: {type(e).__name__}: {e}"
        finally:
            signal.alarm(0)
        res[c["id"]] = {"ok": ok, "msg": msg[:1500], "s": round(time.time() - t, 2)}
        print(("PASS " if ok else "FAIL ") + c["id"] + ("" if ok else "  " + msg[:300]), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(f"{sum(r['ok'] for r in res.values())}/{len(res)} pass", flush=True)


if __name__ == "__main__":
    main()
