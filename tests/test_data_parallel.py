"""vLLM's data-parallel ranks (``parallel.data_parallel_size``): the config's rules, the
memory plan and step time of an MoE model's ranks, vLLM's balancing over them, their
lockstep steps (exact timings on a tiny cluster), and a scenario run end to end."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_workload
from pydantic import ValidationError

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.cluster.cluster import PoolSpec
from servesim.cluster.router import ROUTERS, ReplicaLoad, RouterState
from servesim.cluster.run import run_cluster
from servesim.config import ClusterConfig, EngineConfig, ParallelConfig, PoolConfig, resolve_engine
from servesim.engine.frontend import api_servers_per_rank
from servesim.engine.request import Request
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats
from servesim.perf.kernel_model import KernelPerfModel
from servesim.perf.memory import weights_bytes_per_gpu
from servesim.perf.roofline import RooflinePerfModel
from servesim.sim import simulate

MINIMAX = "MiniMaxAI/MiniMax-M2.5"


def test_config_rules() -> None:
    p = ParallelConfig(tensor_parallel_size=1, data_parallel_size=4, expert_parallel_size=4)
    assert p.moe_gpus == 4
    ParallelConfig(tensor_parallel_size=2, data_parallel_size=2, expert_parallel_size=4)
    with pytest.raises(ValidationError, match="must divide data_parallel_size x tensor_parallel_size"):
        ParallelConfig(tensor_parallel_size=1, data_parallel_size=2, expert_parallel_size=4)
    with pytest.raises(ValidationError, match="pipeline_parallel_size"):
        ParallelConfig(data_parallel_size=2, pipeline_parallel_size=2)


def test_weights_of_a_rank_hold_all_attention_and_a_share_of_the_experts() -> None:
    # MiniMax-M2.5 (fp8, 62 MoE layers of 256 experts): at DP 4 x TP 1 each GPU holds the
    # whole attention and 1/4 of the experts; at TP 4 a quarter of both.
    m = load_model(MINIMAX)
    dp4, tp4 = weights_bytes_per_gpu(m, 1, 1, 4), weights_bytes_per_gpu(m, 4, 1)
    attn = m.num_layers * m.attn_params_per_layer() * m.dtype_bytes
    vocab = (m.embedding_params() + m.lm_head_params()) * m.activation_dtype_bytes
    extra = (
        attn
        - m.num_layers * m.attn_params_per_layer(4) * m.dtype_bytes
        + vocab
        - (m.embedding_params(4) + m.lm_head_params(4)) * m.activation_dtype_bytes
    )
    assert dp4 - tp4 == pytest.approx(extra, rel=1e-9)
    expert_bytes = m.num_moe_layers * m.num_experts * m.expert_params() * m.expert_weight_bytes
    assert dp4 > expert_bytes / 4 > 0.9 * (dp4 - attn - vocab)


def test_rank_step_runs_its_experts_on_every_ranks_tokens() -> None:
    # One rank of DP 2 x TP 1 (EP over the 2 GPUs): its MoE layers are the measured kernel of
    # the 2-GPU expert split on twice its tokens, its attention and projections TP 1's, and
    # the token exchange NCCL's all-gather + reduce-scatter of the gathered tokens; no
    # all-reduce (no TP inside the rank).
    m, gpu = load_model(MINIMAX), get_gpu("B200")
    dp = KernelPerfModel(m, gpu, tp=1, ep=2, dp=2)
    ep = KernelPerfModel(m, gpu, tp=2, ep=2)
    tp1 = KernelPerfModel(m, gpu, tp=1)
    ops = {n: c for n, c, _ in dp._token_ops}
    ref = {n: c for n, c, _ in ep._token_ops}
    one = {n: c for n, c, _ in tp1._token_ops}
    t = np.array([16.0, 100.0, 1024.0])
    np.testing.assert_allclose(ops["moe"].at_many(t), ref["moe"].at_many(2 * t), rtol=1e-12)
    np.testing.assert_allclose(ops["gemm_qkv"].at_many(t), one["gemm_qkv"].at_many(t), rtol=1e-12)
    assert "allreduce" not in ops and "gather_scatter" in ops
    assert dp.sources["gather_scatter"] == "table NCCL all_gather + reduce_scatter"
    ag, rs = dp.db.nccl("all_gather", 2), dp.db.nccl("reduce_scatter", 2)
    size = 2 * 1024 * m.hidden_size  # the gathered elements of 1024 tokens a rank
    j = int(np.searchsorted(ag[0], size))  # measured sizes are powers of two; 3072 is not
    assert ag[0][j - 1] < size < ag[0][j]
    lo, hi = ((ag[1][i] + rs[1][i]) * 1e-3 for i in (j - 1, j))
    assert lo < ops["gather_scatter"].at(1024.0) < hi


def test_dense_ranks_share_nothing() -> None:
    m, gpu = load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100-SXM")
    st = BatchStats(
        num_prefill_tokens=512,
        num_prefill_reqs=1,
        prefill_attn_work=512 * 256.0,
        num_decode_reqs=8,
        sum_decode_context=8000,
    )
    assert KernelPerfModel(m, gpu, dp=4).batch_time(st) == KernelPerfModel(m, gpu).batch_time(st)
    assert RooflinePerfModel(m, gpu, dp=4).batch_time(st) == RooflinePerfModel(m, gpu).batch_time(st)


def test_roofline_rank_counts_the_gathered_pairs_and_the_exchange() -> None:
    # The roofline's expert work of one DP-2 rank on T tokens is that of the 2-GPU expert
    # split on 2T; its communication adds the exchange of 2T tokens over 2 GPUs.
    m, gpu = load_model(MINIMAX), get_gpu("H100-SXM")
    dp = RooflinePerfModel(m, gpu, tp=1, ep=2, dp=2)
    ep = RooflinePerfModel(m, gpu, tp=2, ep=2)
    assert dp._gemm_classes(64.0)[1] == pytest.approx(ep._gemm_classes(128.0)[1], rel=1e-12)
    ba = m.activation_dtype_bytes
    link = 1.0 / (gpu.interconnect_bw * dp.eff.comm)
    assert dp._comm_tok == pytest.approx(m.num_moe_layers * 2.0 * 0.5 * 2 * m.hidden_size * ba * link)


def test_vllm_dp_router_weighs_waiting_four_times() -> None:
    st = RouterState(np.random.default_rng(0))
    req = Request(0, 0.0, 10, 10)
    # scores 4*(out - run) + run: [4*2+1, 4*0+6, 4*1+1] = [9, 6, 5]
    x = [
        ReplicaLoad(num_outstanding=3, num_running=1),
        ReplicaLoad(num_outstanding=6, num_running=6),
        ReplicaLoad(num_outstanding=2, num_running=1),
    ]
    assert ROUTERS["vllm_dp"](req, x, st) == 2
    assert ROUTERS["vllm_dp"](req, [ReplicaLoad(), ReplicaLoad()], st) == 0  # ties: the first rank


class TokenPerf:
    """0.01 s a step plus 1 ms a prompt token: a prefill step is longer than a decode (a
    plain class: the compiled ConstantPerfModel cannot be subclassed from Python)."""

    step_s = 0.01

    def batch_time(self, stats: BatchStats) -> float:
        return self.step_s + 1e-3 * stats.num_prefill_tokens

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        return np.full(len(sum_decode_context), self.step_s)

    def batch_flops(self, stats: BatchStats) -> float:
        return 0.0

    def batch_bytes(self, stats: BatchStats) -> float:
        return 0.0


def dp_pool(dp: int) -> PoolSpec:
    eng = resolve_engine(
        EngineConfig(
            max_num_seqs=8,
            max_num_batched_tokens=256,
            async_scheduling=False,
            cpu_overhead_s=0.0,
            cpu_overhead_per_req_s=0.0,
        ),
        max_model_len=512,
    )
    return PoolSpec("dp", "colocated", 2, eng, TokenPerf(), num_gpu_blocks=200, max_model_len=512, dp=dp)


def test_lockstep_ranks_wait_for_the_slowest() -> None:
    # Two ranks, 0.01 s a step + 1 ms a prompt token; request 0 (4 prompt tokens, 3
    # outputs) reaches rank 0 at t=0, request 1 (100 prompt tokens, 2 outputs) rank 1 at
    # t=0.015. Apart, rank 0's steps end at 0.014, 0.024, 0.034 and rank 1's at 0.125, 0.135.
    wl = make_workload([0.0, 0.015], [4, 100], [3, 2])
    cfg = ClusterConfig(pools=[PoolConfig(name="dp", num_replicas=2)], router="round_robin")
    apart = run_cluster(wl, [dp_pool(1)], cfg, check_invariants=True).records
    together = run_cluster(wl, [dp_pool(2)], cfg, check_invariants=True).records
    assert apart.replica.tolist() == together.replica.tolist() == [0, 1]
    np.testing.assert_allclose(apart.finished_s, [0.034, 0.015 + 0.11 + 0.01], rtol=1e-9)
    # rank 0: step 1 [0, 0.014]; rank 1's request arrived at 0.015 > 0.014, so rank 0's
    # step 2 [0.014, 0.024] runs alone (rank 1 idle, waiting it out); step 3 starts both at
    # 0.024: rank 1's prefill 0.11 s, rank 0's decode with it -> 0.134; rank 1's decode
    # [0.134, 0.144] (rank 0 done).
    np.testing.assert_allclose(together.first_token_s, [0.014, 0.134], rtol=1e-9)
    np.testing.assert_allclose(together.finished_s, [0.134, 0.144], rtol=1e-9)


def test_lockstep_keeps_every_request_under_load() -> None:
    rng = np.random.default_rng(3)
    n = 300
    wl = make_workload(
        np.sort(rng.uniform(0, 3, n)).tolist(),
        rng.integers(4, 200, n).tolist(),
        rng.integers(1, 30, n).tolist(),
    )
    cfg = ClusterConfig(pools=[PoolConfig(name="dp", num_replicas=2)], router="vllm_dp")
    rec = run_cluster(wl, [dp_pool(2)], cfg, check_invariants=True).records
    assert (rec.status == 0).all() and set(rec.replica.tolist()) == {0, 1}
    assert (rec.first_token_s >= rec.arrival_s).all() and (rec.finished_s >= rec.first_token_s).all()


def scenario(dp: int, model: str = MINIMAX, **extra: object) -> dict:
    return {
        "model": {"name": model},
        "hardware": {"gpu": "B200"},
        "parallel": {"tensor_parallel_size": 1, "data_parallel_size": dp, "expert_parallel_size": dp},
        "engine": {"max_model_len": 4096},
        "workload": {
            "type": "benchmark",
            "input_len": 1024,
            "output_len": 64,
            "num_prompts": 64,
            "max_concurrency": 8,
            "num_warmups": 0,
        },
        "run": {"record_steps": False},
        **extra,
    }


def test_a_data_parallel_scenario_runs_as_its_ranks() -> None:
    r = simulate(scenario(2))
    assert len(r.replicas) == 2 and all(t.num_gpus == 1 for t in r.replicas)
    assert r.summary["benchmark"]["completed"] == 64
    assert set(r.records.replica.tolist()) == {0, 1}


def test_from_vllm_0_16_each_rank_has_an_api_server_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # vllm serve --data-parallel-size N defaults --api-server-count to N from 0.16 (its
    # serve.py); 0.12 ran one API server for all ranks.
    from servesim.cluster import cluster

    assert api_servers_per_rank("0.16.0") and api_servers_per_rank("0.19.0")
    assert not api_servers_per_rank("0.12.0") and not api_servers_per_rank("0.15.1")
    own = simulate(scenario(2, engine={"max_model_len": 4096, "version": "0.19.0"}))
    monkeypatch.setattr(cluster, "api_servers_per_rank", lambda version: False)  # else the same
    one = simulate(scenario(2, engine={"max_model_len": 4096, "version": "0.19.0"}))
    assert all(t.frontend_busy_s > 0 for t in own.replicas)
    assert one.replicas[0].frontend_busy_s > 0 and one.replicas[1].frontend_busy_s == -1.0
    # the same work, split over two servers: each busy about half as long as the one
    total = sum(t.frontend_busy_s for t in own.replicas)
    assert total == pytest.approx(one.replicas[0].frontend_busy_s, rel=0.05)
    ttft = [r.summary["benchmark"]["mean_ttft_ms"] for r in (own, one)]
    assert ttft[0] < ttft[1]  # 8 clients' sends no longer queue for one server


def test_data_parallel_is_refused_where_it_is_not_modelled() -> None:
    sc = scenario(
        2,
        cluster={
            "pools": [{"name": "c", "num_replicas": 1}],
            "operations": {
                "autoscaling": {"pools": [{"pool": "c", "min_replicas": 1, "max_replicas": 2, "target": 8}]}
            },
        },
    )
    with pytest.raises(ConfigError, match="data_parallel_size"):
        simulate(sc)
