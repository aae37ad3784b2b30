"""Suite ``silicon``: AIConfigurator's measured vLLM serving runs (``silicon_vllm.csv``).

Each row is one closed-loop benchmark run (``vllm bench serve`` or the older
``benchmark_serving.py``, by the row's source: ``bench_harness``): a model checkpoint on one
GPU type with its tensor/expert/attention-data parallelism, random prompts of about ``isl``
tokens and outputs of about ``osl`` tokens from ``batch_size`` clients, and the run's mean TTFT and mean
TPOT (AIConfigurator's collection fills ``silicon_ttft_ms`` / ``silicon_tpot_ms`` from
the benchmark's ``mean_ttft`` / ``mean_tpot``). Each row becomes a scenario
(``silicon_cases.row_case``): the model preset of its checkpoint and precision, the GPU, the
parallelism, ``hardware.perf_model: kernels`` and a ``type: benchmark`` workload; servesim
predicts the mean TTFT and mean TPOT of vllm bench's report (:func:`simulate_case`), held
to the goals below per (model, GPU) group and over all runs (:func:`checks_of`). Rows
servesim cannot represent are listed as skipped with the reason.

Nothing here is fitted: every setting comes from the row, from vLLM's defaults or from the
kernel tables; the measured latencies are only compared against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from servesim.perf.capabilities import RooflineFallbacks
from servesim.validate.common import Check
from servesim.validate.limits import Goal
from servesim.validate.silicon_cases import (  # all but MODELS and row_case: re-exported
    BUNDLED_CSV,  # noqa: F401
    COLUMNS,  # noqa: F401
    GPUS,  # noqa: F401
    MODELS,
    PASS_ENGINE_VERSION,  # noqa: F401
    USE_SERVER_SCRIPTS,  # noqa: F401
    group_label,  # noqa: F401
    kernel_version_for,  # noqa: F401
    nvfp4_configs,
    read_silicon,  # noqa: F401
    row_case,
)
from servesim.validate.silicon_marks import SILICON_KNOWN_BAD
from servesim.validate.silicon_results import (  # skipped_by_reason, write_report: re-exported
    SiliconCase,
    group_table,
    skipped_by_reason,  # noqa: F401
    write_report,  # noqa: F401
)

_REAL = "the target for real vLLM runs on GPUs: median |error| of mean "
TTFT_GOAL = Goal(
    12.0,
    _REAL + "TTFT over all runs within 12% (published serving simulators report about 18% on such suites)",
)
TPOT_GOAL = Goal(8.0, _REAL + "TPOT over all runs within 8%")
GROUP_GOAL = Goal(
    20.0, "no (model, GPU) group may be far worse than the whole: median |error| within 20% in every group"
)


def simulate_case(
    case: SiliconCase, fallback_cache: dict[tuple[Any, ...], tuple[str, ...]] | None = None
) -> SiliconCase:
    """Run one case's scenario: its predicted mean TTFT and TPOT (vllm bench's benchmark
    section), the operators the kernel model timed by the roofline; a scenario servesim
    refuses (does not fit, ...) becomes a skip with servesim's message."""
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.config import Scenario
    from servesim.errors import ServesimError
    from servesim.perf.factory import build_step_model
    from servesim.sim import simulate

    assert case.scenario is not None
    try:
        sc = Scenario.model_validate(case.scenario)
        result = simulate(sc)
    except ServesimError as err:
        case.skip = f"servesim refused the scenario: {str(err).splitlines()[0]}"
        return case
    bench = result.summary["benchmark"]
    case.predicted_ttft_ms = float(bench["mean_ttft_ms"])
    case.predicted_tpot_ms = float(bench["mean_tpot_ms"])
    case.regime = result.summary["intervals"]["step_regime"]
    key = (
        sc.model.name,
        sc.hardware.gpu,
        sc.hardware.kernel_version,
        sc.parallel.tensor_parallel_size,
        sc.parallel.pipeline_parallel_size,
        sc.parallel.expert_parallel_size,
        sc.parallel.data_parallel_size,
    )
    cache = fallback_cache if fallback_cache is not None else {}
    if key not in cache:
        perf = build_step_model(
            load_model(sc.model.name), get_gpu(sc.hardware.gpu), sc.parallel, sc.hardware, sc.model
        )
        cache[key] = perf.fallbacks if isinstance(perf, RooflineFallbacks) else ()
    case.fallbacks = cache[key]
    return case


def run_cases(rows: list[dict[str, str]]) -> list[SiliconCase]:
    """Every row's case, simulated where it maps to a scenario."""
    with nvfp4_configs({p for (p, nv, _) in MODELS.values() if nv}) as tmp:
        cases = [row_case(r, tmp) for r in rows]
        cache: dict[tuple[Any, ...], tuple[str, ...]] = {}
        for c in cases:
            if c.scenario is not None:
                simulate_case(c, cache)
    return cases


# --------------------------------------------------------------------------- statistics


@dataclass
class MedianCheck(Check):
    """A check whose statistic is the median |error| (the silicon goals are medians)."""

    @property
    def mape_pct(self) -> float:
        return float(np.median(np.abs(self.errors_pct))) if self.n else math.nan


def checks_of(cases: list[SiliconCase], known_bad: dict[tuple[str, str], str] | None = None) -> list[Check]:
    """Per group and over all runs, TTFT and TPOT, held to the goals (median |error|)."""
    known_bad = SILICON_KNOWN_BAD if known_bad is None else known_bad
    out: list[Check] = []
    for g in group_table(cases):
        for metric, goal in (("TTFT", TTFT_GOAL), ("TPOT", TPOT_GOAL)):
            if g["group"] != "all runs":
                goal = GROUP_GOAL
            why = known_bad.get((g["group"], metric))
            if why:
                goal = goal.missed(why)
            errs = np.array(
                [
                    getattr(c, f"{metric.lower()}_err_pct")
                    for c in cases
                    if not c.skip and (g["group"] == "all runs" or c.group == g["group"])
                ]
            )
            note = f"median |err|; P90 {g[f'{metric.lower()}_p90_abs']:.1f}%"
            if g["note"]:
                note += f"; {g['note']}"
            if why and goal.limit_pct is not None and g[f"{metric.lower()}_median_abs"] <= goal.limit_pct:
                note += "; its known-bad mark is stale: the row meets its goal (remove it)"
            out.append(
                MedianCheck.against(
                    "silicon", g["group"], f"mean {metric}", errs[np.isfinite(errs)], goal, note=note
                )
            )
    return out
