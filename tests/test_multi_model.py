"""Several base models in one cluster (``cluster.models``): each request reaches only the
replicas of the model it names, with a router state of its own per model; a model no pool
serves is rejected with that reason; the per-model limits of the "can never be served"
check; the per-model summary on a real scenario (hand-counted trace rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_workload

from servesim.cluster.cluster import PoolSpec
from servesim.cluster.run import run_cluster
from servesim.cluster.spec import ClusterRun
from servesim.config import ClusterConfig, EngineConfig, KvLinkConfig, PoolConfig, Scenario, resolve_engine
from servesim.metrics.records import RequestStatus
from servesim.perf.base import ConstantPerfModel
from servesim.sim import simulate


def pool(
    name: str,
    n: int,
    served: str,
    max_model_len: int = 512,
    blocks: int = 41,
    role: str = "colocated",
    kv_bytes_per_token: float = 0.0,
) -> PoolSpec:
    eng = resolve_engine(
        EngineConfig(max_num_seqs=8, max_num_batched_tokens=2048, cpu_overhead_s=0.0),
        max_model_len=max_model_len,
    )
    return PoolSpec(
        name,
        role,
        n,
        eng,
        ConstantPerfModel(0.01),
        num_gpu_blocks=blocks,
        max_model_len=max_model_len,
        served_model=served,
        kv_bytes_per_token=kv_bytes_per_token,
    )


def run(
    models: list[int],
    names: list[str],
    pools: list[PoolSpec],
    prompts: list[int] | int = 32,
    router: str = "round_robin",
    staleness_s: float = 0.0,
    at: float | list[float] = 0.0,
    **cluster: object,
) -> ClusterRun:
    wl = make_workload(at if isinstance(at, list) else [at] * len(models), prompts, 4)
    wl.model = np.asarray(models, np.int64)
    wl.meta["model_names"] = names
    pool_cfgs = [PoolConfig(name=p.name, role=p.role, num_replicas=p.num_replicas) for p in pools]  # type: ignore[arg-type]
    cfg = ClusterConfig(pools=pool_cfgs, router=router, staleness_s=staleness_s, **cluster)  # type: ignore[arg-type]
    return run_cluster(wl, pools, cfg, check_invariants=True)


def test_each_request_reaches_only_its_models_replicas() -> None:
    # Pools a (model A, replicas 0 and 1), b (model B, replica 2), c (model A, replica 3).
    # Round robin per model: A's requests cycle over 0, 1, 3; B's stay on 2. A cursor shared
    # by the models (B's row 4 leaves it at 1) would send row 5 to replica 1, not 0.
    pools = [pool("a", 2, "A"), pool("b", 1, "B"), pool("c", 1, "A")]
    r = run([0, 1, 0, 0, 1, 0, 0], ["A", "B"], pools, router="round_robin")
    assert (r.records.status == RequestStatus.FINISHED).all()
    assert r.records.replica.tolist() == [0, 2, 1, 3, 2, 0, 1]
    assert [t.num_routed for t in r.totals] == [2, 2, 2, 1]  # replica 3: row 3 only


def test_least_outstanding_picks_among_the_models_replicas() -> None:
    # All at t=0: model A's two replicas take rows 0, 1 then 2 (ties to the lowest); B's
    # lone replica takes every B row although it has the most outstanding.
    r = run(
        [0, 1, 0, 1, 0, 1], ["A", "B"], [pool("a", 2, "A"), pool("b", 1, "B")], router="least_outstanding"
    )
    assert r.records.replica.tolist() == [0, 2, 1, 2, 0, 2]


def test_a_stale_view_is_taken_among_the_models_replicas() -> None:
    # All arrive at t=1; with staleness 0.5 each view is captured at t=0.5 (empty replicas),
    # so least_outstanding sees zeros and ties go to the model's first replica (row 2 too,
    # where a fresh view would send it to replica 1); a row naming no served model captures
    # nothing and is rejected at its arrival.
    pools = [pool("a", 2, "A"), pool("b", 1, "B")]
    r = run([0, 1, 0, 2], ["A", "B", "C"], pools, router="least_outstanding", staleness_s=0.5, at=1.0)
    assert r.records.replica[:3].tolist() == [0, 2, 0]
    assert r.records.status[3] == RequestStatus.REJECTED


def test_a_model_no_pool_serves_is_rejected_with_its_name() -> None:
    r = run([0, 2, 1, -1], ["A", "B", "gpt-4o"], [pool("a", 1, "A"), pool("b", 1, "B")])
    status = r.records.status.tolist()
    assert status == [
        RequestStatus.FINISHED,
        RequestStatus.REJECTED,
        RequestStatus.FINISHED,
        RequestStatus.FINISHED,
    ]
    assert r.records.reasons[1] == "model 'gpt-4o' is served by no pool (served: A, B)"
    # Row 3 names no model: the default name, the first pool's (A), so replica 0.
    assert r.records.replica[[0, 2, 3]].tolist() == [0, 1, 0]
    assert [t.num_routed for t in r.totals] == [2, 1]


def test_can_never_be_served_is_checked_per_model() -> None:
    # A: max_model_len 512; B: 2048 with 200 blocks of 16 ((200 - 1) x 16 = 3,184 tokens).
    pools = [pool("a", 1, "A"), pool("b", 1, "B", max_model_len=2048, blocks=200)]
    r = run([0, 1], ["A", "B"], pools, prompts=[1000, 1000])
    assert r.records.status.tolist() == [RequestStatus.REJECTED, RequestStatus.FINISHED]
    assert r.records.reasons[0] == "prompt of 1000 tokens does not fit max_model_len 512"
    assert r.records.replica[1] == 1


def test_one_pool_and_requests_naming_models() -> None:
    # One pool: a request naming another model is still rejected (no lone-replica shortcut).
    r = run([0, 1, 0], ["A", "B"], [pool("a", 1, "A")])
    assert r.records.status.tolist() == [
        RequestStatus.FINISHED,
        RequestStatus.REJECTED,
        RequestStatus.FINISHED,
    ]
    assert r.records.reasons[1] == "model 'B' is served by no pool (served: A)"


TRACE = """arrived_at_s,num_prompt_tokens,num_output_tokens,model
0.0,200,20,meta-llama/Llama-3.1-8B
0.1,300,10,Qwen/Qwen2.5-7B
0.2,100,30,meta-llama/Llama-3.1-8B
0.3,150,5,gpt-4o
0.4,250,15,
"""


def test_per_model_summary_on_a_scenario(tmp_path: Path) -> None:
    # Five rows: Llama named twice and once by default (the empty cell: model.name), Qwen
    # once, gpt-4o (served by no pool) once. GPUs: llama 2 replicas x TP 1, qwen 1 x TP 2.
    (tmp_path / "t.csv").write_text(TRACE)
    sc = Scenario.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B"},
            "hardware": {"gpu": "H100-SXM"},
            "cluster": {
                "router": "round_robin",
                "pools": [
                    {"name": "llama", "num_replicas": 2},
                    {
                        "name": "qwen",
                        "model": "Qwen/Qwen2.5-7B",
                        "parallel": {"tensor_parallel_size": 2},
                    },
                ],
            },
            "workload": {"type": "trace", "path": str(tmp_path / "t.csv")},
        }
    )
    res = simulate(sc)
    per = res.summary["models"]["per_model"]
    assert list(per) == ["meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "gpt-4o"]
    llama, qwen, other = per.values()
    assert (llama["num_requests"], llama["num_finished"], llama["num_gpus"], llama["pools"]) == (
        3,
        3,
        2,
        ["llama"],
    )
    assert (qwen["num_requests"], qwen["num_finished"], qwen["num_gpus"], qwen["model"]) == (
        1,
        1,
        2,
        "Qwen/Qwen2.5-7B",
    )
    assert (other["num_requests"], other["num_rejected"], other["num_gpus"], other["pools"]) == (1, 1, 0, [])
    assert llama["num_output_tokens"] == 20 + 30 + 15 and qwen["num_output_tokens"] == 10
    assert llama["ttft_s"]["count"] == 3
    # Round robin over the llama pool's replicas 0, 1; qwen's replica is 2.
    assert res.records.replica[[0, 1, 2, 4]].tolist() == [0, 2, 1, 0]
    assert [r.num_routed for r in res.replicas] == [2, 1, 1]
    assert res.deployments[1].model.name == "Qwen/Qwen2.5-7B"
    assert res.deployments[1].served_model == "Qwen/Qwen2.5-7B"


def disagg_pools() -> list[PoolSpec]:
    """Model A: prefill replicas 0, 1 and decode replica 2, 1000 B of KV a token; model B:
    prefill replica 3 and decode replicas 4, 5, 2000 B a token."""
    return [
        pool("pa", 2, "A", role="prefill", kv_bytes_per_token=1000.0),
        pool("da", 1, "A", role="decode", kv_bytes_per_token=1000.0),
        pool("pb", 1, "B", role="prefill", kv_bytes_per_token=2000.0),
        pool("db", 2, "B", role="decode", kv_bytes_per_token=2000.0),
    ]


def test_disaggregated_pools_per_model_route_to_the_models_pair() -> None:
    # One request a second, alternating A, B (each done before the next arrives): round robin
    # per model and stage. A's prefills cycle 0, 1, 0 and all decode on 2; B's prefill on 3
    # and decode on 4, 5, 4. One decode cursor shared by the models, or one decode list,
    # would send a request to the other model's decode replicas.
    link = KvLinkConfig(bandwidth_gb_per_s=0.001, latency_us=0.0)  # 1e6 B/s
    r = run([0, 1, 0, 1, 0, 1], ["A", "B"], disagg_pools(), prompts=100, at=[0, 1, 2, 3, 4, 5], link=link)
    assert (r.records.status == RequestStatus.FINISHED).all()
    assert r.records.replica.tolist() == [2, 4, 2, 5, 2, 4]
    # Prefill replicas count their routed requests; decode replicas their hand-offs.
    assert [t.num_routed for t in r.totals] == [2, 1, 3, 3, 2, 1]
    assert [t.num_kv_transfers for t in r.totals] == [0, 0, 3, 0, 2, 1]
    # Each model's KV: 100 tokens x 1000 B (A) or 2000 B (B) at 1e6 B/s: 0.1 s or 0.2 s.
    assert [t.kv_transfer_bytes for t in r.totals] == [0, 0, 3e5, 0, 4e5, 2e5]
    # Prefill step 0.01 s (the first token), the KV's move, 3 decode steps of 0.01 s.
    np.testing.assert_allclose(r.records.first_token_s, np.arange(6) + 0.01)
    np.testing.assert_allclose(r.records.finished_s - np.arange(6), [0.14, 0.24] * 3)
    assert r.num_handoffs == 6


def test_short_prompts_go_to_their_models_decode_replicas() -> None:
    # colocate_below_tokens 50: the 20-token prompts skip prefill and are served whole by a
    # decode replica of their model (A: 2; B: round robin 4, then 5 for B's next request).
    from servesim.config.cluster import DisaggConfig

    r = run(
        [1, 0, 1, 1],
        ["A", "B"],
        disagg_pools(),
        prompts=[20, 20, 100, 20],
        at=[0, 1, 2, 3],
        disaggregation=DisaggConfig(colocate_below_tokens=50),
    )
    assert r.records.replica.tolist() == [4, 2, 5, 4]
    assert [t.num_routed for t in r.totals] == [0, 0, 1, 1, 2, 1]
    assert r.num_handoffs == 1


def test_disaggregated_models_on_a_scenario(tmp_path: Path) -> None:
    # The trace above on Llama-3.1-8B (prefill replica 0, decode 1) and Qwen2.5-7B (prefill
    # 2, decode 3): each finished request decodes on its model's decode replica, and its KV
    # crosses the link at its own model's bytes a token (the memory plan's, all layers).
    (tmp_path / "t.csv").write_text(TRACE)
    sc = Scenario.model_validate(
        {
            "cluster": {
                "pools": [
                    {"name": "lp", "role": "prefill"},
                    {"name": "ld", "role": "decode"},
                    {"name": "qp", "role": "prefill", "model": "Qwen/Qwen2.5-7B"},
                    {"name": "qd", "role": "decode", "model": "Qwen/Qwen2.5-7B"},
                ],
            },
            "workload": {"type": "trace", "path": str(tmp_path / "t.csv")},
        }
    )
    res = simulate(sc)
    per = res.summary["models"]["per_model"]
    assert [per[m]["pools"] for m in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B")] == [
        ["lp", "ld"],
        ["qp", "qd"],
    ]
    assert [per[m]["num_gpus"] for m in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B")] == [2, 2]
    assert res.records.replica[[0, 1, 2, 4]].tolist() == [1, 3, 1, 1]
    assert res.records.status[3] == RequestStatus.REJECTED
    # Llama: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B a token; Qwen2.5-7B:
    # 28 layers x 4 KV heads x 128 x 2 x 2 B = 57,344 B. Prompts: 200 + 100 + 250; 300.
    moved = [t.kv_transfer_bytes for t in res.replicas]
    assert moved == [0, 550 * 131_072, 0, 300 * 57_344]


def test_a_model_without_its_decode_pool_is_refused() -> None:
    from servesim.errors import ConfigError

    sc = Scenario.model_validate(
        {
            "cluster": {
                "pools": [
                    {"name": "pa", "role": "prefill"},
                    {"name": "da", "role": "decode"},
                    {"name": "pb", "role": "prefill", "model": "Qwen/Qwen2.5-7B"},
                ]
            },
            "workload": {"type": "synthetic", "num_requests": 4},
        }
    )
    with pytest.raises(ConfigError, match="model 'Qwen/Qwen2.5-7B' has no decode pool; with prefill/decode"):
        simulate(sc)


def test_operations_with_several_models_are_refused() -> None:
    from servesim.errors import ConfigError

    sc = Scenario.model_validate(
        {
            "cluster": {
                "pools": [{"name": "a"}, {"name": "b", "model": "Qwen/Qwen2.5-7B"}],
                "operations": {"failures": {"events": [{"pool": "a", "at_s": 1.0}]}},
            },
            "workload": {
                "type": "synthetic",
                "num_requests": 4,
                "prompt_len": {"value": 64},
                "output_len": {"value": 8},
            },
        }
    )
    with pytest.raises(ConfigError, match="cluster.operations: pools serve 2 models"):
        simulate(sc)


def _two_models(tmp_path: Path, llama_as: str = "meta-llama/Llama-3.1-8B") -> Scenario:
    (tmp_path / "t.csv").write_text(TRACE)
    return Scenario.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B"},
            "hardware": {"gpu": "H100-SXM"},
            "cluster": {
                "pools": [
                    {"name": "llama", "num_replicas": 2, "model": llama_as},
                    {"name": "qwen", "model": "Qwen/Qwen2.5-7B"},
                ],
            },
            "workload": {"type": "trace", "path": str(tmp_path / "t.csv")},
        }
    )


def test_headroom_of_several_models_is_per_model(tmp_path: Path) -> None:
    """One capacity for the mix summed rates no request can move between ("load 16.5% of
    ~65.6 req/s" for examples/multi_model.yaml): each model gets its pools' steady state at
    its own requests' mean lengths and its share of the served output tokens."""
    from servesim.metrics.headroom import sustainable_rate

    res = simulate(_two_models(tmp_path))
    room = res.summary["headroom"]
    assert room["capacity_requests_per_s"] is None and room["capacity_output_tokens_per_s"] is None
    assert room["capacity_note"].startswith("several models: capacity is per model")
    llama, qwen = room["per_model"]
    assert [llama["model"], qwen["model"]] == ["meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B"]
    # Llama's three served rows (two named, one by default): prompts 200, 100, 250, outputs
    # 20, 30, 15; Qwen's one: 300 and 10. Nothing is cached (no prompt repeats).
    assert res.records.num_cached_tokens.sum() == 0
    one_llama = sustainable_rate(res.deployments[0], 550 / 3, 65 / 3)
    one_qwen = sustainable_rate(res.deployments[1], 300, 10)
    assert one_llama is not None and one_qwen is not None
    assert llama["capacity_requests_per_s"] == pytest.approx(2 * one_llama["requests_per_s"])
    assert qwen["capacity_requests_per_s"] == pytest.approx(one_qwen["requests_per_s"])
    served_tps = res.summary["throughput"]["output_tokens_per_s"]
    assert llama["load_fraction"] == pytest.approx(
        served_tps * 65 / 75 / (2 * one_llama["output_tokens_per_s"])
    )
    assert qwen["load_fraction"] == pytest.approx(served_tps * 10 / 75 / one_qwen["output_tokens_per_s"])
    assert room["load_fraction"] == max(llama["load_fraction"], qwen["load_fraction"])
    assert [(p["pool"], p["model"]) for p in room["per_replica"]] == [
        ("llama", "meta-llama/Llama-3.1-8B"),
        ("qwen", "Qwen/Qwen2.5-7B"),
    ]


def test_requests_naming_no_model_reach_the_pool_of_model_name_written_otherwise(tmp_path: Path) -> None:
    """``model.name: meta-llama/Llama-3.1-8B`` and a pool written ``model: Llama-3.1-8B`` load
    the same base model; the requests that name none went to the served name
    'meta-llama/Llama-3.1-8B', which no pool had, and were all rejected."""
    res = simulate(_two_models(tmp_path, llama_as="Llama-3.1-8B"))
    per = res.summary["models"]["per_model"]
    # The default row (0.4 s) joins Llama's; the two rows naming the full name are rejected,
    # as a gateway answers 404 to a name no server was given.
    assert per["Llama-3.1-8B"]["num_requests"] == 1 and per["Llama-3.1-8B"]["num_finished"] == 1
    assert per["meta-llama/Llama-3.1-8B"]["num_rejected"] == 2
    assert res.records.status[4] == RequestStatus.FINISHED
