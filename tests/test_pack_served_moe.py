"""tools/pack_served_moe.py on a hand-made AIConfigurator table in a throwaway git repo."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return load_script(ROOT / "tools" / "pack_served_moe.py")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_packs_the_served_kernels_rows_as_measured(tmp_path):
    tool = _tool()
    (fp8, _), (bf16, _), (mxfp8, _), (marlin, _) = sorted(tool.SERVED.items(), key=lambda kv: kv[1])
    rows = [  # kernel_source, distribution, tokens, latency
        (bf16[2], "power_law_1.01", 1, 0.03),
        (bf16[2], "power_law_1.01", 1, 0.05),  # a repeat: averaged
        (bf16[2], "power_law_1.01", 8, 0.09),
        (bf16[2], "balanced", 8, 9.0),  # another distribution
        (mxfp8[2], "power_law_1.01", 4, 0.02),
        ("vllm_other_kernel", "power_law_1.01", 4, 7.0),
        (marlin[2], "power_law_1.01", 2, 0.07),
        (fp8[2], "power_law_1.01", 16, 0.11),
    ]
    table = pa.table(
        {
            "kernel_source": [r[0] for r in rows],
            "distribution": [r[1] for r in rows],
            "num_tokens": [r[2] for r in rows],
            "latency": [r[3] for r in rows],
            "moe_dtype": ["w4a16_mxfp4"] * len(rows),
            "hidden_size": [2880] * len(rows),
            "inter_size": [2880] * len(rows),
            "topk": [4] * len(rows),
            "num_experts": [128] * len(rows),
            "moe_tp_size": [1] * len(rows),
            "moe_ep_size": [1] * len(rows),
        }
    )
    path = tmp_path / tool.TABLE.format(gpu="b200_sxm", version="0.24.0")
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "t"], check=True)
    out = tool.pack(tmp_path, "HEAD")
    got = {t["kernel"]: t["series"] for t in out["tables"]}
    assert got["flashinfer_trtllm_mxfp4_bf16"] == [
        {
            "shape": [2880, 2880, 4, 128],
            "moe_tp": 1,
            "moe_ep": 1,
            "tokens": [1, 8],
            "latency_ms": [0.04, 0.09],
        }
    ]
    assert got["flashinfer_trtllm_mxfp4_mxfp8"][0]["latency_ms"] == [0.02]
    assert got["marlin_int4"][0]["tokens"] == [2] and got["marlin_int4"][0]["latency_ms"] == [0.07]
    assert got["flashinfer_trtllm_fp8_block"][0]["tokens"] == [16]
    assert len(out["commit"]) == 40 and out["distribution"] == "power_law_1.01"
