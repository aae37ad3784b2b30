"""`servesim profile` (torch extra): time a tiny model's operators on the CPU, then calibrate
on them. Skipped when torch is not installed (CI does not install it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servesim.calibration.measurements import read_operator_profiles
from servesim.catalog.models import from_hf_config
from servesim.config import GpuConfig

TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


def test_profile_tiny_model_on_cpu_and_calibrate(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("scipy")
    from servesim.calibration.calibrate import calibrate_operators
    from servesim.profile_ops import profile_operators

    model = from_hf_config(TINY, "tiny")
    paths = profile_operators(
        model, tmp_path, "cpu", tokens=(1, 4, 16, 64), contexts=(64,), batches=(1, 4), warmup=1, repeats=3
    )
    assert [p.name for p in paths] == ["mlp.csv", "attention.csv"]
    (table,) = read_operator_profiles(tmp_path, ("cpu",))
    assert table.model == "tiny" and table.tp == 1 and table.num_tokens.tolist() == [1, 4, 16, 64]
    assert set(table.times_s) == {"proj", "mlp", "elementwise"}
    assert all((v > 0).all() for v in table.times_s.values())
    assert (
        table.attention is not None
        and table.attention.is_prefill.any()
        and not table.attention.is_prefill.all()
    )
    cpu = GpuConfig(name="cpu", bf16_tflops=0.05, mem_gb=8, mem_bw_tb_per_s=0.02)
    from servesim.catalog.gpus import get_gpu

    eff, (res,) = calibrate_operators([table], gpu=get_gpu(cpu))
    assert all(0 < v <= 1 for k, v in res.params.items() if not k.endswith("_s"))
    # Bigger batches take longer (the direction of the effect), measured and fitted.
    assert table.times_s["mlp"][-1] > table.times_s["mlp"][0]
    assert res.predicted_s[3] > res.predicted_s[0]
