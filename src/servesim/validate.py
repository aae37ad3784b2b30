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

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from servesim.errors import ServesimError
from servesim.perf.measurements import MeasurementError
from servesim.perf.profiled import HardwareProfile

#: Bundled profiles (package data) by role.
PROFILES = {
    "h100_ops": "h100_vidur_ops.json",
    "a100_ops": "a100_vidur_ops.json",
    "a100_e2e": "a100_splitwise.json",
    "cpu": "cpu_vllm_tiny.json",
}
#: The recording the CPU profile was fitted on (the others are predictions).
CPU_FIT_RECORDING = "rate1.json"
_REPO = Path(__file__).resolve().parents[2]


@dataclass(slots=True)
class Check:
    """One row of the validation table: signed relative errors (%) of one metric."""

    suite: str
    case: str
    metric: str
    errors_pct: np.ndarray
    limit_pct: float | None = None  # the stated bound on the mean absolute error
    measured: float | None = None  # for a single-number metric
    predicted: float | None = None
    note: str = ""

    @property
    def n(self) -> int:
        return len(self.errors_pct)

    @property
    def mape_pct(self) -> float:
        return float(np.mean(np.abs(self.errors_pct)))

    @property
    def max_pct(self) -> float:
        return float(np.max(np.abs(self.errors_pct)))

    @property
    def bias_pct(self) -> float:
        return float(np.mean(self.errors_pct))

    def passed(self, threshold_pct: float | None = None) -> bool:
        limit = threshold_pct if threshold_pct is not None else self.limit_pct
        return limit is None or self.mape_pct <= limit


def load_bundled_profile(role: str) -> HardwareProfile:
    """One of the profiles shipped with servesim (``PROFILES``)."""
    ref = resources.files("servesim").joinpath("data", "profiles", PROFILES[role])
    return HardwareProfile.from_dict(json.loads(ref.read_text()), f"servesim/data/profiles/{PROFILES[role]}")


def default_data_dir() -> Path | None:
    """The sibling ``shared/data`` of the repository when present, else the small copies in
    ``tests/fixtures/measurements``, else None."""
    for cand in (_REPO.parent / "shared" / "data", _REPO / "tests" / "fixtures" / "measurements"):
        if cand.is_dir():
            return cand
    return None


def default_recordings_dir() -> Path | None:
    cand = _REPO / "tests" / "fixtures" / "vllm_timing"
    return cand if cand.is_dir() else None


def _pct(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return (np.asarray(pred, float) / np.asarray(meas, float) - 1.0) * 100


# --------------------------------------------------------------------------- operators (Vidur)


def validate_operators(data_dir: Path, limits: dict[str, float] | None = None) -> list[Check]:
    from servesim.perf.calibrate import operator_fit_data, predict
    from servesim.perf.measurements import read_operator_profiles

    limits = limits or {"proj": 9.0, "mlp": 8.0, "elementwise": 8.0, "interpolated": 3.0}
    prof = load_bundled_profile("h100_ops")
    tables = read_operator_profiles(data_dir / "measurements" / "vidur_profiling", ("h100",))
    checks = []
    for model in sorted({t.model for t in tables}):
        mine = [t for t in tables if t.model == model]
        for cls in ("proj", "mlp", "elementwise"):
            if not any(cls in t.times_s for t in mine):
                continue
            terms, meas, labels = operator_fit_data(mine, classes=(cls,))
            checks.append(
                Check(
                    "operators",
                    f"{model.split('/')[-1]} H100 TP{'/'.join(str(t.tp) for t in mine)}",
                    f"{cls} time (calibrated roofline)",
                    _pct(predict(terms, prof.eff), meas),
                    limits[cls],
                )
            )
        held = []
        for t in mine:
            for times in t.times_s.values():
                x = t.num_tokens.astype(float)
                held.append(_pct(np.interp(x[1:-1:2], x[0::2], times[0::2]), times[1:-1:2]))
        checks.append(
            Check(
                "operators",
                f"{model.split('/')[-1]} H100",
                "op time (profiled, held-out T)",
                np.concatenate(held),
                limits["interpolated"],
            )
        )
    return checks


# --------------------------------------------------------------------------- Splitwise


def validate_splitwise(data_dir: Path, limits: dict[str, float] | None = None) -> list[Check]:
    from servesim.perf.calibrate import predict, splitwise_fit_data
    from servesim.perf.measurements import read_splitwise

    limits = limits or SPLITWISE_LIMITS
    prof = load_bundled_profile("a100_e2e")
    rows = read_splitwise(data_dir / "measurements" / "splitwise" / "perf_model.csv")
    checks = []
    for gpu, role in (("A100-80GB", "fit"), ("H100-SXM", "predicted")):
        for tp in (2, 4, 8):
            sel = [r for r in rows if r.gpu == gpu and r.tp == tp]
            terms, meas, labels = splitwise_fit_data(sel, batched_prompts=True)
            err = _pct(predict(terms, prof.eff), meas)
            for metric in ("prompt", "token"):
                if metric == "prompt":
                    single = np.array([lb.endswith("prompt") and " batch1 " in lb for lb in labels])
                    batched = np.array([lb.endswith("prompt") and " batch1 " not in lb for lb in labels])
                    checks.append(
                        Check(
                            "splitwise",
                            f"Llama-2-70B {gpu} TP{tp} ({role})",
                            "prompt time, 1 prompt",
                            err[single],
                            limits.get(f"{gpu}:prompt"),
                        )
                    )
                    checks.append(
                        Check(
                            "splitwise",
                            f"Llama-2-70B {gpu} TP{tp} ({role})",
                            "prompt time, batch 2-64",
                            err[batched],
                            None,
                            note="not modelled: Splitwise's batched prompts",
                        )
                    )
                else:
                    tok = np.array([lb.endswith("token") for lb in labels])
                    checks.append(
                        Check(
                            "splitwise",
                            f"Llama-2-70B {gpu} TP{tp} ({role})",
                            "per-token time",
                            err[tok],
                            limits.get(f"{gpu}:token"),
                        )
                    )
    return checks


#: Stated bounds (mean absolute error per TP degree, %): the worst TP degree, rounded up.
SPLITWISE_LIMITS = {
    "A100-80GB:prompt": 6.0,
    "A100-80GB:token": 6.0,
    "H100-SXM:prompt": 14.0,
    "H100-SXM:token": 31.0,
}


# --------------------------------------------------------------------------- DistServe


def distserve_grid() -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Prefill batches (prompt lengths) and decode (batch size, context per request) points."""
    prefill = [[p] for p in (128, 256, 512, 1024, 2048)] + [[256] * 4, [512] * 4]
    decode = [(b, c) for b in (1, 8, 32, 64, 128) for c in (256, 1024)]
    return prefill, decode


def validate_distserve(data_dir: Path, limits: dict[tuple[str, str], float] | None = None) -> list[Check]:
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.models import load_model
    from servesim.config import ParallelConfig
    from servesim.perf.base import BatchStats
    from servesim.perf.measurements import read_distserve

    limits = limits or DISTSERVE_LIMITS
    gpu = get_gpu("A100-80GB")
    prefill_grid, decode_grid = distserve_grid()
    checks = []
    for role, label in (("a100_e2e", "Splitwise e2e profile"), ("a100_ops", "Vidur operator profile")):
        prof = load_bundled_profile(role)
        for engine in ("vllm", "distserve"):
            path = data_dir / "measurements" / "distserve" / f"distserve_profiler-a100-80g.{engine}.json"
            for f in read_distserve(path):
                pm = prof.perf_model(load_model(f.model), gpu, ParallelConfig(tensor_parallel_size=f.tp))
                pre = [
                    (
                        pm.batch_time(
                            BatchStats(
                                num_prefill_tokens=sum(b),
                                num_prefill_reqs=len(b),
                                prefill_attn_work=sum(p * p / 2 for p in b),
                            )
                        ),
                        f.prefill_s(b),
                    )
                    for b in prefill_grid
                ]
                dec = [
                    (
                        pm.batch_time(BatchStats(num_decode_reqs=b, sum_decode_context=b * c)),
                        f.decode_s(b, b * c),
                    )
                    for b, c in decode_grid
                ]
                case = f"{f.model.split('/')[-1].upper()} A100 TP{f.tp}, {engine} engine; {label}"
                for metric, pairs in (("prefill time", pre), ("decode step time", dec)):
                    p, m = np.array(pairs).T
                    checks.append(Check("distserve", case, metric, _pct(p, m), limits.get((role, metric))))
    return checks


#: Stated bounds on the mean error over each DistServe case (the worst case of each kind, rounded up).
DISTSERVE_LIMITS = {
    ("a100_e2e", "prefill time"): 31.0,
    ("a100_e2e", "decode step time"): 191.0,
    ("a100_ops", "prefill time"): 55.0,
    ("a100_ops", "decode step time"): 66.0,
}


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


def compare_recording(path: Path, prof: HardwareProfile) -> RecordingComparison:
    """Simulate a record.py recording with the profile and compare."""
    from servesim.config import EngineConfig, ParallelConfig
    from servesim.perf.measurements import read_engine_log, steps_to_stats
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    log = read_engine_log(path)
    data, eng = log.data or {}, log.engine or {}
    run = data["runs"][0]
    reqs = run["requests"]
    model = log.model_spec()
    gpu = prof.resolve_gpu(prof.gpu.name if prof.gpu else prof.fitted_on)
    perf = prof.perf_model(model, gpu, ParallelConfig())
    # Measured.
    first = np.array([r["token_times_s"][0] for r in reqs])
    fin = np.array([r["finished_at_s"] for r in reqs])
    arr = np.array([r["arrived_at_s"] for r in reqs])
    n_out = np.array([r["num_output_tokens"] for r in reqs])
    tpot = np.where(n_out > 1, (fin - first) / np.maximum(n_out - 1, 1), np.nan)
    measured = request_metrics(first - arr, tpot, fin - arr)
    # Simulated from the same arrivals.
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
    # Step by step: predicted times of the recorded batches, and the simulated schedules.
    prompt = {r["id"]: r["num_prompt_tokens"] for r in reqs}
    steps = [s for s in run["steps"] if s["scheduled"]]
    stats = steps_to_stats(steps, prompt)
    replay = np.array([perf.batch_time(s) + engine.cpu_overhead_s for s in stats])
    meas_steps = [(s.num_prefill_tokens, s.num_decode_reqs) for s in stats]
    # vLLM's own cycle: the step plus the short gap before the next one (not idle waits).
    cycle = [
        s["t_end"] - s["t_start"] + min(max(n["t_start"] - s["t_end"], 0.0), 2e-3)
        for s, n in zip(steps, [*steps[1:], steps[-1]])
    ]
    timed = run_engine(
        wl,
        engine.model_copy(update={"cpu_overhead_s": 0.0}),
        RecordedStepTimes(cycle),
        blocks,
        max_len,
        reference=True,
    )
    busy = float(np.sum(log.duration_s)) / max(steps[-1]["t_end"] - float(arr.min()), 1e-9)
    return RecordingComparison(
        path.stem,
        measured,
        simulated,
        _pct(replay, log.duration_s),
        (len(meas_steps), len(res.steps)),
        _same_pct(meas_steps, res.steps),
        _same_pct(meas_steps, timed.steps),
        busy,
    )


def _same_pct(measured: list[tuple[int, int]], steps: object) -> float:
    sim = list(zip(steps.num_prefill_tokens, steps.num_decode_reqs))  # type: ignore[attr-defined]
    return sum(a == b for a, b in zip(measured, sim)) / max(len(measured), 1) * 100


#: Stated bounds (mean absolute error, %) of the CPU suite, by (role, metric kind). Roles:
#: the calibration recording ("fit"), predicted recordings ("predicted"), and predicted
#: recordings where the engine was busy >= CPU_HEAVY_BUSY of the time ("heavy": near or past
#: saturation, where queueing amplifies any step-time error; see docs/fidelity.md). The
#: limits are the errors achieved on the bundled recordings, rounded up.
CPU_HEAVY_BUSY = 0.8
CPU_LIMITS = {
    ("fit", "ttft"): 2.0,
    ("fit", "tpot"): 8.0,
    ("fit", "e2e"): 2.0,
    ("predicted", "ttft"): 4.0,
    ("predicted", "tpot"): 2.0,
    ("predicted", "e2e"): 2.0,
    ("heavy", "ttft"): 4.0,
    ("heavy", "tpot"): 11.0,
    ("heavy", "e2e"): 6.0,
    ("fit", "replay"): 1.0,
    ("predicted", "replay"): 2.0,
    ("heavy", "replay"): 2.0,
    ("fit", "schedule"): 1.0,
    ("predicted", "schedule"): 1.0,
    ("heavy", "schedule"): 1.0,
}


def validate_vllm_cpu(
    recordings_dir: Path, limits: dict[tuple[str, str], float] | None = None
) -> list[Check]:
    limits = limits or CPU_LIMITS
    prof = load_bundled_profile("cpu")
    checks = []
    for path in sorted(recordings_dir.glob("*.json")):
        c = compare_recording(path, prof)
        if path.name == CPU_FIT_RECORDING:
            role, case = "fit", f"{c.name} (fit)"
        elif c.busy_frac >= CPU_HEAVY_BUSY:
            role, case = "heavy", f"{c.name} (predicted, heavy: busy {c.busy_frac:.0%})"
        else:
            role, case = "predicted", f"{c.name} (predicted, busy {c.busy_frac:.0%})"
        for key, meas in c.measured.items():
            pred = c.simulated[key]
            checks.append(
                Check(
                    "vllm-cpu",
                    case,
                    key,
                    _pct(np.array([pred]), np.array([meas])),
                    limits.get((role, key.split("_")[1])),
                    measured=meas,
                    predicted=pred,
                )
            )
        checks.append(
            Check(
                "vllm-cpu",
                case,
                "step time (recorded batches)",
                c.replay_err_pct,
                limits.get((role, "replay")),
            )
        )
        checks.append(
            Check(
                "vllm-cpu",
                case,
                "number of steps",
                _pct(np.array([c.num_steps[1]]), np.array([c.num_steps[0]])),
                None,
                measured=c.num_steps[0],
                predicted=c.num_steps[1],
                note=f"{c.same_steps_pct:.0f}% of steps identical, index-aligned",
            )
        )
        checks.append(
            Check(
                "vllm-cpu",
                case,
                "schedule with vLLM's step times: % of steps differing",
                np.array([100.0 - c.replayed_same_pct]),
                limits.get((role, "schedule")),
            )
        )
        checks += _repeat_spread(path, c)
    return checks


def _repeat_spread(path: Path, c: RecordingComparison) -> list[Check]:
    """The same workload recorded again: how far the real engine is from itself. Either
    ``runs[1:]`` of the file (vs its run 0) or, for NAME_repeat.json, that recording vs
    NAME.json's run 0."""
    base = path.with_name(path.name.replace("_repeat.json", ".json"))
    if path.name.endswith("_repeat.json") and base.is_file():
        ref = _run_metrics(json.loads(base.read_text())["runs"][0])
        pairs = [(f"{c.name} vs {base.stem} (noise)", ref, c.measured)]
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
                    note="the real engine, same workload",
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
            if recordings_dir is None or not any(recordings_dir.glob("*.json")):
                skipped.append("vllm-cpu: no recordings (tests/fixtures/vllm_timing); use --recordings")
                continue
            checks += validate_vllm_cpu(recordings_dir)
            continue
        if data_dir is None:
            skipped.append(f"{name}: no measurement data; use --data-dir (the shared/data folder)")
            continue
        try:
            checks += SUITES[name](data_dir)
        except (FileNotFoundError, MeasurementError) as err:
            skipped.append(f"{name}: {err}")
    return checks, skipped
