"""The suite on the real vLLM engine run on a CPU (the bundled recordings, or a user's).

Each session's recordings are predicted with the profile fitted on its own
CPU_FIT_RECORDING (``cpu_fits``), each one compared as ``cpu_recordings`` does, and held to
the goals of its role below."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from servesim.calibration.measurements import MeasurementError
from servesim.perf.profiled import HardwareProfile
from servesim.validate.common import CPU_FIT_RECORDING, Check, _pct, load_bundled_profile

# cpu_fits and cpu_recordings: the names this module does not use are re-exported.
from servesim.validate.cpu_fits import (
    CPU_HARDWARE,  # noqa: F401
    CROSS_FIT_METRICS,  # noqa: F401
    _session_hardware,
    cpu_sessions,
    cross_fit_session,  # noqa: F401
    cross_fit_vllm_cpu,  # noqa: F401
    session_profile,
)
from servesim.validate.cpu_recordings import (
    RecordedStepTimes,  # noqa: F401
    RecordingComparison,
    _run_metrics,
    compare_recording,
    engine_arrivals,  # noqa: F401
    request_metrics,  # noqa: F401
    simulated_metrics,  # noqa: F401
)
from servesim.validate.limits import LATENCY, Goal

#: Roles of the CPU suite's recordings: the calibration recording of each session ("fit"),
#: predicted recordings ("predicted"), predicted recordings where the engine was busy >=
#: CPU_HEAVY_BUSY of the time ("heavy": near or past saturation, where queueing amplifies any
#: step-time error), and predicted recordings of a workload with longer prompts than the fit
#: recording's ("longer": contexts the fit never saw); see docs/fidelity.md section 4.
CPU_HEAVY_BUSY = 0.8
CPU_ROLES = ("fit", "predicted", "heavy", "longer")
#: Goals of the CPU suite by metric kind, the same for every role: the fit recording is held
#: to the targets too (a fit that misses its own data would not predict others), and a heavy
#: or longer-prompt recording is the case the target is for.
CPU_GOALS = {
    "ttft": LATENCY,
    "tpot": LATENCY,
    "e2e": LATENCY,
    "replay": Goal(
        5.0,
        "a step-time error passes into every latency, and queueing near saturation "
        "amplifies it: 5% on the recorded batches leaves room in the 10% latency target",
    ),
    "steps": Goal(
        LATENCY.limit_pct,
        "the number of steps follows from the schedule and the step times: the latency target",
    ),
    "schedule": Goal(
        0.0,
        "with vLLM's own step times servesim's scheduler must make vLLM's decisions: "
        "any step that differs is a scheduling bug",
    ),
}
CPU_LIMITS = {(role, kind): goal for role in CPU_ROLES for kind, goal in CPU_GOALS.items()}


def _can_fit() -> bool:
    """Whether scipy, which fitting a session's profile needs, is installed."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        return False
    return True


def validate_vllm_cpu(
    recordings_dir: Path,
    limits: dict[tuple[str, str], Goal] | None = None,
    skipped: list[str] | None = None,
) -> list[Check]:
    """Every session under ``recordings_dir`` (``cpu_sessions``): each recording predicted
    with the profile fitted on its own session's CPU_FIT_RECORDING: the bundled profile for
    the bundled recordings' top folder, else a fit made here, on the CPU_HARDWARE found in the
    session's folder or the recordings folder (else the bundled profile's CPU).
    Recording sessions apart matters: a busy machine's speed differs between sessions by
    a few %, which near saturation alone moves latencies by 10-20% (docs/fidelity.md §4)."""
    from servesim.calibration.calibrate import file_sha256

    bundled = load_bundled_profile("cpu")
    fitted_on = set((bundled.fit or {}).get("sha256", []))
    checks: list[Check] = []
    for prefix, folder in cpu_sessions(recordings_dir):
        fit_file = folder / CPU_FIT_RECORDING
        if not fit_file.is_file():
            raise MeasurementError(
                f"{folder}: no {CPU_FIT_RECORDING}, the recording its session's profile is fitted on "
                "(the other recordings there are predicted from it)"
            )
        if file_sha256(fit_file) in fitted_on:
            prof = bundled  # the recording the bundled profile was fitted on: validate that profile
        elif not _can_fit():
            if skipped is not None:
                skipped.append(
                    f"vllm-cpu {prefix or folder}: fitting its session's profile needs scipy "
                    "(pip install 'servesim[calibrate]')"
                )
            continue
        else:
            prof = session_profile(folder, bundled, _session_hardware(folder, recordings_dir))
        checks += _validate_session(folder, prof, limits or CPU_LIMITS, prefix)
    return checks


def _validate_session(
    folder: Path, prof: HardwareProfile, limits: dict[tuple[str, str], Goal], prefix: str
) -> list[Check]:
    checks = []
    comparisons = [(path, compare_recording(path, prof)) for path in sorted(folder.glob("*.json"))]
    fit_max_prompt = max((c.max_prompt for p, c in comparisons if p.name == CPU_FIT_RECORDING), default=0)
    for path, c in comparisons:
        c.name = prefix + path.stem
        role, case = _role(path, c, fit_max_prompt)
        checks += _recording_checks(c, case, {kind: limits[role, kind] for kind in CPU_GOALS})
        checks += _repeat_spread(path, c, prefix)
    return checks


def _role(path: Path, c: RecordingComparison, fit_max_prompt: int) -> tuple[str, str]:
    """The recording's role (``CPU_ROLES``) and its case label."""
    if path.name == CPU_FIT_RECORDING:
        return "fit", f"{c.name} (fit, in-sample)"
    if c.max_prompt > fit_max_prompt:
        return "longer", f"{c.name} (held out, longer prompts than the fit: busy {c.busy_frac:.0%})"
    if c.busy_frac >= CPU_HEAVY_BUSY:
        return "heavy", f"{c.name} (held out, heavy: busy {c.busy_frac:.0%})"
    return "predicted", f"{c.name} (held out, busy {c.busy_frac:.0%})"


def _recording_checks(c: RecordingComparison, case: str, goals: dict[str, Goal]) -> list[Check]:
    """One recording against its role's goals (by metric kind): its request metrics, the
    recorded batches' step times, the number of steps, and the schedule with vLLM's step times."""
    checks = []
    for key, meas in c.measured.items():
        pred = c.simulated[key]
        checks.append(
            Check.against(
                "vllm-cpu",
                case,
                key,
                _pct(np.array([pred]), np.array([meas])),
                goals[key.split("_")[1]],
                measured=meas,
                predicted=pred,
            )
        )
    checks.append(
        Check.against("vllm-cpu", case, "step time (recorded batches)", c.replay_err_pct, goals["replay"])
    )
    checks.append(
        Check.against(
            "vllm-cpu",
            case,
            "number of steps",
            _pct(np.array([c.num_steps[1]]), np.array([c.num_steps[0]])),
            goals["steps"],
            measured=c.num_steps[0],
            predicted=c.num_steps[1],
            note=f"{c.same_steps_pct:.0f}% of steps identical, index-aligned",
        )
    )
    checks.append(
        Check.against(
            "vllm-cpu",
            case,
            "schedule with vLLM's step times: % of steps differing",
            np.array([100.0 - c.replayed_same_pct]),
            goals["schedule"],
        )
    )
    return checks


def _repeat_spread(path: Path, c: RecordingComparison, prefix: str = "") -> list[Check]:
    """The same workload recorded again: how far the real engine is from itself. Either
    ``runs[1:]`` of the file (vs its run 0) or, for NAME_repeat.json, that recording vs
    NAME.json's run 0."""
    base = path.with_name(path.name.replace("_repeat.json", ".json"))
    if path.name.endswith("_repeat.json") and base.is_file():
        ref = _run_metrics(json.loads(base.read_text())["runs"][0])
        pairs = [(f"{c.name} vs {prefix}{base.stem} (noise)", ref, c.measured)]
    else:
        runs = json.loads(path.read_text())["runs"]
        pairs = [
            (f"{c.name} run {i} vs run 0 (noise)", c.measured, _run_metrics(run))
            for i, run in enumerate(runs[1:], start=1)
        ]
    out = []
    for case, ref, again in pairs:
        for key, meas in ref.items():
            out.append(
                Check(
                    "vllm-cpu",
                    case,
                    key,
                    _pct(np.array([again[key]]), np.array([meas])),
                    None,
                    measured=meas,
                    predicted=again[key],
                    note="the real engine, same workload: a reference, no limit",
                )
            )
    return out
