"""The saturation verdict and the headroom figures: only a run whose queue grows for the
whole run is called saturated (M/D/1 queues below and above rho = 1, the default scenario at
1x, the A100 at 2x the trace's rate), for one replica and for a cluster alike."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_workload

import servesim
from servesim.config import EngineConfig
from servesim.metrics.saturation import saturation
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine


def md1_verdict(rho: float, n: int, seed: int) -> dict:
    """An M/D/1 queue (one-step requests, one at a time, D = 1 s) at load ``rho``."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rho, n))
    wl = make_workload(arrivals, 1, 1)
    eng = EngineConfig(max_num_seqs=1, cpu_overhead_s=0.0, enable_prefix_caching=False)
    run = run_engine(
        wl, eng, ConstantPerfModel(step_s=1.0), num_gpu_blocks=16, max_model_len=64, record_steps=False
    )
    r = run.records
    return saturation(r.arrival_s, r.first_scheduled_s, r.finished_s)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("rho", [0.9, 0.98])
def test_md1_near_but_below_rho_1_is_not_saturated(rho: float, seed: int) -> None:
    v = md1_verdict(rho, 5000, seed)
    assert not v["saturated"], v["evidence"]["num_in_system"]
    assert v["evidence"]["served_rate_rps"] == pytest.approx(v["evidence"]["arrival_rate_rps"], rel=0.15)


@pytest.mark.parametrize("seed", range(3))
def test_md1_above_rho_1_is_saturated(seed: int) -> None:
    v = md1_verdict(1.15, 5000, seed)
    assert v["saturated"] and v["latency_is_queue_artefact"]
    e = v["evidence"]
    assert e["served_rate_rps"] == pytest.approx(1.0, rel=0.02)  # the server's rate, 1/D
    assert e["arrival_rate_rps"] > 1.05 and e["in_system_growth"] > 250
    assert "outpace service" in v["hint"]


def test_a_burst_that_drains_is_not_saturation() -> None:
    """A queue that builds in a burst and drains before the arrivals end is bounded."""
    t = np.concatenate([np.linspace(0, 100, 1000), np.linspace(100, 1000, 500)])
    first = np.maximum(t, np.minimum(t + 50, 200.0))
    v = saturation(t, first, first + 1)
    assert not v["saturated"]


def test_default_scenario_is_busy_but_not_saturated_and_the_a100_at_2x_is() -> None:
    calm = servesim.simulate(None).summary
    assert not calm["saturation"]["saturated"]
    assert calm["utilization"]["overall"]["busy_fraction"] > 0.99  # busy reads ~100% ...
    assert calm["headroom"]["load_fraction"] < 0.5  # ... yet the deployment has room to grow
    hot = servesim.simulate(
        servesim.load_scenario(None, ["hardware.gpu=A100-80GB", "workload.rate_scale=2"])
    ).summary
    assert hot["saturation"]["saturated"]
    assert hot["utilization"]["overall"]["busy_fraction"] > 0.99
    # Saturated, the served rate is the capacity: the estimate agrees within 10%.
    assert hot["headroom"]["load_fraction"] == pytest.approx(1.0, abs=0.1)
    assert hot["headroom"]["gpu_fraction"] > calm["headroom"]["gpu_fraction"]


BURSTY = {
    "type": "synthetic",
    "num_requests": 1500,
    "arrival": {"process": "poisson", "rate": 200},
    "prompt_len": {"kind": "uniform", "low": 500, "high": 1500},
    "output_len": {"kind": "uniform", "low": 100, "high": 300},
}


@pytest.mark.parametrize("cluster", [None, {"pools": [{"name": "a", "num_replicas": 2}]}])
def test_saturation_is_judged_for_a_cluster_too(cluster: dict | None) -> None:
    sc = {
        "model": {"name": "Llama-3.1-8B"},
        "hardware": {"gpu": "L4"},
        "engine": {"max_model_len": 4096},
        "workload": BURSTY,
    }
    if cluster:
        sc["cluster"] = cluster
    s = servesim.simulate(sc).summary
    assert s["saturation"]["saturated"]
    assert s["headroom"]["capacity_requests_per_s"] < 200
    slow = servesim.simulate(
        {**sc, "workload": {**BURSTY, "num_requests": 200, "arrival": {"process": "poisson", "rate": 0.3}}}
    ).summary
    assert not slow["saturation"]["saturated"] and slow["headroom"]["load_fraction"] < 0.5


def test_the_cli_reports_and_stores_every_section(tmp_path) -> None:
    """Console lines and summary.json keys for headroom, saturation, memory, step-time model
    and notices, for a single replica and a two-replica cluster."""
    import json

    from typer.testing import CliRunner

    from servesim.cli import app

    tiny = (
        "workload={type: synthetic, num_requests: 40, arrival: {rate: 10.0}, "
        "prompt_len: {kind: normal, mean: 64, std: 64, max: 100}, output_len: {kind: constant, value: 8}}"
    )
    for extra in ([], ["--set", "cluster={pools: [{name: a, num_replicas: 2}]}"]):
        out_dir = tmp_path / f"run{len(extra)}"
        res = CliRunner().invoke(
            app, ["simulate", "--no-progress", "--set", tiny, *extra, "-o", str(out_dir)]
        )
        assert res.exit_code == 0, res.output
        for word in ("step time: kernel database", "Memory", "Headroom", "Saturation", "Notice"):
            assert word in res.stdout, (word, res.stdout)
        doc = json.loads((out_dir / "summary.json").read_text())
        assert doc["saturation"]["saturated"] is False
        assert doc["notices"][0]["code"] == "length_clipped"
        assert len(doc["memory"]) == len(doc["step_time_model"]) == 1
        assert doc["headroom"]["load_fraction"] < 0.5
