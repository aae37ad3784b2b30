"""Cluster scenarios end to end: config checks, heterogeneous pools, per-pool summary and
console figures, the example scenario through the CLI, and Llumnix-style migration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_workload

import servesim
from servesim.cluster.cluster import PoolSpec
from servesim.cluster.run import run_cluster
from servesim.config import (
    ClusterConfig,
    EngineConfig,
    MigrationConfig,
    PoolConfig,
    load_scenario,
    resolve_engine,
)
from servesim.errors import ConfigError
from servesim.perf.base import ConstantPerfModel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL = {
    "type": "synthetic",
    "num_requests": 120,
    "arrival": {"process": "poisson", "rate": 10},
    "prompt_len": {"kind": "uniform", "low": 200, "high": 1500},
    "output_len": {"kind": "uniform", "low": 10, "high": 100},
}


def test_config_checks() -> None:
    with pytest.raises(ConfigError, match="both a prefill and a decode"):
        servesim.simulate({"cluster": {"pools": [{"name": "p", "role": "prefill"}]}})
    with pytest.raises(ConfigError, match="unique"):
        servesim.simulate({"cluster": {"pools": [{"name": "a"}, {"name": "a"}]}})
    with pytest.raises(ConfigError, match="router"):
        servesim.simulate({"cluster": {"pools": [{"name": "a"}], "router": "fastest"}})
    with pytest.raises(ConfigError, match="mixing"):
        servesim.simulate(
            {
                "cluster": {
                    "pools": [
                        {"name": "c"},
                        {"name": "p", "role": "prefill"},
                        {"name": "d", "role": "decode"},
                    ]
                }
            }
        )


def test_one_pool_of_one_replica_matches_the_single_replica_path() -> None:
    base = {"model": {"name": "Llama-3.1-8B"}, "workload": SMALL}
    single = servesim.simulate(base)
    one = servesim.simulate({**base, "cluster": {"pools": [{"name": "c"}]}})
    np.testing.assert_allclose(one.records.finished_s, single.records.finished_s)
    # A plain scenario is a pool of one replica: its pool section is the cluster's, by its name.
    assert single.summary["pools"][0]["name"] == "engine" and one.summary["pools"][0]["name"] == "c"
    assert single.summary["pools"][0]["num_routed"] == one.summary["pools"][0]["num_routed"] == 120


def test_heterogeneous_pools_summary() -> None:
    r = servesim.simulate(
        {
            "model": {"name": "Llama-3.1-8B"},
            "workload": SMALL,
            "slo": {"ttft_s": 1.0, "tpot_s": 0.05},
            "cluster": {
                "router": "least_work",
                "pools": [
                    {"name": "pre", "role": "prefill", "num_replicas": 2, "gpu": "H100-SXM"},
                    {
                        "name": "dec",
                        "role": "decode",
                        "num_replicas": 1,
                        "gpu": "A100-80GB",
                        "parallel": {"tensor_parallel_size": 2},
                    },
                ],
            },
        }
    )
    s = r.summary
    assert s["counts"]["num_finished"] == 120
    pre, dec = s["pools"]
    assert (pre["gpu"], pre["num_gpus"], dec["gpu"], dec["num_gpus"]) == ("H100-SXM", 2, "A100-80GB", 2)
    assert pre["num_routed"] == 120 and dec["num_kv_transfers_in"] == 120
    assert dec["mean_kv_transfer_s"] > 0 and dec["kv_transfer_bytes_in"] > 0
    assert 0 < pre["busy_fraction"] < 1 and 0 < dec["busy_fraction"] <= 1
    # Cost and GPUs count each pool's own GPU: 2 H100 + 2 A100.
    window = s["counts"]["window_s"]
    assert s["cost"]["usd"] == pytest.approx((2 * 2.49 + 2 * 1.99) * window / 3600)
    assert s["utilization"]["overall"]["num_gpus"] == 4
    assert s["slo"]["goodput_rps_per_gpu"] == pytest.approx(s["slo"]["goodput_rps"] / 4)


def test_example_scenario_through_the_cli() -> None:
    from typer.testing import CliRunner

    from servesim.cli import app

    sc = load_scenario(EXAMPLES / "disaggregated.yaml", ["workload.num_requests=150"])
    assert sc.cluster is not None and [p.role for p in sc.cluster.pools] == ["prefill", "decode"]
    res = CliRunner().invoke(
        app,
        ["simulate", str(EXAMPLES / "disaggregated.yaml"), "--set", "workload.num_requests=150"],
        env={"COLUMNS": "100"},
    )
    assert res.exit_code == 0, res.output
    assert "Pool prefill" in res.output and "Pool decode" in res.output
    assert "KV in 150 x" in res.output and "routed" in res.output


def test_migration_moves_long_requests_off_the_loaded_replica() -> None:
    # Round robin sends every long request (300 outputs) to replica 0 and every short one
    # (4 outputs) to replica 1; migration evens the load out.
    n = 16
    wl = make_workload([0.01 * i for i in range(n)], 64, [300 if i % 2 == 0 else 4 for i in range(n)])
    eng = resolve_engine(
        EngineConfig(max_num_seqs=4, max_num_batched_tokens=512, cpu_overhead_s=0.0), max_model_len=1024
    )
    pool = PoolSpec(
        "c",
        "colocated",
        2,
        eng,
        ConstantPerfModel(0.01),
        num_gpu_blocks=200,
        max_model_len=1024,
        kv_bytes_per_token=1000.0,
    )

    def run(enabled: bool):  # noqa: ANN202
        cfg = ClusterConfig(
            pools=[PoolConfig(name="c", num_replicas=2)],
            router="round_robin",
            migration=MigrationConfig(enabled=enabled, interval_s=0.1, threshold=0.05),
        )
        return run_cluster(wl, [pool], cfg, check_invariants=True)

    off, on = run(False), run(True)
    assert (
        on.records.status == 0
    ).all() and on.records.num_output_tokens.tolist() == off.records.num_output_tokens.tolist()
    assert on.num_migrations > 0 and on.totals[0].num_migrations_out > 0
    assert sum(t.num_kv_transfers for t in on.totals) == on.num_migrations
    assert np.nanmax(on.records.finished_s) < np.nanmax(off.records.finished_s)
