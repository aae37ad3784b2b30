"""Validation: servesim's predictions against every bundled measurement set.

Each suite predicts measurements that its profile was *not* fitted to where possible:

- ``operators``: Vidur's H100 operator times (QKV/output projections, MLP, elementwise per
  layer) with the profile fitted to them (in-sample: how well the calibrated roofline's
  few parameters describe ~16,000 operator timings), and the profiled model's
  interpolation between measured token counts (every other count held out).
- ``splitwise``: Llama-2-70B prompt and per-token times on A100 (the fit) and on H100
  (predicted from the A100 profile with the H100's peaks), TP 2/4/8.
- ``distserve``: DistServe's A100 fits of OPT-13B/66B prefill and decode times, predicted
  from the same A100 profile (fitted on Llama-2-70B).
- ``vllm-cpu``: the real vLLM engine on a 2-core CPU (recordings of tiny-llama):
  servesim, calibrated on one recording, simulates the others from their arrivals and
  predicts mean and P90 TTFT, TPOT and E2E, the number of steps, and every recorded
  step's time (replay of the recorded batches); the fit recording's rows are in-sample,
  the others held out. ``cross_fit`` fits on each recording in turn and reports the
  held-out error of each fit on the others.
- ``silicon``: AIConfigurator's 1,093 measured ``vllm bench serve`` runs on H100, H200,
  B200, B300 and GB200 (``validate.silicon``): mean TTFT and TPOT of each run, median and
  P90 |error| per (model, GPU) group. Not in the default set (it simulates 1,064 runs, a few
  minutes); ``--suite silicon``.

Profiles are the ones bundled in ``servesim/data/profiles`` (made by ``servesim calibrate``;
see docs/fidelity.md), so validation needs neither scipy nor refitting, except for a
recording session that no bundled profile was fitted on (the bundled ``session2/``, or a
user's own): that session's profile is fitted here, with scipy, and skipped with a note
where scipy is missing. The data are the subsets bundled in the package (``bundled_data``),
or a user's folders.

Every predicted row is held to a goal with its reason (``validate.limits``); where servesim
is known to miss a goal, the row says why and is reported, not failed.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from servesim.calibration.measurements import MeasurementError
from servesim.errors import ServesimError
from servesim.validate.common import (
    CPU_FIT_RECORDING,
    PROFILES,
    Check,
    bundled_data,
    load_bundled_profile,
)
from servesim.validate.cpu import CPU_GOALS, CPU_LIMITS, _can_fit, validate_vllm_cpu
from servesim.validate.cpu_fits import cross_fit_vllm_cpu
from servesim.validate.cpu_recordings import RecordedStepTimes, RecordingComparison, compare_recording
from servesim.validate.gpu import (
    DISTSERVE_LIMITS,
    OPERATOR_GOALS,
    SPLITWISE_LIMITS,
    distserve_grid,
    validate_distserve,
    validate_operators,
    validate_splitwise,
)
from servesim.validate.limits import LATENCY, STEP_TIME, Goal

__all__ = [
    "CPU_FIT_RECORDING",
    "CPU_GOALS",
    "CPU_LIMITS",
    "DISTSERVE_LIMITS",
    "LATENCY",
    "OPERATOR_GOALS",
    "PROFILES",
    "SPLITWISE_LIMITS",
    "STEP_TIME",
    "Check",
    "Goal",
    "known_bad_reasons",
    "cross_fit_vllm_cpu",
    "RecordedStepTimes",
    "RecordingComparison",
    "compare_recording",
    "bundled_data",
    "distserve_grid",
    "load_bundled_profile",
    "validate_all",
    "validate_distserve",
    "validate_operators",
    "validate_splitwise",
    "validate_vllm_cpu",
]


# --------------------------------------------------------------------------- all suites


def known_bad_reasons(checks: list[Check]) -> list[str]:
    """One line per known miss the rows show: suite, metric, how many rows miss the goal and
    by how much (MAPE), the goal and the reason."""
    groups: dict[tuple[str, str, float | None, str], list[float]] = {}
    for c in checks:
        if c.status() == "known bad":
            groups.setdefault((c.suite, c.metric, c.limit_pct, c.known_bad), []).append(c.mape_pct)
    return [
        f"known bad: {suite}, {metric}: {len(m)} row{'s' * (len(m) > 1)} at MAPE "
        f"{min(m):.0f}{f'-{max(m):.0f}' if len(m) > 1 else ''}% against a goal of {goal:g}%: {why}"
        for (suite, metric, goal, why), m in groups.items()
    ]


SUITES: dict[str, Callable[[Path], list[Check]]] = {
    "operators": validate_operators,
    "splitwise": validate_splitwise,
    "distserve": validate_distserve,
}


def validate_all(
    data_dir: Path | None,
    recordings_dir: Path | None,
    suites: tuple[str, ...] = ("operators", "splitwise", "distserve", "vllm-cpu"),
    cross_fit: bool = False,
    output: Path | None = None,
    cross_group: bool = False,
) -> tuple[list[Check], list[str]]:
    """Run the suites whose data is present; returns the checks and notes on skipped suites.
    ``data_dir`` (measurement sets, laid out as ``measurements/<set>/...``) and
    ``recordings_dir`` default to the data bundled with servesim. ``cross_fit``: vllm-cpu
    also fits on each recording of a session in turn and reports its held-out error on the
    others (``cpu_fits.cross_fit_session``; needs scipy, ~30 s on the bundled recordings).
    ``cross_group``: silicon also predicts each (model, GPU) group with what it learns from
    the runs derived without that group (``silicon_cross``)."""
    checks: list[Check] = []
    skipped = []
    unknown = set(suites) - {*SUITES, "vllm-cpu", "silicon"}
    if unknown:
        raise ServesimError(
            f"unknown validation suites {sorted(unknown)}; known: {[*SUITES, 'vllm-cpu', 'silicon']}"
        )
    with ExitStack() as stack:
        if data_dir is None or recordings_dir is None:
            bundled = stack.enter_context(bundled_data())
            data_dir, recordings_dir = data_dir or bundled[0], recordings_dir or bundled[1]
        for name in suites:
            if name == "vllm-cpu":
                if not any(recordings_dir.glob("**/*.json")):
                    skipped.append(f"vllm-cpu: no recordings (*.json) in {recordings_dir}")
                    continue
                checks += validate_vllm_cpu(recordings_dir, skipped=skipped)
                if cross_fit:
                    if _can_fit():
                        checks += cross_fit_vllm_cpu(recordings_dir)
                    else:
                        skipped.append(
                            "vllm-cpu cross-fit: fitting needs scipy (pip install 'servesim[calibrate]')"
                        )
                continue
            if name == "silicon":
                from servesim.validate.silicon_cross import validate_silicon

                checks += validate_silicon(data_dir, output, skipped=skipped, cross_group=cross_group)
                continue
            try:
                checks += SUITES[name](data_dir)
            except (FileNotFoundError, MeasurementError) as err:
                skipped.append(f"{name}: {err}")
    return checks, skipped
