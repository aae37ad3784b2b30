"""One replica and a cluster are resolved by one function (``servesim.deployment``), so
their checks, run options and reports agree: the budget check with chunked prefill off,
``run.record_steps``, the progress callback, the links a layout uses."""

from __future__ import annotations

import numpy as np
import pytest

import servesim
from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import ParallelConfig, scenario_from_dict
from servesim.deployment import resolve_deployment, resolve_deployments
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats
from servesim.perf.roofline import build_perf_model

SMALL = {
    "type": "synthetic",
    "num_requests": 60,
    "arrival": {"process": "poisson", "rate": 10},
    "prompt_len": {"kind": "uniform", "low": 200, "high": 1500},
    "output_len": {"kind": "uniform", "low": 10, "high": 60},
}
UNCHUNKED_SMALL_BUDGET = {"enable_chunked_prefill": False, "max_num_batched_tokens": 1024}


def test_one_replica_and_a_one_replica_pool_resolve_alike() -> None:
    sc = scenario_from_dict({"model": {"name": "Llama-3.1-8B"}, "workload": SMALL})
    one = resolve_deployment(sc)
    pool = resolve_deployments(
        scenario_from_dict(
            {"model": {"name": "Llama-3.1-8B"}, "workload": SMALL, "cluster": {"pools": [{"name": "c"}]}}
        )
    )[0]
    assert (one.engine, one.plan, one.links, one.gpu) == (pool.engine, pool.plan, pool.links, pool.gpu)
    assert one.step_time_model() == pool.step_time_model()
    assert (
        one.step_time_model()["kind"] == "kernel_db" and one.step_time_model()["calibrated"]
    )  # measured kernels


@pytest.mark.parametrize("cluster", [None, {"pools": [{"name": "a", "num_replicas": 2}]}])
def test_chunked_prefill_off_with_a_budget_below_max_model_len_is_refused(cluster: dict | None) -> None:
    sc = {"model": {"name": "Llama-3.1-8B"}, "workload": SMALL, "engine": UNCHUNKED_SMALL_BUDGET}
    if cluster:
        sc["cluster"] = cluster
    with pytest.raises(
        ConfigError, match=r"max_num_batched_tokens \(1024\) must be >= max_model_len \(131072\)"
    ):
        servesim.simulate(sc)


def test_a_pools_own_engine_is_checked_too() -> None:
    with pytest.raises(
        ConfigError, match=r"cluster.pools\[b\].engine.max_num_batched_tokens \(1024\) must be"
    ):
        servesim.simulate(
            {
                "model": {"name": "Llama-3.1-8B"},
                "workload": SMALL,
                "cluster": {"pools": [{"name": "a"}, {"name": "b", "engine": UNCHUNKED_SMALL_BUDGET}]},
            }
        )


@pytest.mark.parametrize("cluster", [None, {"pools": [{"name": "a", "num_replicas": 2}]}])
def test_record_steps_false_drops_the_step_series(cluster: dict | None) -> None:
    base = {"model": {"name": "Llama-3.1-8B"}, "workload": SMALL}
    if cluster:
        base["cluster"] = cluster
    full = servesim.simulate(base)
    lean = servesim.simulate({**base, "run": {"record_steps": False}})
    assert len(full.steps) > 0 and len(lean.steps) == 0
    np.testing.assert_array_equal(full.records.finished_s, lean.records.finished_s)


def test_a_cluster_reports_progress() -> None:
    from servesim.cluster.pools import pool_spec
    from servesim.cluster.run import run_cluster
    from servesim.workload import load_workload

    sc = scenario_from_dict(
        {
            "model": {"name": "Llama-3.1-8B"},
            "workload": SMALL,
            "cluster": {"pools": [{"name": "a", "num_replicas": 2}]},
        }
    )
    pools = [pool_spec(d) for d in resolve_deployments(sc)]
    seen: list[int] = []
    run_cluster(load_workload(sc.workload, 0), pools, sc.cluster, progress=seen.append)
    assert len(seen) > 10 and seen == sorted(seen) and seen[-1] == 60


def test_links_inside_a_node_are_the_gpus_interconnect() -> None:
    """The single-replica run now uses the catalog links, as a cluster pool does: within a
    node that is the interconnect alone (the times it had before); across nodes the network."""
    m, g = load_model("Llama-3.1-70B"), get_gpu("H100-SXM")
    stats = BatchStats(
        num_prefill_tokens=2000,
        prefill_attn_work=2e6,
        num_prefill_reqs=2,
        num_decode_reqs=64,
        sum_decode_context=64 * 1500,
    )
    for tp, pp, same in ((8, 1, True), (4, 2, True), (8, 2, False)):
        par = ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp)
        sc = scenario_from_dict(
            {
                "model": {"name": "Llama-3.1-70B"},
                "parallel": par.model_dump(),
                "hardware": {"perf_model": "roofline"},
                "engine": {"max_model_len": 8192},
            }
        )
        dep = resolve_deployment(sc)
        old = build_perf_model(m, g, par, sc.model)  # links=None: interconnect for everything
        assert (dep.perf.batch_time(stats) == old.batch_time(stats)) is same, (tp, pp)


@pytest.mark.parametrize(
    "cluster", [None, {"pools": [{"name": "a", "num_replicas": 2}, {"name": "b", "gpu": "A100-80GB"}]}]
)
def test_the_memory_plan_is_in_every_report(cluster: dict | None) -> None:
    import io

    from rich.console import Console

    from servesim.metrics.console import print_summary

    sc = {"model": {"name": "Llama-3.1-8B"}, "workload": SMALL}
    if cluster:
        sc["cluster"] = cluster
    r = servesim.simulate(sc)
    mems = r.summary["memory"]
    assert len(mems) == (2 if cluster else 1)
    for mem, dep in zip(mems, r.deployments):
        plan = dep.plan
        assert mem["weights_bytes_per_gpu"] == plan.weights_bytes
        assert mem["num_gpu_blocks"] == plan.num_gpu_blocks
        assert mem["kv_capacity_tokens"] == plan.num_gpu_blocks * 16
        mean = r.workload_stats["mean_prompt_tokens"] + r.workload_stats["mean_output_tokens"]
        assert mem["mean_request_tokens"] == pytest.approx(mean)
        assert mem["num_mean_requests_fit"] == plan.num_gpu_blocks // -(-int(np.ceil(mean)) // 16)
        assert mem["usable_bytes"] + mem["outside_utilization_bytes"] == pytest.approx(dep.gpu.mem_bytes)
    out = io.StringIO()
    print_summary(r, Console(file=out, width=250))
    assert out.getvalue().count("\nMemory") == len(mems)
