"""Pack how much slower compute-bound kernels run once a GPU holds its power limit.

AIConfigurator times each kernel twice on some GPUs. Its vLLM 0.19.0 tables are short
bursts: three warm-ups and six timed runs (``collector/helper.py``, ``benchmark_with_power``
without power sampling), tens of milliseconds of back-to-back work for a typical GEMM. Its
vLLM 0.22.0 "power overlays" of B200, H200 and GB200 run each kernel for at least a second
while sampling board power (``COLLECTOR_MEASURE_POWER``, ``power_min_duration`` 1 s) and
record the power next to the latency. For bf16 GEMMs both time the same kernel (torch's
``F.linear``), so the ratio of the two is the GPU's clock behaviour alone:

- kernels that use little of the tensor cores run as fast (ratio about 1; the longer
  sampled runs are even a few percent faster, their fixed costs averaged over more runs);
- kernels that reach about half the bf16 peak or more draw the board's whole power limit
  (0.95-1.0 of it in the overlay) and run 5-30% slower sustained than in a burst;
- bursts that last longer than a few tens of milliseconds are throttled already: the
  controller lowers the clock after ``onset_s`` of work past the limit.

This tool bins every bf16 GEMM shape measured in both tables by its burst utilization (the
achieved FLOP/s over the catalog's dense bf16 peak), takes each bin's median ratio (made
non-decreasing, at least 1), and fits ``onset_s`` by the burst measurement's own structure
(nine back-to-back iterations of six GEMMs, the last six timed: a fraction
``(9 d - onset) / 6 d`` of the timed window throttled at iteration time ``d``). It also
reports each GPU's curve predicting another GPU's measured ratios (held-out across GPUs).
The result is ``src/servesim/data/kernels/sustained_clocks.json``; the installed package
reads only that file (``servesim.perf.sustained``).

    python tools/pack_sustained_clocks.py AICONFIGURATOR_REPO [--rev REV]
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from _aic import git, run

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "kernels" / "sustained_clocks.json"
TABLE = "aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/vllm/{version}/gemm_perf.parquet"
BURST, SUSTAINED = "0.19.0", "0.22.0"
#: AIConfigurator's GPU folder -> (servesim's GPU name, its dense bf16 peak in FLOP/s, as the catalog).
GPUS = {"b200_sxm": ("B200", 2250e12), "h200_sxm": ("H200", 989e12), "gb200": ("GB200", 2500e12)}
#: Utilization bins (lower edges) of the curve; the first edge is where no kernel is throttled.
EDGES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
#: The burst measurement: warm-ups and timed runs back to back, and how many are timed.
BURST_ITERS, TIMED_ITERS, BF16_OPS = 9, 6, 6


def _table(repo: Path, rev: str, gpu: str, version: str) -> dict[tuple[int, int, int], float]:
    raw = git(repo, "show", f"{rev}:{TABLE.format(gpu=gpu, version=version)}")
    t = pq.read_table(io.BytesIO(raw), columns=["gemm_dtype", "m", "n", "k", "latency"]).to_pydict()
    return {
        (m, n, k): lat
        for dt, m, n, k, lat in zip(t["gemm_dtype"], t["m"], t["n"], t["k"], t["latency"])
        if dt == "bfloat16"
    }


def _curve(util: np.ndarray, ratio: np.ndarray) -> tuple[list[float], list[float]]:
    """Bin centres and their median ratios, non-decreasing and at least 1."""
    xs, ys = [], []
    for lo, hi in zip(EDGES, (*EDGES[1:], 10.0)):
        sel = (util >= lo) & (util < hi)
        if sel.sum() >= 20:
            xs.append(round(lo + 0.05, 3))
            ys.append(max(1.0, float(np.median(ratio[sel]))))
    return [EDGES[0], *xs], np.maximum.accumulate([1.0, *ys]).round(4).tolist()


def _onset(d: np.ndarray, ratio: np.ndarray) -> float:
    """The onset that best explains high-utilization ratios falling with the burst's length
    (iteration time ``d``; least mean absolute log error over the bursts of 30 ms or more)."""
    short = d * BURST_ITERS < 0.03
    r = float(np.median(ratio[short]))  # bursts too short to be throttled
    d, ratio = d[~short], ratio[~short]
    best = (np.inf, 0.0)
    for onset in np.arange(0.005, 0.5, 0.005):
        part = np.clip((BURST_ITERS * d - onset) / (TIMED_ITERS * d), 0.0, 1.0)
        err = float(np.mean(np.abs(np.log(r / (1 + (r - 1) * part) / ratio))))
        best = min(best, (err, round(float(onset), 3)))
    return best[1]


def pack(repo: Path, rev: str) -> dict[str, Any]:
    commit = git(repo, "rev-parse", rev).decode().strip()
    gpus: dict[str, Any] = {}
    points: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for folder, (name, peak) in GPUS.items():
        burst, sus = _table(repo, rev, folder, BURST), _table(repo, rev, folder, SUSTAINED)
        keys = sorted(set(burst) & set(sus))
        lat = np.array([burst[k] for k in keys]) * 1e-3
        util = np.array([2.0 * m * n * k for m, n, k in keys]) / (lat * peak)
        ratio = np.array([sus[k] for k in keys]) / (lat * 1e3)
        # The curve from bursts short enough to run at full clocks; the onset from the rest.
        short = lat * BF16_OPS * BURST_ITERS < 0.03
        xs, ys = _curve(util[short], ratio[short])
        hot = (util >= 0.6) & (util <= 0.85)
        gpus[name] = {
            "util": xs,
            "ratio": ys,
            "onset_s": _onset(lat[hot] * BF16_OPS, ratio[hot]),
            "shapes": len(keys),
        }
        points[name] = (util[short & (util >= EDGES[0])], ratio[short & (util >= EDGES[0])])
    for name, g in gpus.items():  # held out: each other GPU's curve on this GPU's shapes
        u, r = points[name]
        g["held_out_median_abs_err"] = {
            other: round(statistics.median(np.abs(np.interp(u, o["util"], o["ratio"]) / r - 1).tolist()), 4)
            for other, o in gpus.items()
            if other != name
        }
        g["own_median_abs_err"] = round(
            statistics.median(np.abs(np.interp(u, g["util"], g["ratio"]) / r - 1).tolist()), 4
        )
    return {
        "source": "github.com/ai-dynamo/aiconfigurator (Apache-2.0)",
        "commit": commit,
        "burst_version": BURST,
        "sustained_version": SUSTAINED,
        "dtype": "bfloat16",
        "gpus": gpus,
    }


def _summary(data: dict[str, Any]) -> str:
    return "; ".join(
        f"{n}: ratio {g['ratio'][-1]:.2f} at utilization {g['util'][-1]:.2f}, onset "
        f"{g['onset_s'] * 1e3:.0f} ms"
        for n, g in data["gpus"].items()
    )


if __name__ == "__main__":
    raise SystemExit(run(__doc__, pack, OUT, _summary))
