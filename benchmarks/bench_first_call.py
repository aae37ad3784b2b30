"""Benchmark: the first ``servesim.simulate`` call of a fresh process on the default scenario
(the Azure hour, at ``--rate`` times its recorded rate), the imports it triggers included.

The workload is parsed before the clock starts, as ``benchmarks/bench_azure.py`` does, so
the figure is what ``simulate`` itself costs a new process: importing the driver, the engine
and the step-time model, the run and its summary. Each measurement is a fresh subprocess;
with several ``--tree`` folders (each a ``src`` folder holding ``servesim``) they alternate,
run by run, so that the machine's load falls on each alike, and the medians are compared
with the first tree's. Two figures per run:

* CPU seconds (``time.process_time``) of ``import servesim.sim`` alone and of the whole
  first call (import, simulate, summary);
* the cumulative import time ``python -X importtime`` reports for the modules imported from
  then on (wall microseconds, noisier on a loaded machine).

    python benchmarks/bench_first_call.py                             # this checkout's src
    python benchmarks/bench_first_call.py --tree OLD/src --tree src --repeats 9
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

MARK = "servesim-bench-first-call: simulate starts"


def one(rate: float) -> dict[str, float]:
    """In this process: parse the workload, then time the first simulate call."""
    from servesim.config import load_scenario
    from servesim.workload import load_workload

    sc = load_scenario(None, [f"workload.rate_scale={rate}"])
    load_workload(sc.workload)  # the trace parse, before the clock (simulate parses it again)
    print(MARK, file=sys.stderr, flush=True)
    t0 = time.process_time()
    import servesim.sim

    t1 = time.process_time()
    result = servesim.sim.simulate(sc)
    t2 = time.process_time()
    return {"import_s": t1 - t0, "first_call_s": t2 - t0, "requests": float(len(result.records))}


def _run(tree: str, rate: float, importtime: bool) -> tuple[dict[str, float], str]:
    env = {**os.environ, "PYTHONPATH": tree}
    flags = ["-X", "importtime"] if importtime else []
    out = subprocess.run(
        [sys.executable, *flags, __file__, "--one", str(rate)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def imported_us(stderr: str) -> int:
    """Cumulative microseconds of the top-level imports ``-X importtime`` lists after ``MARK``."""
    after = stderr.split(MARK, 1)[1]
    return sum(
        int(m.group(1)) for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \| (?! )", after, flags=re.M)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", help="a src folder holding servesim (repeatable)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(one(a.one)))
        return
    trees = [
        str(Path(t).resolve()) for t in (a.tree or [str(Path(__file__).resolve().parent.parent / "src")])
    ]
    runs: dict[str, dict[str, list[float]]] = {
        t: {"import_s": [], "first_call_s": [], "import_us": []} for t in trees
    }
    for i in range(a.repeats):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            d, _ = _run(tree, a.rate, importtime=False)
            runs[tree]["import_s"].append(d["import_s"])
            runs[tree]["first_call_s"].append(d["first_call_s"])
            runs[tree]["import_us"].append(float(imported_us(_run(tree, a.rate, importtime=True)[1])))
    base = {k: statistics.median(v) for k, v in runs[trees[0]].items()}
    print(
        f"the Azure hour at {a.rate:g}x, first simulate call, medians of {a.repeats}"
        " (ratio to the first tree)"
    )
    print(f"{'tree':<40} {'import CPU s':>12} {'first call CPU s':>16} {'-X importtime ms':>16}")
    for tree in trees:
        m = {k: statistics.median(v) for k, v in runs[tree].items()}
        print(
            f"{tree[-40:]:<40} {m['import_s']:>7.4f} {m['import_s'] / base['import_s']:>4.2f}"
            f" {m['first_call_s']:>11.4f} {m['first_call_s'] / base['first_call_s']:>4.2f}"
            f" {m['import_us'] / 1e3:>11.1f} {m['import_us'] / base['import_us']:>4.2f}"
        )


if __name__ == "__main__":
    main()
