"""Build servesim's prediction-interval table (``src/servesim/data/prediction_intervals.json``).

Usage::

    PYTHONPATH=src python tools/fit_intervals.py [CROSS_GROUP_JSON] [-o OUT]

``CROSS_GROUP_JSON`` is the ``silicon_cross_group.json`` that
``servesim validate --suite silicon --cross-group --output DIR`` writes (without it, the
cross-group run is done here: a few minutes). Its residuals are log(measured / predicted)
of mean TTFT and mean TPOT of every simulated run, each (model, GPU) group predicted with
the host floor refitted on the other groups (``validate.silicon_cross``), labelled by the
step-time regime of its prediction (``metrics.intervals.step_regime``). Per regime, and
over all runs (``all``), the table holds their 10% and 90% quantiles, a regime's never
inside all runs' (``metrics.intervals.quantile_table``); ``open_loop`` the
quantiles of the vLLM CPU engine's held-out open-loop recordings (mean and P90 TTFT, TPOT
of the bundled recordings other than the fit's, Poisson arrivals), which a run with an open
loop adds to its step-time regime's. ``residuals`` keeps the per-run values (3 decimals) so
that the held-out coverage is recomputed from data (``metrics.intervals.held_out_coverage``,
tests/test_intervals.py); ``coverage`` records it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "prediction_intervals.json"


def cross_group_residuals(path: Path | None) -> dict:
    if path is not None:
        return json.loads(path.read_text())["residuals"]
    from servesim.validate.silicon import read_silicon
    from servesim.validate.silicon_cross import cross_group, residuals

    return residuals(cross_group(read_silicon()).held_out)


def open_loop_residuals() -> dict[str, list[float]]:
    """log(measured / predicted) of the CPU engine's held-out recordings (mean, P90)."""
    from servesim.validate.common import bundled_data
    from servesim.validate.cpu import validate_vllm_cpu

    out: dict[str, list[float]] = {"ttft": [], "tpot": []}
    with bundled_data() as (_, rec):
        for c in validate_vllm_cpu(rec):
            m = c.metric.split("_")[1] if "_" in c.metric else ""
            if "held out" not in c.case or m not in out or not c.measured or not c.predicted:
                continue
            out[m].append(round(math.log(c.measured / c.predicted), 4))
    return out


def build(res: dict, open_loop: dict[str, list[float]]) -> dict:
    from servesim.metrics.intervals import LEVEL, held_out_coverage, log_quantiles, quantile_table

    rounded = {
        g: {reg: {m: [round(x, 3) for x in v] for m, v in r.items()} for reg, r in regs.items()}
        for g, regs in sorted(res.items())
    }
    cov = held_out_coverage(rounded)
    regimes = quantile_table(rounded)["regimes"]
    return {
        "format": "servesim-intervals/1",
        "level": LEVEL,
        "what": "log(measured / predicted) quantiles (10%, 90%) of mean TTFT and mean TPOT, per step-time "
        "regime, over the silicon suite's cross-group (held-out) predictions",
        "generated_by": "tools/fit_intervals.py",
        "regimes": regimes,
        "open_loop": {
            "n": len(open_loop["ttft"]),
            "ttft": log_quantiles(np.array(open_loop["ttft"])),
            "tpot": log_quantiles(np.array(open_loop["tpot"])),
        },
        "coverage": {
            "ttft": round(cov["ttft"], 3),
            "tpot": round(cov["tpot"], 3),
            "n": cov["n"],
            "groups": cov["groups"],
        },
        "residuals": rounded,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cross_group_json", nargs="?", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    a = ap.parse_args(argv)
    table = build(cross_group_residuals(a.cross_group_json), open_loop_residuals())
    text = json.dumps(table, separators=(",", ":"))
    a.output.write_text(text + "\n")
    print(
        f"wrote {a.output} ({len(text)} bytes); held-out coverage TTFT {table['coverage']['ttft']:.1%}, "
        f"TPOT {table['coverage']['tpot']:.1%} over {table['coverage']['n']} runs"
    )
    for k, r in table["regimes"].items():
        print(
            f"  {k:18s} n={r['n']:4d}  TTFT x[{math.exp(r['ttft'][0]):.3f}, {math.exp(r['ttft'][1]):.3f}]  "
            f"TPOT x[{math.exp(r['tpot'][0]):.3f}, {math.exp(r['tpot'][1]):.3f}]"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
