"""Prefill/decode disaggregation: exact hand-off timing on tiny clusters, the shared KV
link, decode-side admission, balanced and per-request strategies, a property test that
no request is lost or duplicated, and the DistServe reproduction in servesim's terms (its
placement searches are characterization tests: they pin servesim's own earlier output; the
tests in DistServe's own setup assert the paper's direction and the mechanism, not a figure)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.cluster.cluster import PoolSpec
from servesim.cluster.run import run_cluster
from servesim.config import (
    ClusterConfig,
    DisaggConfig,
    EngineConfig,
    KvLinkConfig,
    PoolConfig,
    resolve_engine,
)
from servesim.engine.request import ReqStatus
from servesim.metrics.records import RequestStatus
from servesim.papers.distserve import pools as distserve_pools
from servesim.perf.base import ConstantPerfModel
from servesim.workload.base import Workload

KV_BYTES = 1000.0  # per token
BW_GBPS = 0.001  # 1e6 bytes/s: 100 tokens of KV take 0.1 s


def pool(name: str, role: str, n: int = 1, blocks: int = 101, seqs: int = 8) -> PoolSpec:
    eng = resolve_engine(
        EngineConfig(
            max_num_seqs=seqs, max_num_batched_tokens=256, cpu_overhead_s=0.0, enable_prefix_caching=False
        ),
        max_model_len=1024,
    )
    return PoolSpec(
        name,
        role,
        n,
        eng,
        ConstantPerfModel(0.01),
        num_gpu_blocks=blocks,
        max_model_len=1024,
        kv_bytes_per_token=KV_BYTES,
    )


def disagg_cfg(n_p: int = 1, n_d: int = 1, **kw: object) -> ClusterConfig:
    kw.setdefault("link", KvLinkConfig(bandwidth_gb_per_s=BW_GBPS, latency_us=0.0))
    return ClusterConfig(
        pools=[
            PoolConfig(name="p", role="prefill", num_replicas=n_p),
            PoolConfig(name="d", role="decode", num_replicas=n_d),
        ],
        **kw,
    )  # type: ignore[arg-type]


def test_hand_off_timing_exact() -> None:
    wl = make_workload([0.0], 100, 5)
    run = run_cluster(wl, [pool("p", "prefill"), pool("d", "decode")], disagg_cfg(), check_invariants=True)
    r = run.records
    assert r.status[0] == RequestStatus.FINISHED and r.replica[0] == 1 and r.num_output_tokens[0] == 5
    assert r.first_token_s[0] == pytest.approx(0.01)  # TTFT at the prefill replica
    # KV: 100 tokens x 1000 B at 1e6 B/s = 0.1 s; then 4 decode steps of 0.01 s.
    assert r.finished_s[0] == pytest.approx(0.15)
    assert r.tpot_s[0] == pytest.approx((0.15 - 0.01) / 4)  # the transfer is in TPOT
    pre, dec = run.totals
    assert (pre.num_routed, pre.num_kv_transfers, pre.num_steps) == (1, 0, 1)
    assert (dec.num_routed, dec.num_kv_transfers, dec.kv_transfer_bytes) == (1, 1, 1e5)
    assert dec.kv_transfer_s == pytest.approx(0.1)
    assert run.num_handoffs == 1


def test_transfers_share_the_receivers_link() -> None:
    # Two prefills finish together at 0.01 on two prefill replicas; both KV caches go to
    # the one decode replica and share its link: each moves at half speed, 0.2 s.
    wl = make_workload([0.0, 0.0], 100, 2)
    run = run_cluster(wl, [pool("p", "prefill", 2), pool("d", "decode")], disagg_cfg(2, 1))
    np.testing.assert_allclose(run.records.finished_s, [0.01 + 0.2 + 0.01] * 2)
    # Shared by sender instead: two links, each transfer at full speed.
    run = run_cluster(
        wl,
        [pool("p", "prefill", 2), pool("d", "decode")],
        disagg_cfg(2, 1, link=KvLinkConfig(bandwidth_gb_per_s=BW_GBPS, latency_us=0, shared_by="sender")),
    )
    np.testing.assert_allclose(run.records.finished_s, [0.01 + 0.1 + 0.01] * 2)


def test_decode_replica_admits_only_with_blocks() -> None:
    # Decode replica: 11 blocks of 16 (10 usable). Request 0 needs 6 blocks (80 + 20 tokens),
    # request 1 needs 6 too: it arrives while 0 runs and waits there until 0 finishes.
    wl = make_workload([0.0, 0.0], 80, 20)
    run = run_cluster(
        wl,
        [pool("p", "prefill", 2), pool("d", "decode", blocks=11)],
        disagg_cfg(2, 1, link=KvLinkConfig(bandwidth_gb_per_s=1000.0, latency_us=0)),
        check_invariants=True,
    )
    f0, f1 = run.records.finished_s
    assert f0 == pytest.approx(0.01 + 19 * 0.01, abs=1e-4)
    assert f1 == pytest.approx(f0 + 19 * 0.01, abs=1e-4)  # started after 0 freed its blocks
    assert (run.records.num_preemptions == 0).all()


def test_balanced_disaggregation_computes_the_tail_on_the_decode_replica() -> None:
    wl = make_workload([0.0], 100, 3)
    run = run_cluster(
        wl,
        [pool("p", "prefill"), pool("d", "decode")],
        disagg_cfg(disaggregation=DisaggConfig(decode_prefill_fraction=0.25)),
        check_invariants=True,
    )
    r = run.records
    # Prefill computes 75 tokens (0.01 s), 75 kB cross in 0.075 s, the decode replica
    # computes 25 tokens and the first token (0.01 s): TTFT 0.095 s, then 2 decodes.
    assert r.first_token_s[0] == pytest.approx(0.095)
    assert r.finished_s[0] == pytest.approx(0.115)
    assert r.num_output_tokens[0] == 3
    assert run.totals[1].kv_transfer_bytes == 75 * KV_BYTES


def test_short_prompts_are_served_colocated_on_decode_replicas() -> None:
    wl = make_workload([0.0, 0.0], [40, 400], 3)
    run = run_cluster(
        wl,
        [pool("p", "prefill"), pool("d", "decode")],
        disagg_cfg(disaggregation=DisaggConfig(colocate_below_tokens=100)),
    )
    pre, dec = run.totals
    assert pre.num_routed == 1 and dec.num_routed == 2 and dec.num_kv_transfers == 1
    assert run.records.replica.tolist() == [1, 1]
    assert run.records.first_token_s[0] == pytest.approx(0.01)  # prefilled by the decode replica


def test_one_output_token_needs_no_transfer() -> None:
    run = run_cluster(make_workload([0.0], 100, 1), [pool("p", "prefill"), pool("d", "decode")], disagg_cfg())
    assert run.records.finished_s[0] == pytest.approx(0.01) and run.records.replica[0] == 0
    assert run.num_handoffs == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_p=st.integers(1, 3),
    n_d=st.integers(1, 3),
    router=st.sampled_from(
        ["round_robin", "random", "least_outstanding", "least_kv", "least_work", "power_of_two"]
    ),
    frac=st.sampled_from([0.0, 0.0, 0.3]),
    below=st.sampled_from([0, 0, 60]),
    blocks=st.integers(12, 40),
    migrate=st.booleans(),
    reqs=st.lists(
        st.tuples(st.floats(0, 0.5), st.integers(1, 150), st.integers(1, 30)), min_size=1, max_size=25
    ),
)
def test_no_request_lost_or_duplicated(
    n_p: int,
    n_d: int,
    router: str,
    frac: float,
    below: int,
    blocks: int,
    migrate: bool,
    reqs: list[tuple[float, int, int]],
) -> None:
    reqs = sorted(reqs)
    wl = make_workload([a for a, _, _ in reqs], [p for _, p, _ in reqs], [o for _, _, o in reqs])
    from servesim.config import MigrationConfig

    cfg = disagg_cfg(
        n_p,
        n_d,
        router=router,
        disaggregation=DisaggConfig(decode_prefill_fraction=frac, colocate_below_tokens=below),
        migration=MigrationConfig(enabled=migrate, interval_s=0.05, threshold=0.05),
        link=KvLinkConfig(bandwidth_gb_per_s=0.01, latency_us=50),
    )
    finishes: list[int] = []
    pools = [pool("p", "prefill", n_p, blocks=blocks), pool("d", "decode", n_d, blocks=blocks)]
    import servesim.cluster.cluster as cl

    orig = cl.Cluster._done

    def spy(self: cl.Cluster, req: object) -> None:
        finishes.append(req.idx)  # type: ignore[attr-defined]
        orig(self, req)  # type: ignore[arg-type]

    cl.Cluster._done = spy  # type: ignore[method-assign]
    try:
        run = run_cluster(wl, pools, cfg, check_invariants=True)
    finally:
        cl.Cluster._done = orig  # type: ignore[method-assign]
    rec = run.records
    usable = (blocks - 1) * 16
    servable = [p + o <= usable and p < 1024 for _, p, o in reqs]
    assert sorted(finishes) == [i for i, ok in enumerate(servable) if ok]  # each exactly once
    assert (rec.status == np.where(servable, RequestStatus.FINISHED, RequestStatus.REJECTED)).all()
    ok = np.asarray(servable)
    assert (rec.num_output_tokens[ok] == np.asarray([o for _, _, o in reqs])[ok]).all()
    # Where each request ends: on a decode replica if it was served there whole (prompt below
    # colocate_below_tokens), left a tail of its prompt there, or has outputs after the first
    # token; on its prefill replica otherwise.
    prompts = np.asarray([p for _, p, _ in reqs])
    tail = np.minimum((prompts * frac).astype(int), prompts - 1) > 0
    on_decode = (prompts < below) | tail | (rec.num_output_tokens > 1)
    np.testing.assert_array_equal((rec.replica >= n_p)[ok], on_decode[ok])
    assert sum(t.num_kv_transfers for t in run.totals) == run.num_handoffs + run.num_migrations


def test_request_state_after_hand_off() -> None:
    from servesim.cluster.cluster import Cluster
    from servesim.engine.events import EventLoop
    from servesim.metrics.records import RequestRecords

    loop = EventLoop()
    c = Cluster(loop, [pool("p", "prefill"), pool("d", "decode")], disagg_cfg(), RequestRecords.empty(1))
    from servesim.engine.arrivals import iter_requests

    req = next(iter(iter_requests(make_workload([0.0], 50, 4))))
    loop.at(0.0, c.on_arrival, req)
    loop.run(0.05)  # prefill done at 0.01, KV (50 kB) in flight until 0.06
    assert req.status == ReqStatus.WAITING and req.num_computed_tokens == 50 and req.num_output_tokens == 1
    assert req.max_tokens == 4 and c.outstanding == [0, 1] and not c.replicas[0].kv.held
    loop.run()
    assert req.status == ReqStatus.FINISHED and c.outstanding == [0, 0] and not c.replicas[1].kv.held


# --------------------------------------------------------------------------- DistServe


def _goodput_per_gpu(
    pools: list[dict], prompt: dict, output: dict, slo: dict, hi: float, engine: dict | None = None
) -> float:
    """DistServe's metric: the highest Poisson rate whose SLO attainment is >= 90%, per GPU
    (bisection on a log scale, 20 s of traffic per trial)."""
    import servesim

    def ok(rate: float) -> bool:
        s = servesim.simulate(
            {
                "model": {"name": "OPT-13B"},
                "hardware": {"gpu": "A100-80GB", "perf_model": "roofline"},
                "slo": slo,
                "workload": {
                    "type": "synthetic",
                    "num_requests": None,
                    "duration_s": 20.0,
                    "seed": 3,
                    "arrival": {"process": "poisson", "rate": rate},
                    "prompt_len": prompt,
                    "output_len": output,
                },
                "cluster": {"pools": pools, "router": "least_outstanding"},
                **({"engine": engine} if engine else {}),
            }
        ).summary
        return s["slo"]["attainment"]["all"] >= 0.9

    lo = 0.1
    if not ok(lo):
        return 0.0
    for _ in range(7):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    gpus = sum(p["num_replicas"] * p["parallel"]["tensor_parallel_size"] for p in pools)
    return lo / gpus


def _p(name: str, role: str, n: int, tp: int = 1) -> dict:
    return {"name": name, "role": role, "num_replicas": n, "parallel": {"tensor_parallel_size": tp}}


def best(placements: dict[str, list[dict]], *args: object, engine: dict | None = None) -> tuple[str, float]:
    scores = {k: _goodput_per_gpu(v, *args, engine=engine) for k, v in placements.items()}  # type: ignore[arg-type]
    k = max(scores, key=scores.__getitem__)
    return k, scores[k]


@pytest.mark.characterization
def test_characterization_distserve_no_disaggregation_gain_on_prompt_heavy_tight_slos() -> None:
    """Characterization: pins servesim's own output, not DistServe's result.

    OPT-13B on A100s, prompts of 1024-1792 tokens, 8-32 outputs, TTFT <= 300 ms and TPOT <=
    25 ms at 90% attainment. Best of each family, per GPU, with the default engine (vLLM
    0.19: async scheduling, CUDA graphs): colocated TP4 x2 2.60 req/s/GPU, the best
    disaggregated placement (5 x TP1 prefill + 1 x TP2 decode) 2.58: 0.99x, no win on this
    workload. (With the timing servesim had when this test was first written, sync scheduling
    and eager kernels, the same search gave 1.26x; the paper-setup test below compares against
    vLLM V0, as DistServe did.)"""
    args = (
        {"kind": "uniform", "low": 1024, "high": 1792},
        {"kind": "uniform", "low": 8, "high": 32},
        {"ttft_s": 0.3, "tpot_s": 0.025},
        40.0,
    )
    colo = best(
        {
            "tp2": [_p("c", "colocated", 1, 2)],
            "tp4": [_p("c", "colocated", 1, 4)],
            "tp4x2": [_p("c", "colocated", 2, 4)],
        },
        *args,
    )
    dis = best(
        {
            "4p1d": [_p("p", "prefill", 4), _p("d", "decode", 1, 2)],
            "5p1d": [_p("p", "prefill", 5), _p("d", "decode", 1, 2)],
        },
        *args,
    )
    print(f"colocated {colo}, disaggregated {dis}: {dis[1] / colo[1]:.2f}x")
    assert 0.99 / 1.1 <= dis[1] / colo[1] <= 0.99 * 1.1, (colo, dis)  # measured 0.99x (to ~10%)


@pytest.mark.characterization
def test_characterization_colocation_wins_on_short_prompts_loose_slos() -> None:
    """Characterization: pins servesim's own output (the measured ratio below).

    Short prompts (32-128), long outputs (128-384), TTFT <= 2 s, TPOT <= 100 ms: a prefill
    GPU has little to do (measured: colocated 19.8 req/s/GPU, 1P1D 13.7: 1.45x)."""
    args = (
        {"kind": "uniform", "low": 32, "high": 128},
        {"kind": "uniform", "low": 128, "high": 384},
        {"ttft_s": 2.0, "tpot_s": 0.1},
        100.0,
    )
    colo = best({"x1": [_p("c", "colocated", 1)]}, *args)
    dis = best({"1p1d": [_p("p", "prefill", 1), _p("d", "decode", 1)]}, *args)
    print(f"colocated {colo}, disaggregated {dis}: {colo[1] / dis[1]:.2f}x")
    assert 1.45 / 1.1 <= colo[1] / dis[1] <= 1.45 * 1.1, (colo, dis)  # measured 1.45x (to ~10%)


# --------------------------------------------------------------------------- DistServe, the paper's setup


def _distserve_goodput_per_gpu(
    model: str,
    tps: tuple[tuple[str, int], ...],
    prompt_median: float,
    slo: tuple[float, float],
    lo: float,
    hi: float,
) -> float:
    """DistServe's metric: the highest Poisson rate (per GPU) at which >= 90% of requests meet
    both the TTFT and the TPOT SLO; 60 s of traffic, common random numbers, bisection on a
    log scale to ~6%."""
    # The reproduction's pools (servesim.papers.distserve): the artifact's engines, DistServe's fits.
    cfg, specs = distserve_pools(model, tps)
    rng = np.random.default_rng(1)
    n = 8000
    unit = np.cumsum(rng.exponential(1.0, n))
    prompt = np.clip(rng.lognormal(np.log(prompt_median), 0.7, n), 4, 1536).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(150), 0.9, n), 4, 512).astype(np.int64)
    gpus = sum(s.num_gpus for s in specs)

    def ok(rate: float) -> bool:
        k = int(np.searchsorted(unit / rate, 60.0))
        rec = run_cluster(
            Workload(unit[:k] / rate, prompt[:k], output[:k]), specs, cfg, record_steps=False
        ).records
        return float(((rec.ttft_s <= slo[0]) & ~(rec.tpot_s > slo[1])).mean()) >= 0.9

    lo, hi = lo * gpus, hi * gpus
    assert ok(lo) and not ok(hi), (lo, hi)
    for _ in range(7):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo / gpus


def _distserve_gain(
    model: str, slo: tuple[float, float], tps: tuple[int, int, int], prompt_median: float, hi: float
) -> float:
    vllm_tp, prefill_tp, decode_tp = tps
    colo = _distserve_goodput_per_gpu(model, (("colocated", vllm_tp),), prompt_median, slo, 0.02, hi)
    dis = _distserve_goodput_per_gpu(
        model, (("prefill", prefill_tp), ("decode", decode_tp)), prompt_median, slo, 0.02, hi
    )
    print(
        f"{model}, prompt median {prompt_median}: vLLM {colo:.3f}, DistServe {dis:.3f} req/s/GPU: "
        f"{dis / colo:.2f}x"
    )
    return dis / colo


@pytest.mark.slow
def test_distserve_paper_setup_gain_grows_with_prompt_length() -> None:
    """DistServe (Zhong et al., OSDI'24), chatbot on ShareGPT: per-GPU goodput at 90% SLO
    attainment, DistServe 2.0-4.6x vLLM (see docs/cluster.md and docs/papers.md for the whole
    finding).

    The paper's setup, from its artifact (LLMServe/DistServe, evaluation/ae-scripts/e2e/
    _plot.py and 2-start-api-server.py): OPT-13B, TTFT <= 0.25 s and TPOT <= 0.1 s, vLLM TP1
    on 1 GPU against DistServe's prefill TP2 + decode TP1 (3 GPUs). Step times: DistServe's
    own A100 fits of each engine. vLLM is V0 (prefill-prioritizing, no chunked prefill), as
    the paper's vLLM was.

    Lengths: lognormal outputs (median 150, up to 512) and prompts of median 107 (ShareGPT's
    single-turn prompts as vLLM's paper reports them) or 600 (DistServe's preprocessing joins
    a random number of earlier turns into the prompt, so its prompts are longer; its exact
    distribution is not published). The gain is steep in the prompt length: with short prompts
    a prefill is cheap, TTFT holds on one colocated GPU and the dedicated prefill GPUs idle;
    with long prompts vLLM's batched prefills push TTFT over 0.25 s early. Measured 0.47x
    (vLLM 8.46, DistServe 4.00 req/s/GPU) and 1.94x (0.94, 1.82). Asserted: the paper's
    direction on the longer prompts (DistServe ahead) and the mechanism (the gain grows with
    the prompt length), not these figures; the paper's range is read by
    ``servesim reproduce distserve`` (docs/papers.md says why no run length holds it).
    """
    short = _distserve_gain("OPT-13B", (0.25, 0.1), (1, 2, 1), 107, 12.0)
    long = _distserve_gain("OPT-13B", (0.25, 0.1), (1, 2, 1), 600, 4.0)
    assert long > 1.0
    assert short < long


@pytest.mark.slow
def test_distserve_paper_setup_opt_66b_is_ahead_of_vllm() -> None:
    """DistServe on OPT-66B (TTFT <= 0.4 s, TPOT <= 0.1 s): vLLM TP4 against prefill TP4 +
    decode TP2 x PP2 in the artifact (8 GPUs; here decode TP4, as DistServe publishes no PP
    fit), prompts of median 600. Measured 2.70x (vLLM 0.158, DistServe 0.428 req/s/GPU; prompt
    median 107: 1.13x). Asserted: the paper's direction, DistServe ahead. vLLM's TP4 prefill
    of a 1,536-token prompt takes 0.478 s under DistServe's fit, past the 0.4 s TTFT, so a
    long enough run leaves vLLM no goodput at 90% (docs/papers.md); a 60 s run reads its
    first minute's draws."""
    assert _distserve_gain("OPT-66B", (0.4, 0.1), (4, 4, 4), 600, 4.0) > 1.0
