"""DistServe (Zhong et al., "DistServe: Disaggregating Prefill and Decoding for Goodput-
optimized Large Language Model Serving", OSDI'24): per-GPU goodput at 90% SLO attainment up
to 7.4x vLLM's, or SLOs 12.6x tighter.

The paper's setup from its artifact (LLMServe/DistServe, evaluation/ae-scripts/e2e/_plot.py
and evaluation/2-benchmark-serving/2-start-api-server.py), chatbot on OPT-13B: TTFT <= 0.25
s and TPOT <= 0.1 s; vLLM TP1 on 1 GPU (16,384 batched tokens, 1,024 sequences) against
DistServe's prefill TP2 (8,192 tokens, 128 requests) + decode TP1 (1,024 requests). Each
engine is timed by DistServe's own published A100-80GB fit of it (bundled with servesim's
validation data), since the roofline knows neither engine's overheads; vLLM is V0
(prefill-prioritizing, no chunked prefill), as the paper's was. Lengths: lognormal outputs
(median 150, up to 512) and prompts of median 600 (DistServe joins earlier turns into the
prompt; its distribution is not published). Goodput: the highest Poisson rate per GPU with
>= 90% of requests meeting both SLOs, 120 s of traffic (--quick: 60 s), bisection on a log
scale (to ~3%; --quick ~6%).

The full run adds OPT-66B (TTFT <= 0.4 s, TPOT <= 0.1 s): vLLM TP4 against prefill TP4 and
decode TP4 (the artifact's decode is TP2 x PP2; DistServe publishes no pipeline fit), and
OPT-175B (TTFT <= 4 s, TPOT <= 0.2 s; the paper's Sec. 6.1 and Table 1 placement for ShareGPT:
prefill TP3 x PP3 and decode TP4 x PP3, 21 GPUs, against vLLM TP8 on 8, as _plot.py's backends
count them). DistServe publishes no fit for OPT-175B, so both systems are timed by servesim's
own step-time model (no engine overheads). A PP3 instance keeps up to three batches in flight,
one a stage, and takes an arrival while batches are in flight (its loop polls every 3 ms),
as DistServe's engine does (``distserve/single_stage_engine.py``, ``batches_in_pipeline``;
servesim's ``engine.batch_queue``, ``engine.pipeline_wakes``).

The second metric (the paper's Fig. 8 lower row; _plot.py's draw_slo_scale_plot): at one per-GPU
rate (OPT-13B 1.5, OPT-66B 0.25, OPT-175B 0.125 req/s/GPU, _plot.py's plot_fig8_lower) the TTFT
and TPOT limits are scaled together, and the SLO scale is the smallest factor at which 90% of
the requests meet both; the figure is vLLM's scale over DistServe's ("x tighter SLO"). One run
per system gives it exactly: the 90th percentile of each request's max(TTFT / TTFT SLO, TPOT /
TPOT SLO). The paper: 1.8-3.2x on the chatbot (Sec. 6.2), up to 12.6x over all applications.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from importlib import resources
from typing import Any

import numpy as np

from servesim.papers.base import Curve, Figure, Outcome, Paper
from servesim.perf.base import BatchStats

#: The artifact's chatbot runs: (TTFT, TPOT) SLO, vLLM's TP, DistServe's prefill and decode TP
#: (OPT-66B's decode is TP2 x PP2 there; DistServe publishes no pipeline fit, so TP4 here), and
#: the per-GPU rates the search brackets.
RUNS = {
    "OPT-13B": ((0.25, 0.1), 1, 2, 1, 0.2, 4.0),
    "OPT-66B": ((0.4, 0.1), 4, 4, 4, 0.05, 4.0),
    "OPT-175B": ((4.0, 0.2), 8, 3, 4, 0.02, 1.0),
}

#: Pipeline stages by role (the paper's OPT-175B placement: prefill and decode PP3).
PP = {"OPT-175B": {"colocated": 1, "prefill": 3, "decode": 3}}

#: The per-GPU rate at which the artifact reads the SLO scale (_plot.py, plot_fig8_lower).
SCALE_RATE = {"OPT-13B": 1.5, "OPT-66B": 0.25, "OPT-175B": 0.125}


@dataclasses.dataclass(slots=True)
class DistServeFitPerf:
    """A step time from DistServe's fit of one engine (prefill ms = a + b Σp + c Σp², decode ms
    = a + b Σcontext + c batch). A V0 or prefill-only step holds whole prompts, so Σp² = 2 x
    prefill_attn_work."""

    fit: Any

    def batch_time(self, s: BatchStats) -> float:
        t = 0.0
        if s.num_prefill_reqs:
            a, b, c = self.fit.prefill
            t += (a + b * s.num_prefill_tokens + c * 2 * s.prefill_attn_work) * 1e-3
        if s.num_decode_reqs:
            t += self.fit.decode_s(s.num_decode_reqs, s.sum_decode_context)
        return t

    def batch_flops(self, s: BatchStats) -> float:
        return 0.0

    def batch_bytes(self, s: BatchStats) -> float:
        return 0.0


def fits() -> dict[tuple[str, str, int], Any]:
    """DistServe's A100-80GB fits of its engine and of vLLM, from the bundled validation data."""
    from servesim.calibration.measurements import DistServeFit
    from servesim.validate.common import BUNDLED_DATA

    out = {}
    ref = resources.files("servesim").joinpath("data", BUNDLED_DATA)
    with ref.open("rb") as f, tarfile.open(fileobj=f, mode="r:gz") as tar:
        for engine in ("vllm", "distserve"):
            member = tar.extractfile(f"data/measurements/distserve/distserve_profiler-a100-80g.{engine}.json")
            assert member is not None
            for model, by_tp in json.load(member).items():
                for tp, p in by_tp.items():
                    out[engine, model, int(tp)] = DistServeFit(
                        model,
                        int(tp),
                        tuple(p["prefill"]),
                        tuple(p["decoding_smallbs"]),
                        tuple(p["decoding_largebs"]),
                        int(p["decoding_large_small_bs_threshold"]),
                    )
    return out


def _engine(batched_tokens: int, seqs: int, polls: bool = False) -> dict[str, Any]:
    """An engine's settings; ``polls``: DistServe's engine loop, which polls for arrivals every
    3 ms while batches are in flight (``engine.batch_queue``)."""
    return {
        "policy": "vllm_v0",
        "pipeline_wakes": polls,
        "max_num_batched_tokens": batched_tokens,
        "max_num_seqs": seqs,
        "max_model_len": 2048,
        "gpu_memory_utilization": 0.95,
        "cpu_overhead_s": 0.0,
    }


def pools(model: str, tps: tuple[tuple[str, int], ...]) -> tuple[Any, list[Any]]:
    from servesim.catalog.hf_config import load_model
    from servesim.cluster.pools import build_pool
    from servesim.config import Scenario

    engines = {
        "colocated": _engine(16384, 1024),
        "prefill": _engine(8192, 128, polls=True),
        "decode": _engine(65536, 1024, polls=True),
    }
    pp = PP.get(model, {})
    spec = [
        {
            "name": role,
            "role": role,
            "num_replicas": 1,
            "engine": engines[role],
            "parallel": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp.get(role, 1)},
        }
        for role, tp in tps
    ]
    sc = Scenario.model_validate(
        {
            "model": {"name": model},
            "hardware": {"gpu": "A100-80GB"},
            "cluster": {"pools": spec, "router": "least_outstanding"},
        }
    )
    engine_of = {"colocated": "vllm", "prefill": "distserve", "decode": "distserve"}
    fit = fits()
    assert sc.cluster is not None
    specs = []
    for p in sc.cluster.pools:
        built = build_pool(sc, p, load_model(model))
        key = (
            engine_of[p.role],
            f"facebook/{model.lower()}",
            (p.parallel or sc.parallel).tensor_parallel_size,
        )
        # No fit (OPT-175B): servesim's roofline, as build_pool made it.
        specs.append(dataclasses.replace(built, perf=DistServeFitPerf(fit[key])) if key in fit else built)
    return sc.cluster, specs


def _traffic(n: int = 8000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit-rate Poisson arrivals and the stand-in chatbot lengths (one draw for every run)."""
    rng = np.random.default_rng(1)
    unit = np.cumsum(rng.exponential(1.0, n))
    prompt = np.clip(rng.lognormal(np.log(600), 0.7, n), 4, 1536).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(150), 0.9, n), 4, 512).astype(np.int64)
    return unit, prompt, output


def scale_at_attainment(
    ttft_s: np.ndarray, tpot_s: np.ndarray, slo: tuple[float, float], target: float = 0.9
) -> float:
    """The smallest s at which a fraction >= ``target`` of the requests has TTFT <= s x slo[0]
    and TPOT <= s x slo[1] (a NaN TPOT, a one-token request's, meets any): the ceil(target x
    n)-th smallest of max(TTFT / slo[0], TPOT / slo[1]). _plot.py reads the same crossing off
    its attainment curve, by linear interpolation between the scales it plots."""
    need = np.maximum(np.asarray(ttft_s) / slo[0], np.nan_to_num(np.asarray(tpot_s) / slo[1], nan=0.0))
    return float(np.sort(need)[int(np.ceil(target * len(need) - 1e-9)) - 1])


def slo_scale(
    model: str,
    system: str,
    tps: tuple[tuple[str, int], ...],
    duration_s: float,
    rows: list[dict[str, Any]],
) -> float:
    """The smallest factor on both SLO limits at which >= 90% of the requests meet them, at the
    artifact's per-GPU rate (``SCALE_RATE``): the 90th percentile (the ceil(0.9 n)-th smallest) of
    each request's max(TTFT / TTFT limit, TPOT / TPOT limit); a one-token request has no TPOT."""
    from servesim.cluster.run import run_cluster
    from servesim.workload.base import Workload

    slo = RUNS[model][0]
    cfg, specs = pools(model, tps)
    unit, prompt, output = _traffic()
    gpus = sum(s.num_gpus for s in specs)
    rate = SCALE_RATE[model] * gpus
    k = int(np.searchsorted(unit / rate, duration_s))
    rec = run_cluster(
        Workload(unit[:k] / rate, prompt[:k], output[:k]), specs, cfg, record_steps=False
    ).records
    scale = scale_at_attainment(rec.ttft_s, rec.tpot_s, slo)
    rows.append(
        {
            "model": model,
            "system": system,
            "rate_req_s": rate,
            "rate_per_gpu": SCALE_RATE[model],
            "requests": k,
            "slo_scale": scale,
        }
    )
    return scale


def goodput_per_gpu(
    model: str,
    system: str,
    tps: tuple[tuple[str, int], ...],
    duration_s: float,
    iters: int,
    rows: list[dict[str, Any]],
) -> float:
    from servesim.cluster.run import run_cluster
    from servesim.workload.base import Workload

    slo, _, _, _, lo, hi = RUNS[model]
    cfg, specs = pools(model, tps)
    unit, prompt, output = _traffic()
    gpus = sum(s.num_gpus for s in specs)

    def ok(rate: float) -> bool:
        k = int(np.searchsorted(unit / rate, duration_s))
        wl = Workload(unit[:k] / rate, prompt[:k], output[:k])
        rec = run_cluster(wl, specs, cfg, record_steps=False).records
        att = float(((rec.ttft_s <= slo[0]) & ~(rec.tpot_s > slo[1])).mean())
        rows.append(
            {
                "model": model,
                "system": system,
                "rate_req_s": rate,
                "rate_per_gpu": rate / gpus,
                "attainment": att,
                "meets": att >= 0.9,
            }
        )
        return att >= 0.9

    lo, hi = lo * gpus, hi * gpus
    if not ok(lo):
        return 0.0
    if ok(hi):
        return hi / gpus
    for _ in range(iters):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo / gpus


#: The figure keys of each model's goodput and SLO-scale ratios.
SUFFIX = {"OPT-13B": "", "OPT-66B": "_66b", "OPT-175B": "_175b"}


def run(quick: bool) -> Outcome:
    """OPT-13B (--quick: 60 s of traffic, a coarser search); the full run adds OPT-66B and OPT-175B."""
    duration, iters = (60.0, 7) if quick else (120.0, 9)
    rows: list[dict[str, Any]] = []
    values, notes = {}, []
    for model in ("OPT-13B",) if quick else tuple(RUNS):
        _, vllm_tp, prefill_tp, decode_tp, _, _ = RUNS[model]
        systems = {
            "vllm": (("colocated", vllm_tp),),
            "distserve": (("prefill", prefill_tp), ("decode", decode_tp)),
        }
        good = {k: goodput_per_gpu(model, k, tps, duration, iters, rows) for k, tps in systems.items()}
        scale = {k: slo_scale(model, k, tps, duration, rows) for k, tps in systems.items()}
        rows += [
            {"model": model, "system": k, "goodput_req_s_per_gpu": good[k], "slo_scale": scale[k]}
            for k in systems
        ]
        vllm, dist = good["vllm"], good["distserve"]
        values["goodput" + SUFFIX[model]] = dist / vllm if vllm else float("inf")
        values["slo_scale" + SUFFIX[model]] = scale["vllm"] / scale["distserve"]
        notes.append(
            f"{model}: per-GPU goodput at 90% attainment (req/s/GPU): vLLM {vllm:.3f}, DistServe {dist:.3f}; "
            f"SLO scale at 90% and {SCALE_RATE[model]} req/s/GPU: vLLM {scale['vllm']:.2f}, "
            f"DistServe {scale['distserve']:.2f}"
        )
    return Outcome(values, rows, notes)


#: The paper's headline, setup and figures (``servesim reproduce distserve``).
PAPER = Paper(
    "distserve",
    "DistServe",
    "Zhong et al., DistServe: Disaggregating Prefill and Decoding for Goodput-optimized Large Language "
    "Model Serving, OSDI'24",
    "up to 7.4x more requests (goodput) or 12.6x tighter SLO than vLLM at 90% SLO attainment",
    {
        "model": "OPT-13B / 66B / 175B",
        "gpus": "A100-80GB (4 nodes x 8)",
        "workload": "chatbot (ShareGPT), code (HumanEval), summarization (LongBench)",
        "slo": "TTFT and TPOT per application (OPT-13B chatbot: 0.25 s, 0.1 s), 90% attainment",
        "baseline": "vLLM (colocated), DeepSpeed-MII",
        "metric": "per-GPU goodput, DistServe / vLLM; SLO scale (TTFT and TPOT limits scaled together) "
        "at 90% attainment and a fixed per-GPU rate, vLLM / DistServe",
    },
    (
        Figure(
            "goodput",
            "per-GPU goodput, DistServe / vLLM (OPT-13B chatbot)",
            "2.0-4.6x (chatbot; up to 7.4x overall)",
            2.0,
            4.6,
        ),
        Figure(
            "slo_scale",
            "SLO scale at 90% attainment, vLLM / DistServe (OPT-13B chatbot, 1.5 req/s/GPU)",
            "1.8-3.2x tighter (chatbot; up to 12.6x overall)",
            1.8,
            3.2,
        ),
        Figure(
            "goodput_66b",
            "per-GPU goodput, DistServe / vLLM (OPT-66B chatbot)",
            "2.0-4.6x (chatbot; up to 7.4x overall)",
            2.0,
            4.6,
        ),
        Figure(
            "slo_scale_66b",
            "SLO scale at 90% attainment, vLLM / DistServe (OPT-66B chatbot, 0.25 req/s/GPU)",
            "1.8-3.2x tighter (chatbot; up to 12.6x overall)",
            1.8,
            3.2,
        ),
        Figure(
            "goodput_175b",
            "per-GPU goodput, DistServe / vLLM (OPT-175B chatbot)",
            "2.0-4.6x (chatbot; up to 7.4x overall)",
            2.0,
            4.6,
        ),
        Figure(
            "slo_scale_175b",
            "SLO scale at 90% attainment, vLLM / DistServe (OPT-175B chatbot, 0.125 req/s/GPU)",
            "1.8-3.2x tighter (chatbot; up to 12.6x overall)",
            1.8,
            3.2,
        ),
    ),
    "OPT-13B chatbot: vLLM (V0) TP1 against DistServe prefill TP2 + decode TP1, step times from "
    "DistServe's own A100 fits of each engine (bundled), prompts lognormal median 600, outputs median "
    "150, TTFT <= 0.25 s, TPOT <= 0.1 s; 120 s of Poisson traffic (--quick: 60 s). The full run adds "
    "OPT-66B (TTFT <= 0.4 s): vLLM TP4 against prefill TP4 + decode TP4 (the artifact's TP2 x PP2), and "
    "OPT-175B (TTFT <= 4 s, TPOT <= 0.2 s): vLLM TP8 against prefill TP3 x PP3 + decode TP4 x PP3, "
    "timed by servesim's roofline (DistServe publishes no OPT-175B fit). The SLO scale is read at the "
    "artifact's per-GPU rate from one run of each system.",
    run,
    "The gain is steep in the prompt length, which DistServe's preprocessing sets and does not publish; "
    "the chatbot's 2.0-4.6x is its range on ShareGPT, the 7.4x its best case across "
    "applications and models. A prompt median of 600 stands in for DistServe's multi-turn prompts; "
    "9.3% of its prompts (over about 1,490 tokens) cannot meet the 0.25 s TTFT on vLLM's one GPU "
    "under DistServe's own fit, so vLLM attains at most 90.7% and its goodput falls with the run "
    "length (1.96x at 60 s, 2.52x at 120 s, 6.54x at 240 s): not a steady state. The SLO scale reads "
    "1.82x at 60 and 120 s, 1.87x at 240 s, 1.37x at 480 s (DistServe's queue builds at 1.5 req/s/GPU). "
    "OPT-175B lands below both ranges, timed by the roofline for both systems: a decode token "
    "crosses DistServe's three pipeline stages, so its TPOT is over twice vLLM's on TP8 "
    "(docs/papers.md).",
    curve=Curve(
        "Fig. 8 (upper row): SLO attainment against the per-GPU rate",
        "rate_per_gpu",
        "attainment",
        ("model", "system"),
        "rate (req/s/GPU)",
        "SLO attainment",
    ),
)
