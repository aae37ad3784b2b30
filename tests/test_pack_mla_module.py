"""tools/pack_mla_module.py on hand-made rows of AIConfigurator's MLA module table."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return load_script(ROOT / "tools" / "pack_mla_module.py")


def _row(
    kv: str, gemm: str, heads: int, batch: int, isl: int, ms: float, model: str = "deepseek-ai/DeepSeek-V3"
) -> dict:
    return {
        "model": model,
        "tp_size": 1,
        "kv_cache_dtype": kv,
        "gemm_type": gemm,
        "num_heads": heads,
        "batch_size": batch,
        "isl": isl,
        "latency": ms,
    }


def test_packs_each_series_on_its_axes_repeats_averaged_gaps_left_empty():
    tool = _tool()
    rows = [
        _row("fp8", "bfloat16", 16, 1, 1024, 0.18),
        _row("fp8", "bfloat16", 16, 1, 1024, 0.20),  # a repeat
        _row("fp8", "bfloat16", 16, 1, 8192, 0.123456),
        _row("fp8", "bfloat16", 16, 4, 1024, 0.42),
        _row("bfloat16", "nvfp4", 8, 2, 16, 0.09),
    ]
    out = tool.pack_rows(rows)
    assert sorted(out) == ["bfloat16|nvfp4|8", "fp8|bfloat16|16"]
    s = out["fp8|bfloat16|16"]
    assert s["batch"] == [1, 4] and s["isl"] == [1024, 8192]
    # averaged, 4 significant digits; (4 prompts, 8192) was not measured
    assert s["latency_ms"] == [[0.19, 0.1235], [0.42, None]]


def test_refuses_a_table_of_another_module():
    with pytest.raises(SystemExit, match="unexpected row"):
        _tool().pack_rows([_row("fp8", "bfloat16", 16, 1, 16, 0.1, model="moonshotai/Kimi-K2.5")])
