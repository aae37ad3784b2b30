"""Parallelism in the perf model: TP against Splitwise's measured trend, pipeline
micro-batches and their bubbles, expert parallelism, and links from the catalog."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from servesim.catalog import get_gpu, load_model
from servesim.catalog.gpus import link_spec
from servesim.config import ParallelConfig
from servesim.perf.base import BatchStats
from servesim.perf.roofline import PipelinedPerfModel, RooflinePerfModel, build_perf_model

MEASUREMENTS = Path(__file__).parent / "fixtures" / "measurements" / "measurements"
SPLITWISE = MEASUREMENTS / "splitwise" / "perf_model.csv"


def prefill(p: int) -> BatchStats:
    return BatchStats(num_prefill_tokens=p, prefill_attn_work=p * p / 2, num_prefill_reqs=1)


@pytest.mark.parametrize(("gpu", "hw"), [("H100-SXM", "h100-80gb"), ("A100-80GB", "a100-80gb")])
def test_tp_prefill_time_falls_sublinearly_like_splitwise(gpu: str, hw: str) -> None:
    """Llama-2-70B prompt time (2048 tokens, batch 1) at TP 2/4/8, Splitwise's measurements
    (medians) vs the roofline with catalog links. Measured H100: 310, 201, 137 ms; A100:
    688, 403, 274 ms. Modelled H100: 243, 143, 93; A100: 712, 388, 226."""
    rows: dict[int, list[float]] = defaultdict(list)
    with SPLITWISE.open() as f:
        for r in csv.DictReader(f):
            if (r["model"], r["hardware"], r["prompt_size"], r["batch_size"]) == (
                "llama2-70b",
                hw,
                "2048",
                "1",
            ):
                rows[int(r["tensor_parallel"])].append(float(r["prompt_time"]) / 1e3)
    measured = {tp: statistics.median(v) for tp, v in rows.items()}
    g, m = get_gpu(gpu), load_model("Llama-2-70B")
    model = {
        tp: RooflinePerfModel(m, g, tp=tp, links=link_spec(g)).batch_time(prefill(2048)) for tp in (2, 4, 8)
    }
    for a, b in ((2, 4), (4, 8)):
        ratio_m, ratio_s = model[a] / model[b], measured[a] / measured[b]
        assert 1.0 < ratio_m < 2.0 and 1.0 < ratio_s < 2.0  # falls, sub-linearly, in both
        assert ratio_m == pytest.approx(ratio_s, rel=0.25)
    for tp in (2, 4, 8):
        assert 0.6 < model[tp] / measured[tp] < 1.3


def test_tp_decode_time_falls_with_tp() -> None:
    """Decode (batch 1) falls with TP in the model, sub-linearly (all-reduces and fixed costs).
    Splitwise measures a flatter trend (H100: 37, 30, 31 ms): the roofline under-predicts
    small sharded kernels (docs/perf_model.md)."""
    g, m = get_gpu("H100"), load_model("Llama-2-70B")
    t = [
        RooflinePerfModel(m, g, tp=tp, links=link_spec(g)).batch_time(
            BatchStats(num_decode_reqs=1, sum_decode_context=2112)
        )
        for tp in (2, 4, 8)
    ]
    assert t[0] > t[1] > t[2] and t[0] / t[1] < 2 and t[1] / t[2] < 2


def test_pipelined_time_and_bubble_by_hand() -> None:
    g, m = get_gpu("H100"), load_model("Llama-3.1-70B")
    inner = RooflinePerfModel(m, g, tp=2, pp=4)
    pm = PipelinedPerfModel(inner, num_microbatches=4)
    st = BatchStats(num_decode_reqs=64, sum_decode_context=64 * 1000)
    quarter = BatchStats(num_decode_reqs=16, sum_decode_context=16 * 1000)
    assert pm.batch_time(st) == pytest.approx((4 + 3) / 4 * inner.batch_time(quarter))
    assert pm.bubble_fraction(st) == pytest.approx(3 / 7)
    assert inner.bubble_fraction(st) == pytest.approx(3 / 4)
    one = BatchStats(num_decode_reqs=1, sum_decode_context=1000)  # one request: one micro-batch
    assert pm.batch_time(one) == inner.batch_time(one) and pm.bubble_fraction(one) == pytest.approx(3 / 4)
    assert pm.batch_flops(st) == pytest.approx(inner.batch_flops(st))
    assert pm.batch_bytes(st) > inner.batch_bytes(st)  # weights streamed once per micro-batch
    assert isinstance(
        build_perf_model(
            m, g, ParallelConfig(tensor_parallel_size=2, pipeline_parallel_size=4, num_microbatches=4)
        ),
        PipelinedPerfModel,
    )
    assert isinstance(build_perf_model(m, g, ParallelConfig(pipeline_parallel_size=4)), RooflinePerfModel)


def test_pipeline_bubbles_visible_in_utilization() -> None:
    import servesim

    def run(pp: int, m: int) -> dict:
        return servesim.simulate(
            {
                "model": {"name": "Llama-3.1-8B"},
                "hardware": {"gpu": "H100"},
                "parallel": {"pipeline_parallel_size": pp, "num_microbatches": m},
                # the burst reaches the engine at once (no API-server queue spreading it)
                "engine": {"frontend": {"enabled": False}},
                "workload": {
                    "type": "synthetic",
                    "num_requests": 200,
                    "arrival": {"process": "burst"},
                    "prompt_len": {"kind": "constant", "value": 256},
                    "output_len": {"kind": "constant", "value": 64},
                },
            }
        ).summary["utilization"]["overall"]

    one, pp4, pp4m8 = run(1, 1), run(4, 1), run(4, 8)
    assert one["pipeline_bubble_fraction"] == 0.0
    # The engine's batch queue keeps up to 4 batches on the stages (engine/replica.py): below
    # the (pp - 1) / pp = 0.75 of a step stepped whole, above 0 (the pipeline fills and drains).
    assert 0.0 < pp4["pipeline_bubble_fraction"] < 0.75
    assert pp4m8["pipeline_bubble_fraction"] == pytest.approx(
        3 / 11, rel=0.05
    )  # 200 requests: 8 micro-batches of a step stepped whole (GPipe)
    assert pp4["mfu"] < one["mfu"] / 2


def test_expert_parallelism_communicates_as_tp_and_carries_imbalance() -> None:
    g, m = get_gpu("H100"), load_model("Mixtral-8x7B")
    big = BatchStats(num_prefill_tokens=8192, prefill_attn_work=8192 * 4096, num_prefill_reqs=1)
    tp4 = RooflinePerfModel(m, g, tp=4)
    ep4 = RooflinePerfModel(m, g, tp=4, ep=4)
    skew = RooflinePerfModel(m, g, tp=4, ep=4, expert_imbalance=1.5)
    b0, b1, b2 = tp4.breakdown(big), ep4.breakdown(big), skew.breakdown(big)
    # Expert parallelism over the TP ranks moves no tokens (vLLM's FusedMoE without DP):
    # each rank runs its experts on the whole batch and the MoE all-reduce sums them.
    assert b1["comm"] == b0["comm"]
    assert b1["mlp"] == pytest.approx(b0["mlp"], rel=0.02)  # same work per rank when balanced
    assert b2["mlp"] == pytest.approx(1.5 * b1["mlp"], rel=0.02)  # compute-bound: the busiest group
    assert sum(b2.values()) == pytest.approx(skew.batch_time(big))
    with pytest.raises(ValueError, match="divide"):
        RooflinePerfModel(m, g, tp=4, ep=3)
    RooflinePerfModel(m, g, tp=1, ep=4, dp=4)  # four DP ranks' GPUs hold the experts
    with pytest.raises(ValueError, match="MoE"):
        RooflinePerfModel(load_model("Llama-3.1-8B"), g, tp=2, ep=2)
    with pytest.raises(ValueError, match="expert_parallel_size"):
        ParallelConfig(tensor_parallel_size=4, expert_parallel_size=3)


def test_links_from_the_catalog_and_overrides() -> None:
    h100 = get_gpu("H100")
    lk = link_spec(h100)
    assert (lk.intra_bw, lk.inter_bw, lk.gpus_per_node) == (450e9, 50e9, 8)
    assert "NVLink" in lk.intra_kind and "InfiniBand" in lk.inter_kind
    assert "PCIe" in link_spec(get_gpu("L40S")).intra_kind
    assert link_spec(h100, inter_bw=25e9, gpus_per_node=4).inter_bw == 25e9
    m = load_model("Llama-3.1-70B")
    st = BatchStats(num_prefill_tokens=4096, prefill_attn_work=4096 * 2048, num_prefill_reqs=1)
    # Inside a node the links change nothing (TP8 on NVLink, as without them).
    assert RooflinePerfModel(m, h100, tp=8, links=lk).batch_time(st) == RooflinePerfModel(
        m, h100, tp=8
    ).batch_time(st)
    # TP8 x PP2 spans two nodes: the stage boundary crosses InfiniBand (9x slower than NVLink).
    cross = RooflinePerfModel(m, h100, tp=8, pp=2, links=lk).breakdown(st)["comm"]
    local = RooflinePerfModel(m, h100, tp=8, pp=2).breakdown(st)["comm"]
    hidden = 2 * 4096 * 8192 * 2  # bytes across the boundary
    assert cross - local == pytest.approx(hidden / 0.8 * (1 / 50e9 - 1 / 450e9) + 8e-6 - 5e-6)
    # TP16 rings over the network.
    assert (
        RooflinePerfModel(m, h100, tp=16, links=lk).breakdown(st)["comm"]
        > 5 * RooflinePerfModel(m, h100, tp=16).breakdown(st)["comm"]
    )


# ---------------------------------------------------------------------- layouts vLLM refuses


def test_parallel_layouts_vllm_refuses_are_refused() -> None:
    """Heads over TP ranks, KV heads split or replicated, experts over EP groups."""
    import dataclasses

    from servesim.catalog.parallel import check_parallel
    from servesim.errors import ConfigError

    llama = load_model("Llama-3.1-8B")  # 32 heads, 8 KV heads
    for tp in (1, 2, 4, 8, 16, 32):  # 16 and 32: each KV head replicated on 2 and 4 ranks
        check_parallel(llama, ParallelConfig(tensor_parallel_size=tp))
    with pytest.raises(ConfigError) as e:
        check_parallel(llama, ParallelConfig(tensor_parallel_size=3))
    assert str(e.value) == (
        "parallel.tensor_parallel_size: 3 does not divide the 32 attention heads of "
        "meta-llama/Llama-3.1-8B (vLLM requires it); expected one of 1, 2, 4, 8, 16, 32"
    )
    odd_kv = dataclasses.replace(llama, num_attention_heads=48, num_kv_heads=12)  # tp 8: 48/8, but 12 vs 8
    with pytest.raises(ConfigError, match=r"tensor_parallel_size: 8 neither divides the 12 KV heads"):
        check_parallel(odd_kv, ParallelConfig(tensor_parallel_size=8))
    check_parallel(odd_kv, ParallelConfig(tensor_parallel_size=4))
    with pytest.raises(ConfigError, match=r"expert_parallel_size: 2, but meta-llama/Llama-3.1-8B has no"):
        check_parallel(llama, ParallelConfig(tensor_parallel_size=2, expert_parallel_size=2))
    mixtral = load_model("Mixtral-8x7B")
    check_parallel(mixtral, ParallelConfig(tensor_parallel_size=8, expert_parallel_size=8))
    six = dataclasses.replace(mixtral, num_experts=6)
    four = ParallelConfig(tensor_parallel_size=4, expert_parallel_size=4)
    ep_error = r"pools\[p\]\.parallel\.expert_parallel_size: 4 does not divide the 6 experts .*of 1, 2, 3, 6"
    with pytest.raises(ConfigError, match=ep_error):
        check_parallel(six, four, "pools[p].parallel")


def test_cli_refuses_a_tp_size_that_does_not_divide_the_heads_for_one_replica_and_for_a_pool(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from servesim.cli import app

    runner = CliRunner()
    small = ["--set", "workload.limit=5", "--quiet", "--no-progress"]
    out = runner.invoke(app, ["simulate", "--set", "parallel.tensor_parallel_size=3", *small])
    assert out.exit_code == 2, out.output
    assert "parallel.tensor_parallel_size: 3 does not divide the 32 attention heads" in out.stderr
    assert "Traceback" not in out.output
    f = tmp_path / "pools.yaml"
    f.write_text(
        "cluster:\n  pools:\n    - name: big\n      num_replicas: 2\n"
        "      parallel: {tensor_parallel_size: 6}\n"
    )
    out = runner.invoke(app, ["simulate", str(f), *small])
    assert out.exit_code == 2, out.output
    assert "cluster.pools[big].parallel.tensor_parallel_size: 6 does not divide" in out.stderr
    assert "Traceback" not in out.output
