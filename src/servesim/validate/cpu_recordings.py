"""One recording of the real vLLM engine replayed against servesim: its request metrics
measured and simulated from the same arrivals, the recorded batches' step times predicted,
and servesim's schedule beside vLLM's (also with vLLM's own step times)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servesim.perf.profiled import HardwareProfile
from servesim.validate.common import _pct
from servesim.workload.base import Workload

if TYPE_CHECKING:
    from servesim.calibration.engine_logs import EngineLog
    from servesim.config import EngineConfig
    from servesim.metrics.step_series import StepSeries
    from servesim.perf.base import PerfModel


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
    from servesim.calibration.engine_logs import read_engine_log
    from servesim.config import ParallelConfig
    from servesim.sim import run_engine

    log = read_engine_log(path)
    data, eng = log.data or {}, log.engine or {}
    run = data["runs"][0]
    model = log.model_spec()
    gpu = prof.resolve_gpu(prof.gpu.name if prof.gpu else prof.fitted_on)
    perf = prof.perf_model(model, gpu, ParallelConfig())
    measured = _run_metrics(run)
    wl = _recorded_workload(run["requests"], path.name)  # simulated from the same arrivals
    engine = _recorded_engine(eng, prof)
    res = run_engine(wl, engine, perf, eng["num_gpu_blocks"], eng["max_model_len"], reference=True)
    rec = res.records
    simulated = request_metrics(rec.ttft_s, rec.tpot_s, rec.e2e_s)
    c = RecordingComparison(path.stem, measured, simulated, np.zeros(0), (0, len(res.steps)), 0.0, 0.0)
    return _compare_steps(c, log, wl, engine, perf, res.steps) if replay else c


def _recorded_workload(reqs: list[dict], source: str) -> Workload:
    """The recording's requests as servesim's workload: the same arrivals and lengths."""
    arr = np.array([r["arrived_at_s"] for r in reqs])
    n_out = np.array([r["num_output_tokens"] for r in reqs])
    return Workload(
        arrival_s=arr,
        num_prompt_tokens=np.array([r["num_prompt_tokens"] for r in reqs], np.int64),
        num_output_tokens=n_out.astype(np.int64),
        source=source,
    )


def _recorded_engine(eng: dict, prof: HardwareProfile) -> EngineConfig:
    """The recorded engine's scheduler settings, with the profile's CPU overhead a step."""
    from servesim.config import EngineConfig

    return EngineConfig(
        block_size=eng["block_size"],
        max_num_seqs=eng["max_num_seqs"],
        max_num_batched_tokens=eng["max_num_batched_tokens"],
        enable_chunked_prefill=eng["enable_chunked_prefill"],
        enable_prefix_caching=eng["enable_prefix_caching"],
        long_prefill_token_threshold=0,
        cpu_overhead_s=prof.cpu_overhead_s or 0.0,
    )


def _compare_steps(
    c: RecordingComparison,
    log: EngineLog,
    wl: Workload,
    engine: EngineConfig,
    perf: PerfModel,
    sim_steps: StepSeries,
) -> RecordingComparison:
    """``c`` (the request metrics compared) with the steps compared: the predicted times of
    the recorded batches, the simulated schedule against vLLM's, and the schedule again with
    vLLM's own step times."""
    from servesim.calibration.engine_logs import steps_to_stats
    from servesim.sim import run_engine

    data, eng = log.data or {}, log.engine or {}
    run = data["runs"][0]
    reqs = run["requests"]
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
        eng["num_gpu_blocks"],
        eng["max_model_len"],
        reference=True,
    )
    busy = float(np.sum(log.duration_s)) / max(steps[-1]["t_end"] - float(wl.arrival_s.min()), 1e-9)
    stated = (data.get("workload") or {}).get("prompt_len")
    max_prompt = int(stated[1]) if stated else int(wl.num_prompt_tokens.max())
    return dataclasses.replace(
        c,
        replay_err_pct=_pct(replayed_s, log.duration_s),
        num_steps=(len(meas_steps), len(sim_steps)),
        same_steps_pct=_same_pct(meas_steps, sim_steps),
        replayed_same_pct=_same_pct(meas_steps, timed.steps),
        busy_frac=busy,
        max_prompt=max_prompt,
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


def _run_metrics(run: dict) -> dict[str, float]:
    reqs = run["requests"]
    first = np.array([r["token_times_s"][0] for r in reqs])
    fin = np.array([r["finished_at_s"] for r in reqs])
    arr = np.array([r["arrived_at_s"] for r in reqs])
    n = np.array([r["num_output_tokens"] for r in reqs])
    return request_metrics(
        first - arr, np.where(n > 1, (fin - first) / np.maximum(n - 1, 1), np.nan), fin - arr
    )
