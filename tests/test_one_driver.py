"""One driver: a plain scenario is a cluster of one pool of one replica.

The same deployment written without and with a ``cluster`` section writes the same
summary.json, run-time fields aside (``wall_s``), through the command line: the default
scenario, a scenario with tenants, a closed-loop benchmark workload and a data-parallel
server. Tenants work in a cluster too: their gate stands in front of the router and their
counters add up over the replicas, counted by hand on a pool of two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from servesim.cli import app
from servesim.cluster.run import run_cluster
from servesim.cluster.spec import PoolSpec
from servesim.config import ClusterConfig, EngineConfig, PoolConfig, load_scenario, resolve_engine
from servesim.deployment import DP_POOL, SINGLE_POOL
from servesim.engine.tenants import TenantLimits, TenantSetup
from servesim.metrics.records import RequestStatus
from servesim.perf.base import ConstantPerfModel
from servesim.workload.base import Workload

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUN_TIME_FIELDS = ("wall_s",)  # how long the simulation took on this machine


def summary_json(tmp: Path, name: str, scenario: dict[str, Any] | None) -> dict[str, Any]:
    """``servesim simulate [scenario] --output DIR``'s summary.json, read back."""
    args = ["simulate", "--output", str(tmp / name), "--quiet", "--no-progress"]
    if scenario is not None:
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(scenario))
        args.insert(1, str(path))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp / name / "summary.json").read_text())
    for key in RUN_TIME_FIELDS:
        doc.pop(key)
    return doc


def as_written_cluster(sc: dict[str, Any], pool: str, **cluster: Any) -> dict[str, Any]:
    return {**sc, "cluster": {"pools": [{"name": pool}], **cluster}}


def example(name: str, *overrides: str) -> dict[str, Any]:
    return load_scenario(EXAMPLES / name, list(overrides)).model_dump(mode="json", exclude={"cluster"})


def test_the_default_scenario_writes_the_summary_of_its_one_replica_cluster(tmp_path: Path) -> None:
    plain = summary_json(tmp_path, "plain", None)
    default = load_scenario(None).model_dump(mode="json", exclude={"cluster"})
    cluster = summary_json(tmp_path, "cluster", as_written_cluster(default, SINGLE_POOL))
    assert plain == cluster
    # The scenario as it ran: the engine's budget resolved for the H100 (vLLM's 8192 tokens
    # for a GPU of 70 GiB or more), not left null.
    assert plain["scenario"]["engine"]["max_num_batched_tokens"] == 8192
    assert plain["scenario"]["cluster"]["pools"][0]["name"] == SINGLE_POOL
    assert plain["counts"]["num_requests"] == 19366  # the Azure conversation trace's hour


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("tenants_fair_share.yaml", ("workload.end_s=120",)),  # VTC, two tenants
        ("vllm_bench_closed_loop.yaml", ("workload.num_prompts=200",)),  # closed-loop clients
    ],
)
def test_an_example_writes_the_summary_of_its_one_replica_cluster(
    tmp_path: Path, name: str, overrides: tuple[str, ...]
) -> None:
    sc = example(name, *overrides)
    plain = summary_json(tmp_path, "plain", sc)
    assert plain == summary_json(tmp_path, "cluster", as_written_cluster(sc, SINGLE_POOL))
    if "tenants" in name:
        assert set(plain["tenants"]["per_tenant"]) == {"heavy", "light"}


def test_a_data_parallel_server_writes_the_summary_of_its_cluster(tmp_path: Path) -> None:
    sc = example("vllm_bench_closed_loop.yaml", "workload.num_prompts=100", "parallel.data_parallel_size=2")
    plain = summary_json(tmp_path, "plain", sc)
    assert plain == summary_json(tmp_path, "cluster", as_written_cluster(sc, DP_POOL, router="vllm_dp"))
    assert plain["pools"][0]["num_replicas"] == 2  # two DP ranks, one engine each


# --------------------------------------------------------------------------- tenants in a cluster

PERF = ConstantPerfModel(0.01, 1e-5)


def two_tenants(arrival: list[float], prompt: list[int], output: list[int], tenant: list[int]) -> Workload:
    return Workload(
        np.asarray(arrival, np.float64),
        np.asarray(prompt, np.int64),
        np.asarray(output, np.int64),
        tenant=np.asarray(tenant, np.int64),
        meta={"tenant_names": ["A", "B"]},
    )


def run_two_replicas(wl: Workload, engine: EngineConfig, tenants: TenantSetup):  # noqa: ANN201
    pool = PoolSpec(
        "p",
        "colocated",
        2,
        resolve_engine(engine, max_model_len=1024),
        PERF,
        num_gpu_blocks=500,
        max_model_len=1024,
    )
    cfg = ClusterConfig(pools=[PoolConfig(name="p", num_replicas=2)], router="round_robin")
    return run_cluster(wl, [pool], cfg, tenants=tenants)


def test_the_tenants_gate_stands_in_front_of_the_router() -> None:
    """The rate limit of tests/test_tenants.py on a pool of two: bucket of 2 at 1 request/s
    for A, arrivals 0, 0, 0, 0.5, 1.0, 1.5, 3.0 for each tenant. A's third at t = 0, its
    t = 0.5 and its t = 1.5 are refused at the gate (rows 4, 6, 10), whatever the replicas;
    the 11 admitted requests are routed round robin, 6 and 5."""
    times = [0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 3.0]
    wl = two_tenants(sorted(times * 2), [16] * 14, [2] * 14, [0, 1] * len(times))
    limits = [TenantLimits(rate_limit_rps=1.0, burst=2.0), TenantLimits()]
    run = run_two_replicas(wl, EngineConfig(), TenantSetup(["A", "B"], [1.0, 1.0], limits, [None, None]))
    refused = [i for i in range(14) if run.records.status[i] == RequestStatus.REJECTED]
    assert refused == [4, 6, 10]
    assert run.tenants is not None and run.tenants.rejected == {(0, "rate_limited"): 3}
    assert [t.num_routed for t in run.totals] == [6, 5]


def test_vtc_counters_add_up_over_the_replicas() -> None:
    """A sends three prompts of 100 tokens, B three of 10, all at t = 0, 10 output tokens
    each; one request runs at a time on each of two replicas; w_p = 1, w_q = 2.

    Round robin: replica 0 holds A0, A2, B4 and replica 1 A1, B3, B5. Replica 0: A0 (tie,
    earlier) c_A = 120, B4 (30 < 120) c_B = 30, A2 c_A = 240. Replica 1: A1 c_A = 120, B3
    c_B = 30, B5 (30 < 120) c_B = 60. Over the pool: A 240 + 120 = 360, B 30 + 60 = 90,
    A's prompts 300 tokens, B's 30."""
    wl = two_tenants([0.0] * 6, [100, 100, 100, 10, 10, 10], [10] * 6, [0, 0, 0, 1, 1, 1])
    eng = EngineConfig(
        max_num_seqs=1, max_num_batched_tokens=512, enable_prefix_caching=False, scheduling_policy="vtc"
    )
    limits = [TenantLimits(), TenantLimits()]
    run = run_two_replicas(wl, eng, TenantSetup(["A", "B"], [1.0, 1.0], limits, [None, None]))
    rec = run.records
    order = np.argsort(rec.first_scheduled_s, kind="stable")
    assert [int(i) for i in order if rec.replica[i] == 0] == [0, 4, 2]
    assert [int(i) for i in order if rec.replica[i] == 1] == [1, 3, 5]
    assert run.tenants is not None and run.tenants.scheduler is not None
    assert run.tenants.scheduler.counters == [360.0, 90.0]
    assert run.tenants.scheduler.served_input == [300, 30]


def test_a_scenario_with_tenants_on_two_replicas_summarizes_every_request(tmp_path: Path) -> None:
    sc = example("tenants_fair_share.yaml", "workload.end_s=60")
    sc["cluster"] = {"pools": [{"name": "p", "num_replicas": 2}]}
    sc["tenants"] = [{"name": "heavy", "max_queued": 2}, {"name": "light"}]
    doc = summary_json(tmp_path, "two", sc)
    per = doc["tenants"]["per_tenant"]
    assert sum(t["num_requests"] for t in per.values()) == doc["counts"]["num_requests"]
    assert per["heavy"]["rejected"].get("queue_full", 0) == per["heavy"]["num_rejected"] > 0
    assert [p["num_routed"] for p in doc["pools"]] == [
        doc["counts"]["num_requests"] - per["heavy"]["num_rejected"]
    ]
