"""Splitwise's reproduction (``servesim reproduce splitwise``): the step times are Splitwise's
own measurements, used as its simulator uses them, and the iso-power designs are the
artifact's (Mutinifni/splitwise-sim, scripts/run_throughput_isopower.sh)."""

from __future__ import annotations

import pytest

from servesim.papers import splitwise, splitwise_perf
from servesim.perf.base import BatchStats


@pytest.fixture(scope="module")
def perfs() -> dict[str, splitwise.SplitwisePerf]:
    return splitwise.perf_models()


def test_token_times_are_the_measured_medians(perfs):
    """perf_model.csv, Llama-2-70B TP8, 512-token prompts: the median per-token time of the
    measured rows (45 rows at batch 1 on each GPU, 5 at batch 32 and 64)."""
    a, h = perfs["A100-80GB"], perfs["H100-SXM"]
    assert a.token_time(1) * 1e3 == pytest.approx(45.033, abs=0.01)
    assert h.token_time(1) * 1e3 == pytest.approx(30.562, abs=0.01)
    assert a.token_time(64) * 1e3 == pytest.approx(71.605, abs=0.01)
    assert h.token_time(64) * 1e3 == pytest.approx(50.161, abs=0.01)
    # Splitwise's own A100/H100 decode ratio, the figure the designs turn on: 1.47x at batch 1.
    assert a.token_time(1) / h.token_time(1) == pytest.approx(1.474, abs=0.002)


def test_step_times_follow_the_artifacts_rules(perfs):
    """DatabasePerformanceModel.get_iteration_duration: a prompt step by its prompt tokens, a
    mixed step 1.1x the prompt step of all its tokens; the token step by the batch size here,
    extrapolated linearly past the measured batch of 64."""
    a = perfs["A100-80GB"]
    prompt = a.batch_time(BatchStats(num_prefill_tokens=1024, num_prefill_reqs=1))
    assert prompt == pytest.approx(a.prompt_time(1024))
    mixed = a.batch_time(BatchStats(num_prefill_tokens=1000, num_prefill_reqs=1, num_decode_reqs=24))
    assert mixed == pytest.approx(1.1 * a.prompt_time(1024))
    t32, t64, t96 = (a.batch_time(BatchStats(num_decode_reqs=b)) for b in (32, 64, 96))
    assert t96 - t64 == pytest.approx(t64 - t32)  # the 32-64 slope carried on
    assert t64 > t32 > a.batch_time(BatchStats(num_decode_reqs=1))


def test_iso_power_designs_match_the_artifacts_cost_and_power():
    """The designs fit the power of 40 DGX-H100s (44 / 24.8 per machine, the artifact's sweep
    conversion); Splitwise-AA costs 19% less (the paper's "20% lower cost"), Splitwise-HA 7%."""
    cost0, power0 = splitwise.cost_power("Baseline-H100")
    for design in splitwise.DESIGNS:
        cost, power = splitwise.cost_power(design)
        assert power <= power0 * 1.001, design
    assert splitwise.cost_power("Splitwise-AA")[0] / cost0 == pytest.approx(70 * 2.21 / (40 * 4.76))
    assert 0.80 <= splitwise.cost_power("Splitwise-AA")[0] / cost0 <= 0.82
    assert 0.92 <= splitwise.cost_power("Splitwise-HA")[0] / cost0 <= 0.94


def test_slowdowns_are_against_an_idle_a100(perfs):
    """A request served exactly as on an idle DGX-A100 has slowdown 1 on all three metrics."""
    import numpy as np

    a = perfs["A100-80GB"]

    class Rec:
        num_prompt_tokens = np.array([1000])
        num_output_tokens = np.array([11])
        ttft_s = np.array([a.prompt_time(1000)])
        e2e_s = np.array([a.prompt_time(1000) + 10 * a.token_time(1)])

    sd = splitwise.slowdowns(Rec, a)
    for key in ("ttft", "tbt", "e2e"):
        assert sd[key][0] == pytest.approx(1.0)
    ok, _ = splitwise.meets(sd)
    assert ok


def test_artifacts_token_lookup_leaves_a_decode_batch_at_the_batch_1_time():
    """DatabasePerformanceModel (8f99e7d) indexes token time by prompt_size x batch_size
    (128-32,768) and reads it at a token-only batch's size: a batch of 1-127 lies below the
    first point, on the line through the medians at 128 and 256 (single 128- and 256-token
    prompts: A100 43.0 and 43.5 ms, H100 29.9 and 28.3 ms); a batch of 512 reads a single
    512-token prompt's time."""
    import numpy as np

    art = splitwise.perf_models(token_lookup=True)
    rows = splitwise_perf.measurements()
    for gpu, hw in splitwise_perf.HW.items():

        def median(bt: int, hw: str = hw) -> float:
            return float(
                np.median(
                    [
                        float(r["token_time"]) / 1e3
                        for r in rows
                        if r["model"] == "llama2-70b"
                        and r["hardware"] == hw
                        and r["tensor_parallel"] == "8"
                        and int(r["prompt_size"]) * int(r["batch_size"]) == bt
                    ]
                )
            )

        y128, y256 = median(128), median(256)
        for b in (1, 64, 127):
            want = y128 + (y256 - y128) * (b - 128) / 128
            assert art[gpu].token_time(b) == pytest.approx(want), (gpu, b)
        assert art[gpu].token_time(512) == pytest.approx(median(512)), gpu
    a = art["A100-80GB"]
    assert a.token_time(1) * 1e3 == pytest.approx(42.6, abs=0.05)
    assert a.token_time(512) * 1e3 == pytest.approx(45.0, abs=0.05)
    # servesim's own reading of the same rows: 45.0 ms at batch 1, 71.6 ms at batch 64.
    assert splitwise.perf_models()["A100-80GB"].token_time(64) / a.token_time(64) > 1.6


def test_artifact_semantics_map_to_the_engine_and_cluster():
    """The artifact's instances run prompts whole, prompts first (vLLM V0's loop, a whole
    Llama-2 prompt's budget); its MixedPoolScheduler takes the token machine with the least
    KV memory over a 200 GiB/s link. servesim's reading: vLLM V1, 2,048-token chunks."""
    art = splitwise._engine(splitwise.ARTIFACT)
    assert (art["policy"], art["enable_chunked_prefill"], art["max_num_batched_tokens"]) == (
        "vllm_v0",
        False,
        4096,
    )
    own = splitwise._engine()
    assert (own["policy"], own["enable_chunked_prefill"], own["max_num_batched_tokens"]) == (
        "vllm_v1",
        True,
        2048,
    )
    token = splitwise._engine(splitwise.ARTIFACT, "decode")
    assert (token["policy"], token["enable_chunked_prefill"]) == ("vllm_v1", False)
    perfs = splitwise.perf_models(token_lookup=True)
    cfg, pools = splitwise.cluster("Splitwise-HA", perfs, splitwise.ARTIFACT)
    assert [p.engine.policy for p in cfg.pools] == ["vllm_v0", "vllm_v1"]
    assert cfg.decode_router == "least_kv"
    assert cfg.link.bandwidth_gb_per_s == pytest.approx(200 * 2**30 / 1e9)
    assert [(p.role, p.num_replicas) for p in cfg.pools] == [("prefill", 25), ("decode", 26)]
    assert splitwise.cluster("Splitwise-HA", perfs)[0].decode_router is None


def test_notebook_slowdowns_divide_by_all_output_tokens():
    """Scheduler.get_results: TBT = (E2E - TTFT) / token_size; add_baseline_perf: the idle
    TBT is the token predictor at the prompt size (1,000 tokens: A100 44.6 ms)."""
    import numpy as np

    a = splitwise.perf_models()["A100-80GB"]
    nb = splitwise.perf_models(token_lookup=True)["A100-80GB"]

    class Rec:
        num_prompt_tokens = np.array([1000])
        num_output_tokens = np.array([11])
        ttft_s = np.array([a.prompt_time(1000)])
        e2e_s = np.array([a.prompt_time(1000) + 11 * 0.05])

    sd = splitwise.slowdowns(Rec, a, nb)
    assert sd["tbt"][0] == pytest.approx(0.05 / nb.token_time(1000))
    assert nb.token_time(1000) * 1e3 == pytest.approx(44.6, abs=0.05)
    assert splitwise.slowdowns(Rec, a)["tbt"][0] == pytest.approx(0.055 / a.token_time(1))
