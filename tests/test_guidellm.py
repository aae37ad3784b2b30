"""guidellm's request stream from its own scenario file (workload type guidellm).

What guidellm sends (vllm-project/guidellm, ``scheduler/strategies.py``, ``utils/random.py``,
``data/deserializers/synthetic.py``): constant request k at k / rate; poisson gaps from
``random.Random(seed).expovariate(rate)``; concurrent N streams closed-loop; lengths from
``IntegerRangeSampler`` seeded with random_seed (prompts) and random_seed + 1 (outputs).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import servesim
from servesim.errors import ConfigError, ServesimError
from servesim.workload.guidellm import constant_times, generate_guidellm, integer_lengths

FIX = Path(__file__).parent / "fixtures" / "guidellm"
DEPLOY = {"model": {"name": "meta-llama/Llama-3.1-8B"}, "hardware": {"gpu": "H100-SXM"}}


def test_constant_rate_is_evenly_spaced_from_one_gap_after_the_start():
    wl = generate_guidellm(FIX / "constant.json")
    # 4/s for 30 s: request k at k/4, k = 1 .. 119 (the one due at 30 s is past max_seconds)
    assert len(wl) == 119
    assert wl.arrival_s[0] == pytest.approx(0.25) and wl.arrival_s[-1] == pytest.approx(29.75)
    assert np.allclose(np.diff(wl.arrival_s), 0.25)
    assert wl.clients.max_concurrency == 512  # guidellm 0.6's settings.max_concurrency


def test_lengths_are_guidellms_own_draws():
    wl = generate_guidellm(FIX / "constant.json", num_special_tokens=0)
    rng = random.Random(42)  # prompt_tokens=256, stdev 64, in [128, 384]
    want = [round(max(128, min(384, rng.gauss(256, 64)))) for _ in range(119)]
    assert wl.num_prompt_tokens.tolist() == want
    assert set(wl.num_output_tokens.tolist()) == {64}  # no stdev, no range: fixed
    # BOS on top by default
    assert (generate_guidellm(FIX / "constant.json").num_prompt_tokens - wl.num_prompt_tokens == 1).all()


def test_integer_sampler_defaults_and_uniform_range():
    assert integer_lengths(100, 10, None, None, 1, 5000).min() >= 50  # min = mean - 5 stdev
    assert integer_lengths(100, 10, None, None, 1, 5000).max() <= 150
    u = integer_lengths(128, None, 64, 192, 43, 2000)  # no stdev: uniform on [min, max]
    assert u.min() == 64 and u.max() == 192 and abs(u.mean() - 128) < 4
    rng = random.Random(43)
    assert u[:20].tolist() == [rng.randint(64, 192) for _ in range(20)]


def test_constant_rampup_follows_guidellm_formula():
    t = constant_times(10.0, 60, rampup=4.0)  # 20 requests in the ramp, then 10/s
    assert t[0] == 0.0 and t[1] == pytest.approx(np.sqrt(2 * 2 * 4 / 10))
    assert t[19] == pytest.approx(4.0) and t[20] == pytest.approx(4.1)
    assert np.all(np.diff(t) > 0)


def test_poisson_spec_layout_seed_and_limits():
    wl = generate_guidellm(FIX / "poisson.yaml")
    rng = random.Random(7)  # seed.value 7
    gaps = [rng.expovariate(2.5) for _ in range(200)]
    assert len(wl) == 200  # max_requests 200 reached before max_duration 120 s
    assert np.allclose(wl.arrival_s, np.cumsum(gaps))
    assert wl.clients.max_concurrency == 10240  # guidellm 0.7's cap
    out = wl.num_output_tokens
    assert out.min() >= 64 and out.max() <= 192 and set(wl.num_prompt_tokens.tolist()) == {513}
    # a run seed shifts the draws
    assert not np.allclose(generate_guidellm(FIX / "poisson.yaml", seed=1).arrival_s[:10], wl.arrival_s[:10])


def test_poisson_max_seconds_cuts_the_stream(tmp_path):
    doc = {"profile": "poisson", "rate": 5, "max_seconds": 60, "data": "prompt_tokens=100,output_tokens=10"}
    (tmp_path / "p.json").write_text(json.dumps(doc))
    wl = generate_guidellm(tmp_path / "p.json")
    assert wl.arrival_s[-1] < 60 and 240 < len(wl) < 360


def test_concurrent_and_synchronous_are_closed_loop(tmp_path):
    wl = generate_guidellm(FIX / "concurrent.yaml")
    assert len(wl) == 100 and wl.clients.max_concurrency == 8 and not wl.arrival_s.any()
    assert wl.meta["notices"][0]["code"] == "max_seconds_closed_loop"
    (tmp_path / "s.yaml").write_text(
        "profile: synchronous\nmax_requests: 5\ndata: prompt_tokens=64,output_tokens=8\n"
    )
    sync = generate_guidellm(tmp_path / "s.yaml")
    assert sync.clients.max_concurrency == 1 and len(sync) == 5
    # end to end: never more than 8 in flight, every request sent when one finishes
    res = servesim.simulate(
        {**DEPLOY, "workload": {"type": "guidellm", "config": str(FIX / "concurrent.yaml")}}
    )
    cols = res.records.columns()
    start, end = cols["arrival_s"], cols["finished_s"]
    assert len(start) == 100 and np.isfinite(end).all()
    inflight = max(int(np.sum((start <= t) & (end > t))) for t in start)
    assert inflight == 8


def test_report_file_and_throughput(tmp_path):
    scenario = {
        "profile": "throughput",
        "rate": 16,
        "max_requests": 40,
        "data": [{"prompt_tokens": 32, "output_tokens": 4}],
    }
    (tmp_path / "benchmarks.json").write_text(json.dumps({"args": scenario, "benchmarks": []}))
    wl = generate_guidellm(tmp_path / "benchmarks.json")
    assert len(wl) == 40 and wl.clients.max_concurrency == 16  # 0.6: throughput's rate is its cap


def test_spec_concurrent_streams_and_capped_constant(tmp_path):
    data = [{"kind": "synthetic_text", "prompt_tokens": 64, "output_tokens": 8}]
    doc = {
        "spec": {
            "profile": {"kind": "concurrent", "streams": [6]},
            "data": data,
            "constraints": [{"kind": "max_requests", "count": 30}],
        }
    }
    (tmp_path / "c.json").write_text(json.dumps(doc))
    wl = generate_guidellm(tmp_path / "c.json")
    assert len(wl) == 30 and wl.clients.max_concurrency == 6
    doc["spec"]["profile"] = {"kind": "async", "rate": 10, "max_concurrency": 3}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    wl = generate_guidellm(tmp_path / "a.json")
    assert wl.clients.max_concurrency == 3 and wl.arrival_s[:3].tolist() == pytest.approx([0.1, 0.2, 0.3])
    doc["spec"]["profile"] = {"kind": "concurrent", "streams": [2, 4]}
    (tmp_path / "b.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="spec.profile.streams: 2 stream counts"):
        generate_guidellm(tmp_path / "b.json")


def test_scenario_file_reads_the_config_relative_to_itself(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "c.json").write_text((FIX / "constant.json").read_text())
    sc = tmp_path / "scenario.yaml"
    sc.write_text(
        "model: {name: meta-llama/Llama-3.1-8B}\nhardware: {gpu: H100-SXM}\n"
        "workload: {type: guidellm, config: g/c.json}\n"
    )
    res = servesim.simulate(sc)
    assert len(res.records.columns()["arrival_s"]) == 119


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"profile": "constant", "rate": [1, 2], "max_seconds": 10}, "rate: 2 rates"),
        ({"profile": "concurrent", "rate": 4, "max_seconds": 10}, "max_seconds alone"),
        ({"profile": "poisson", "rate": 1, "max_seconds": 10, "rampup": 5}, "rampup"),
        ({"profile": "constant", "rate": 1}, "max_seconds or max_requests"),
        ({"profile": "constant", "rate": 1, "max_seconds": 9, "data": ["shared.jsonl"]}, "is a dataset"),
        (
            {
                "profile": "constant",
                "rate": 1,
                "max_seconds": 9,
                "data": ["prompt_tokens=9,turns=3,output_tokens=4"],
            },
            "turns",
        ),
        (
            {"profile": "constant", "rate": 1, "max_seconds": 9, "data": ["prompt_tokens=9"]},
            "output_tokens is required",
        ),
        (
            {"profile": "constant", "rate": 1, "max_seconds": 9, "over_saturation": {"enabled": True}},
            "over_saturation",
        ),
        ({"profile": "constant", "rate": 1, "max_seconds": 9, "request_samples": 3}, "request_samples"),
        (
            {"profile": "constant", "rate": 1, "max_seconds": 9, "max_concurrency": 4},
            "max_concurrency is not",
        ),
        (
            {"spec": {"profile": {"kind": "replay"}, "data": [{"prompt_tokens": 9, "output_tokens": 4}]}},
            "replay",
        ),
    ],
)
def test_refusals_name_the_field(tmp_path, doc, field):
    if "spec" not in doc:
        doc.setdefault("data", ["prompt_tokens=9,output_tokens=4"])
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=field):
        generate_guidellm(tmp_path / "s.json")


def test_sweep_is_refused_suggesting_one_rate():
    with pytest.raises(ConfigError, match="profile sweep.*one rate"):
        generate_guidellm(FIX / "sweep.json")
    with pytest.raises(ServesimError, match="profile sweep"):
        servesim.simulate({**DEPLOY, "workload": {"type": "guidellm", "config": str(FIX / "sweep.json")}})
