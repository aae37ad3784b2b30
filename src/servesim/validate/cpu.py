"""The suite on the real vLLM engine run on a CPU (the bundled recordings, or a user's)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.calibration.measurements import MeasurementError
from servesim.perf.profiled import HardwareProfile
from servesim.validate.common import CPU_FIT_RECORDING, Check, _pct, load_bundled_profile
from servesim.validate.limits import LATENCY, Goal

# --------------------------------------------------------------------------- the real vLLM engine on this CPU


@dataclass(slots=True)
class RecordingComparison:
    """One recording: measured and simulated request metrics, steps, replayed step times."""

    name: str
    measured: dict[str, float]
    simulated: dict[str, float]
    replay_err_pct: np.ndarray
    num_steps: tuple[int, int]  # (measured, simulated)
    same_steps_pct: float  # steps with the same (prefill tokens, decodes), index-aligned
    replayed_same_pct: float  # the same, when servesim's steps take vLLM's measured times
    busy_frac: float = 0.0  # measured: time in steps / (last step end - first arrival)
    max_prompt: int = 0  # the workload's longest prompt (stated range, else the longest recorded)


class RecordedStepTimes:
    """A perf model that returns a recording's step times in order: with it servesim's
    scheduler sees arrivals land in the same steps as vLLM's did, so the two schedules can be
    compared without the timing model in between."""

    def __init__(self, durations_s: list[float]) -> None:
        self._it = iter(durations_s)
        self._last = durations_s[-1] if durations_s else 0.0

    def batch_time(self, stats: object) -> float:
        return next(self._it, self._last)

    def batch_flops(self, stats: object) -> float:
        return 0.0

    def batch_bytes(self, stats: object) -> float:
        return 0.0


def request_metrics(ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray) -> dict[str, float]:
    out = {}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        v = v[np.isfinite(v)]
        out[f"mean_{name}_s"] = float(v.mean())
        out[f"p90_{name}_s"] = float(np.percentile(v, 90))
    return out


def simulated_metrics(path: Path, prof: HardwareProfile) -> dict[str, float]:
    """A recording's request metrics as servesim simulates them with ``prof`` from the
    recording's arrivals (``compare_recording`` without the replays)."""
    return compare_recording(path, prof, replay=False).simulated


def compare_recording(path: Path, prof: HardwareProfile, replay: bool = True) -> RecordingComparison:
    """Simulate a record.py recording with the profile and compare."""
    from servesim.calibration.engine_logs import read_engine_log, steps_to_stats
    from servesim.config import EngineConfig, ParallelConfig
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    log = read_engine_log(path)
    data, eng = log.data or {}, log.engine or {}
    run = data["runs"][0]
    reqs = run["requests"]
    model = log.model_spec()
    gpu = prof.resolve_gpu(prof.gpu.name if prof.gpu else prof.fitted_on)
    perf = prof.perf_model(model, gpu, ParallelConfig())
    measured = _run_metrics(run)
    # Simulated from the same arrivals.
    arr = np.array([r["arrived_at_s"] for r in reqs])
    n_out = np.array([r["num_output_tokens"] for r in reqs])
    wl = Workload(
        arrival_s=arr,
        num_prompt_tokens=np.array([r["num_prompt_tokens"] for r in reqs], np.int64),
        num_output_tokens=n_out.astype(np.int64),
        source=path.name,
    )
    engine = EngineConfig(
        block_size=eng["block_size"],
        max_num_seqs=eng["max_num_seqs"],
        max_num_batched_tokens=eng["max_num_batched_tokens"],
        enable_chunked_prefill=eng["enable_chunked_prefill"],
        enable_prefix_caching=eng["enable_prefix_caching"],
        long_prefill_token_threshold=0,
        cpu_overhead_s=prof.cpu_overhead_s or 0.0,
    )
    blocks, max_len = eng["num_gpu_blocks"], eng["max_model_len"]
    res = run_engine(wl, engine, perf, blocks, max_len, reference=True)
    rec = res.records
    simulated = request_metrics(rec.ttft_s, rec.tpot_s, rec.e2e_s)
    if not replay:
        return RecordingComparison(path.stem, measured, simulated, np.zeros(0), (0, len(res.steps)), 0.0, 0.0)
    # Step by step: predicted times of the recorded batches, and the simulated schedules.
    prompt = {r["id"]: r["num_prompt_tokens"] for r in reqs}
    steps = [s for s in run["steps"] if s["scheduled"]]
    stats = steps_to_stats(steps, prompt)
    replayed_s = np.array([perf.batch_time(s) + engine.cpu_overhead_s for s in stats])
    meas_steps = [(s.num_prefill_tokens, s.num_decode_reqs) for s in stats]
    # vLLM's own cycle: the step plus the short gap before the next one (not idle waits).
    cycle = [
        s["t_end"] - s["t_start"] + min(max(n["t_start"] - s["t_end"], 0.0), 2e-3)
        for s, n in zip(steps, [*steps[1:], steps[-1]])
    ]
    timed = run_engine(
        dataclasses.replace(wl, arrival_s=engine_arrivals(reqs, steps, cycle)),
        engine.model_copy(update={"cpu_overhead_s": 0.0}),
        RecordedStepTimes(cycle),
        blocks,
        max_len,
        reference=True,
    )
    busy = float(np.sum(log.duration_s)) / max(steps[-1]["t_end"] - float(arr.min()), 1e-9)
    stated = (data.get("workload") or {}).get("prompt_len")
    max_prompt = int(stated[1]) if stated else int(wl.num_prompt_tokens.max())
    return RecordingComparison(
        path.stem,
        measured,
        simulated,
        _pct(replayed_s, log.duration_s),
        (len(meas_steps), len(res.steps)),
        _same_pct(meas_steps, res.steps),
        _same_pct(meas_steps, timed.steps),
        busy,
        max_prompt,
    )


def engine_arrivals(reqs: list[dict], steps: list[dict], cycle: list[float]) -> np.ndarray:
    """When vLLM's scheduler could first see each request, as replay arrival times for the
    replay with vLLM's own step times (``cycle``: each step plus the short gap before the next).

    record.py's driver adds arrived requests between steps (``added_at_s``), so the first step
    that can take a request is the first one to start after it was added. Its arrival time
    does not tell which step that is when it lands within ~0.1 ms of a step boundary (the
    driver checks for arrivals a moment before it starts the step; times are kept to 10 us),
    nor when it finds the engine idle (the driver wakes 0.1-1 ms later). So a request replays
    in the middle of the step before that first step when the two ran back to back (servesim
    then sees it at that step's end, as vLLM did), or at that first step's start when the
    engine was idle before it (servesim's busy period starts with it, as vLLM's did). Whether
    that step takes the request (token budget, max_num_seqs, KV blocks) is still the
    scheduler's decision: that is what the replay checks."""
    t0 = np.array([s["t_start"] for s in steps], dtype=np.float64)
    cyc = np.asarray(cycle, dtype=np.float64)
    arrived = np.array([r["arrived_at_s"] for r in reqs], dtype=np.float64)
    added = np.maximum(arrived, [r.get("added_at_s", r["arrived_at_s"]) for r in reqs])
    j = np.searchsorted(t0, added, side="left")  # the first step that could take each
    n = len(t0)
    jc = np.minimum(j, n - 1)
    prev = np.maximum(jc - 1, 0)
    back_to_back = (j > 0) & (t0[prev] + cyc[prev] >= t0[jc] - 1e-9)
    out = np.where(j >= n, added, np.where(back_to_back, t0[prev] + cyc[prev] / 2, t0[jc]))
    return np.maximum.accumulate(out)


def _same_pct(measured: list[tuple[int, int]], steps: object) -> float:
    sim = list(zip(steps.num_prefill_tokens, steps.num_decode_reqs))  # type: ignore[attr-defined]
    return sum(a == b for a, b in zip(measured, sim)) / max(len(measured), 1) * 100


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


#: A session folder's (or the recordings folder's) description of the machine, for fits.
CPU_HARDWARE = "cpu.yaml"


def cpu_sessions(recordings_dir: Path) -> list[tuple[str, Path]]:
    """The recording sessions under ``recordings_dir``: (case prefix, folder). The folder
    itself is one when it holds recordings; each subfolder holding a CPU_FIT_RECORDING is
    another."""
    subs = [d for d in sorted(recordings_dir.iterdir()) if d.is_dir() and (d / CPU_FIT_RECORDING).is_file()]
    top = [("", recordings_dir)] if any(recordings_dir.glob("*.json")) else []
    return [*top, *((f"{d.name}/", d) for d in subs)]


def session_profile(
    folder: Path, bundled: HardwareProfile, hardware: Path | None = None, fit_file: str = CPU_FIT_RECORDING
) -> HardwareProfile:
    """A profile fitted here on a session's ``fit_file`` (default CPU_FIT_RECORDING; needs
    scipy), on the hardware described by ``hardware`` (a YAML of hardware.gpu fields, like
    the bundled cpu.yaml) or else the bundled profile's (the CPU the bundled recordings ran on)."""
    from servesim.calibration.calibrate import calibrate_source
    from servesim.config import read_gpu_config

    hw = read_gpu_config(hardware) if hardware is not None else bundled.gpu
    prof, _ = calibrate_source(
        folder / fit_file, "engine-log", hardware=hw, name=f"fitted on {folder.name}/{fit_file}"
    )
    return prof


#: The request metrics the cross-fit reports (mean and P90 TTFT, TPOT and E2E).
CROSS_FIT_METRICS = ("mean_ttft_s", "p90_ttft_s", "mean_tpot_s", "p90_tpot_s", "mean_e2e_s", "p90_e2e_s")


def _session_hardware(folder: Path, recordings_dir: Path) -> Path | None:
    return next((d / CPU_HARDWARE for d in (folder, recordings_dir) if (d / CPU_HARDWARE).is_file()), None)


def cross_fit_session(
    folder: Path,
    bundled: HardwareProfile,
    hardware: Path | None = None,
    prefix: str = "",
    fit_files: list[str] | None = None,
) -> list[Check]:
    """Fit on each recording of a session in turn (``fit_files``: those names only; default
    every recording) and predict every other recording of the session (held out): per fit,
    one row of the held-out errors of mean and P90 TTFT, TPOT, E2E (n = held-out recordings x
    6; its note: their median and max and where the max is) and one of the fit recording's
    own errors (in-sample). Needs scipy. Reference rows (no goal): what a profile fitted on
    one run does on the runs it never saw."""
    paths = sorted(folder.glob("*.json"))
    names = fit_files if fit_files is not None else [p.name for p in paths]
    measured = {p.name: _run_metrics(json.loads(p.read_text())["runs"][0]) for p in paths}
    checks = []
    for fit_name in names:
        prof = session_profile(folder, bundled, hardware, fit_name)
        errs: dict[str, list[tuple[str, float]]] = {"in-sample": [], "held out": []}
        for p in paths:
            sim = simulated_metrics(p, prof)
            part = "in-sample" if p.name == fit_name else "held out"
            errs[part] += [
                (f"{p.stem} {k}", (sim[k] / measured[p.name][k] - 1) * 100) for k in CROSS_FIT_METRICS
            ]
        fit_stem = Path(fit_name).stem
        for part, rows in errs.items():
            if not rows:
                continue
            e = np.array([v for _, v in rows])
            worst = rows[int(np.argmax(np.abs(e)))][0]
            n_rec = len(rows) // len(CROSS_FIT_METRICS)
            checks.append(
                Check(
                    "vllm-cpu",
                    f"cross-fit: fit on {prefix}{fit_stem}, {part} ({n_rec} recording{'s' * (n_rec > 1)})",
                    "mean and P90 TTFT, TPOT, E2E",
                    e,
                    None,
                    note=f"median |error| {np.median(np.abs(e)):.1f}%, "
                    f"max {np.max(np.abs(e)):.1f}% ({prefix}{worst})",
                )
            )
    return checks


def cross_fit_vllm_cpu(recordings_dir: Path, fit_files: list[str] | None = None) -> list[Check]:
    """``cross_fit_session`` for every session under ``recordings_dir`` (needs scipy)."""
    bundled = load_bundled_profile("cpu")
    checks: list[Check] = []
    for prefix, folder in cpu_sessions(recordings_dir):
        hardware = _session_hardware(folder, recordings_dir)
        checks += cross_fit_session(folder, bundled, hardware, prefix, fit_files)
    return checks


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
        if path.name == CPU_FIT_RECORDING:
            role, case = "fit", f"{c.name} (fit, in-sample)"
        elif c.max_prompt > fit_max_prompt:
            role = "longer"
            case = f"{c.name} (held out, longer prompts than the fit: busy {c.busy_frac:.0%})"
        elif c.busy_frac >= CPU_HEAVY_BUSY:
            role, case = "heavy", f"{c.name} (held out, heavy: busy {c.busy_frac:.0%})"
        else:
            role, case = "predicted", f"{c.name} (held out, busy {c.busy_frac:.0%})"
        for key, meas in c.measured.items():
            pred = c.simulated[key]
            checks.append(
                Check.against(
                    "vllm-cpu",
                    case,
                    key,
                    _pct(np.array([pred]), np.array([meas])),
                    limits[role, key.split("_")[1]],
                    measured=meas,
                    predicted=pred,
                )
            )
        checks.append(
            Check.against(
                "vllm-cpu",
                case,
                "step time (recorded batches)",
                c.replay_err_pct,
                limits[role, "replay"],
            )
        )
        checks.append(
            Check.against(
                "vllm-cpu",
                case,
                "number of steps",
                _pct(np.array([c.num_steps[1]]), np.array([c.num_steps[0]])),
                limits[role, "steps"],
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
                limits[role, "schedule"],
            )
        )
        checks += _repeat_spread(path, c, prefix)
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


def _run_metrics(run: dict) -> dict[str, float]:
    reqs = run["requests"]
    first = np.array([r["token_times_s"][0] for r in reqs])
    fin = np.array([r["finished_at_s"] for r in reqs])
    arr = np.array([r["arrived_at_s"] for r in reqs])
    n = np.array([r["num_output_tokens"] for r in reqs])
    return request_metrics(
        first - arr, np.where(n > 1, (fin - first) / np.maximum(n - 1, 1), np.nan), fin - arr
    )
