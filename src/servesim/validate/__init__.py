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
- ``vllm-cpu``: the real vLLM engine on this machine's CPU (tests/fixtures/vllm_timing):
  servesim, calibrated on one recording, simulates the others from their arrivals and
  predicts mean and P90 TTFT, TPOT and E2E, the number of steps, and every recorded
  step's time (replay of the recorded batches).

Profiles are the ones bundled in ``servesim/data/profiles`` (made by ``servesim calibrate``;
see docs/fidelity.md), so validation needs neither scipy nor refitting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servesim.calibration.measurements import MeasurementError
from servesim.errors import ServesimError
from servesim.validate.common import (
    CPU_FIT_RECORDING,
    PROFILES,
    Check,
    default_data_dir,
    default_recordings_dir,
    load_bundled_profile,
)
from servesim.validate.cpu import (
    CPU_LIMITS,
    RecordedStepTimes,
    RecordingComparison,
    compare_recording,
    validate_vllm_cpu,
)
from servesim.validate.gpu import (
    DISTSERVE_LIMITS,
    SPLITWISE_LIMITS,
    distserve_grid,
    validate_distserve,
    validate_operators,
    validate_splitwise,
)

__all__ = [
    "CPU_FIT_RECORDING", "CPU_LIMITS", "DISTSERVE_LIMITS", "PROFILES", "SPLITWISE_LIMITS", "Check",
    "RecordedStepTimes", "RecordingComparison", "compare_recording", "default_data_dir",
    "default_recordings_dir", "distserve_grid", "load_bundled_profile", "validate_all", "validate_distserve",
    "validate_operators", "validate_splitwise", "validate_vllm_cpu",
]


# --------------------------------------------------------------------------- all suites

SUITES: dict[str, Callable[[Path], list[Check]]] = {
    "operators": validate_operators,
    "splitwise": validate_splitwise,
    "distserve": validate_distserve,
}


def validate_all(
    data_dir: Path | None,
    recordings_dir: Path | None,
    suites: tuple[str, ...] = ("operators", "splitwise", "distserve", "vllm-cpu"),
) -> tuple[list[Check], list[str]]:
    """Run the suites whose data is present; returns the checks and notes on skipped suites."""
    checks: list[Check] = []
    skipped = []
    unknown = set(suites) - {*SUITES, "vllm-cpu"}
    if unknown:
        raise ServesimError(f"unknown validation suites {sorted(unknown)}; known: {[*SUITES, 'vllm-cpu']}")
    for name in suites:
        if name == "vllm-cpu":
            if recordings_dir is None or not any(recordings_dir.glob("**/*.json")):
                skipped.append("vllm-cpu: no recordings (tests/fixtures/vllm_timing); use --recordings")
                continue
            checks += validate_vllm_cpu(recordings_dir, skipped=skipped)
            continue
        if data_dir is None:
            skipped.append(f"{name}: no measurement data; use --data-dir (the shared/data folder)")
            continue
        try:
            checks += SUITES[name](data_dir)
        except (FileNotFoundError, MeasurementError) as err:
            skipped.append(f"{name}: {err}")
    return checks, skipped
