"""The implied host floor of each machine's eager 1k-prompt runs (``validate/silicon_floor.py``)."""

from __future__ import annotations

import math

import pytest

from servesim.validate import silicon_floor as sf
from servesim.validate.silicon_cases import read_silicon


def test_floor_crossing_interpolates_between_the_grid_points_around_zero():
    # -0.1 at 0.4 ms and +0.1 at 0.8 ms: zero half way, 0.6 ms.
    assert sf.floor_crossing([0.0, 0.4e-3, 0.8e-3], [-0.2, -0.1, 0.1]) == pytest.approx(0.6e-3)
    # -0.3 at 0 and +0.1 at 0.4 ms: three quarters of the way, 0.3 ms.
    assert sf.floor_crossing([0.0, 0.4e-3], [-0.3, 0.1]) == pytest.approx(0.3e-3)
    # an exact zero at a grid point is that point, first or last
    assert sf.floor_crossing([0.0, 1e-3], [0.0, 0.5]) == 0.0
    assert sf.floor_crossing([0.0, 1e-3], [-0.5, 0.0]) == pytest.approx(1e-3)


def test_floor_crossing_outside_the_grid_is_none():
    assert sf.floor_crossing([0.0, 0.8e-3], [0.1, 0.4]) is None  # over-predicted without any floor
    assert sf.floor_crossing([0.0, 0.8e-3], [-0.4, -0.1]) is None  # under-predicted at the largest
    with pytest.raises(ValueError, match="one error per floor"):
        sf.floor_crossing([0.0, 0.8e-3], [0.1])


def test_image_of_a_row():
    assert (
        sf.image_of(
            "db-dump/2026-04-27; config_id=813; silicon_concurrency=4; vllm/vllm-openai:v0.19.0-cu130"
        )
        == "vllm/vllm-openai:v0.19.0-cu130"
    )
    assert (
        sf.image_of("source_file=2026-03-25.csv; model=Kimi-K2.5; image=vllm/vllm-openai:v0.17.0-cu130")
        == "vllm/vllm-openai:v0.17.0-cu130"
    )
    assert sf.image_of("source_file=2026-04-06.csv; model=Llama-3.1-70B") == "source_file=2026-04-06.csv"


def test_a_table_row_says_where_the_floor_is_outside_the_grid():
    grid = (0.0, 0.8e-3)
    over = sf.ImpliedFloor("g", "", 8, "img", 3, 1.0, {0.0: math.log(1.26), 0.8e-3: math.log(1.5)}, None)
    assert over.row() == "| g | (none) | 8 | img | 3 | 1.00 | +26% | +50% | < 0 |"
    under = sf.ImpliedFloor(
        "g", "0.17.0", 4, "img", 2, 2.17, dict(zip(grid, (math.log(0.5), math.log(0.8)))), None
    )
    assert under.row().endswith("| 2.17 | -50% | -20% | > 0.8 |")
    mid = sf.ImpliedFloor("g", "0.19.0", 4, "img", 5, 2.17, dict(zip(grid, (-0.1, 0.3))), 0.2e-3)
    assert mid.row().endswith("| 0.20 |")


def test_eager_1k_rows_are_asked_and_graph_captured_ones_are_not():
    """Kimi-K2.5 fp4 on B300 at TP 8 (its launch script: CUDA graphs to twice the 4 clients,
    so the 1k prefill runs eager) is asked; the same model on B200 with graphs to 2,048 tokens
    (its April script) is not. The floor's scale is the layer's kernel count over a dense GQA
    layer's (``eager_kernels_per_layer``): 61 layers, 60 of them MoE; at TP 8 an MLA layer
    13 kernels (10 + 2 norms + its all-reduce), a MoE MLP 11 (7 + a shared expert's 3 + its
    all-reduce), the dense one 4; the reference 11: (13 + (60 x 11 + 4) / 61) / 11 = 2.171."""
    rows = read_silicon()
    b300 = [
        r
        for r in rows
        if r["system"] == "b300_sxm"
        and r["model_path"] == "moonshotai/Kimi-K2.5"
        and r["backend_version"] == "0.19.0"
        and r["tp_size"] == "8"
        and r["isl"] == "1024"
    ]
    b200 = [
        r
        for r in rows
        if r["system"] == "b200_sxm"
        and r["precision"] == "fp4"
        and r["model_path"] == "moonshotai/Kimi-K2.5"
        and "workflow_run_id=786;" in r["silicon_data_source"]
        and r["isl"] == "1024"
    ]
    assert len(b300) == 1 and b200
    out = sf.implied_floors(b300 + b200, grid=(0.0, 0.8e-3))
    assert [(f.group, f.version, f.tp, f.image, f.runs) for f in out] == [
        ("Kimi-K2.5 fp4 b300_sxm", "0.19.0", 8, "vllm/vllm-openai:v0.19.0-cu130", 1)
    ]
    assert out[0].kernel_ratio == pytest.approx((13 + (60 * 11 + 4) / 61) / 11)
    assert set(out[0].median_err) == {0.0, 0.8e-3}
    # the 1k prefill is GPU-bound without a floor (44.5 ms) and floor-bound at 0.8 ms (106 ms)
    assert out[0].median_err[0.8e-3] > out[0].median_err[0.0]


def test_a_step_model_built_at_another_host_floor_is_not_reused():
    """The factory reuses a step model built from equal inputs; the host floor the model reads
    when built is one of them, so the cross-group check's grid (``silicon_cross.host_floor``)
    gets a model at each floor. Llama-3.1-70B at TP 1 (a dense GQA layer, the floor's
    reference: 9 kernels over 9) with 256 sequences (graphs to 512 tokens): 80 layers x the
    floor, 40 ms at 0.5 ms and 64 ms at 0.8 ms."""
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.config import EngineConfig, HardwareConfig, ParallelConfig
    from servesim.perf.factory import build_step_model
    from servesim.validate.silicon_cross import host_floor

    m, g = load_model("meta-llama/Llama-3.1-70B"), get_gpu("H100-SXM")
    engine = EngineConfig(version="0.19.0", max_num_seqs=256, max_num_batched_tokens=8192)
    args = (m, g, ParallelConfig(), HardwareConfig(perf_model="kernels"))
    floors = []
    for f in (0.8e-3, 0.5e-3, 0.8e-3):
        with host_floor(f):
            floors.append(build_step_model(*args, engine=engine).eager_floor)
    assert floors == pytest.approx([0.064, 0.040, 0.064])
