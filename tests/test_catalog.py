"""Model and GPU catalogs: presets against published facts, config.json parsing, lookups."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from servesim.catalog import GpuSpec, from_hf_config, get_gpu, list_gpus, list_models, load_model
from servesim.config import GpuConfig
from servesim.errors import CatalogError

FIXTURES = Path(__file__).parent / "fixtures"


# ---------------------------------------------------------------------- models


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("Llama-3.1-8B", 8.03e9),
        ("Llama-2-7B", 6.74e9),
        ("Llama-2-70B", 6.90e10),
        ("Llama-3.1-70B", 7.06e10),
        ("CodeLlama-34B", 3.37e10),
        ("Mistral-7B", 7.24e9),
        ("Mixtral-8x7B", 4.67e10),
        ("Qwen2.5-7B", 7.61e9),
        ("Qwen2.5-72B", 7.27e10),
        ("Qwen-72B", 7.23e10),
        ("OPT-13B", 1.29e10),
        ("OPT-66B", 6.57e10),
        ("OPT-175B", 1.75e11),
    ],
)
def test_param_counts_match_published_sizes(name: str, published: float) -> None:
    assert load_model(name).num_params() == pytest.approx(published, rel=0.01)


def test_mixtral_active_params() -> None:
    m = load_model("mistralai/Mixtral-8x7B-v0.1")
    assert m.num_experts == 8 and m.num_experts_per_tok == 2 and m.moe_intermediate_size == 14336
    assert m.num_active_params() == pytest.approx(1.29e10, rel=0.01)
    assert load_model("Llama-3.1-8B").num_active_params() == load_model("Llama-3.1-8B").num_params()


def test_kv_bytes_per_token() -> None:
    m = load_model("Llama-3.1-8B")
    assert m.kv_bytes_per_token(1) == 131072  # 2 (K,V) x 32 layers x 8 heads x 128 x 2 bytes
    assert m.kv_bytes_per_token(2) == 65536
    assert m.kv_bytes_per_token(8) == 16384
    assert m.kv_bytes_per_token(16) == 16384  # 8 KV heads on 16 ranks: one replica each (vLLM)
    assert m.kv_bytes_per_token(1, kv_dtype_bytes=1) == 65536
    assert m.kv_bytes_per_token(1, pp=2) == 65536
    assert load_model("Llama-2-7B").kv_bytes_per_token(1) == 524288  # no GQA: 512 KiB


def test_opt_is_ungated_and_tied() -> None:
    m = load_model("facebook/opt-13b")
    assert not m.mlp_gated and m.tie_word_embeddings
    assert (m.hidden_size, m.intermediate_size, m.vocab_size, m.num_kv_heads) == (5120, 20480, 50272, 40)
    assert m.expert_params() == 2 * 5120 * 20480


def test_names_are_case_insensitive_with_and_without_org() -> None:
    canon = load_model("meta-llama/Llama-3.1-8B").name
    for alias in (
        "Llama-3.1-8B",
        "llama-3.1-8b",
        "META-LLAMA/LLAMA-3.1-8B",
        "Meta-Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
    ):
        assert load_model(alias).name == canon
    assert len(list_models()) >= 15
    for name in list_models():
        assert load_model(name).name == name


def test_unknown_model_lists_close_matches() -> None:
    with pytest.raises(CatalogError, match=r"unknown model 'Llama-3.1-9B'.*did you mean.*Llama-3.1-8B"):
        load_model("Llama-3.1-9B")


def test_dtype_override() -> None:
    m = load_model("Llama-3.1-8B", dtype="fp8")
    assert m.dtype == "fp8" and m.dtype_bytes == 1
    assert m.kv_bytes_per_token(1) == 131072  # KV 'auto' follows the 16-bit activations
    assert load_model("Llama-2-7B").dtype == "float16"


def tiny_llama_config(hidden: int = 512, layers: int = 4) -> dict:
    """The config of the tiny Llama the vLLM CPU recordings ran (tests/fixtures/vllm_timing)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": hidden * 11 // 4 // 64 * 64,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // 64,
        "num_key_value_heads": max(1, hidden // 256),
        "head_dim": 64,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def test_tiny_cpu_ground_truth_model_loads(tmp_path: Path) -> None:
    d = tmp_path / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_llama_config()))
    for spec in (load_model(str(d)), load_model(str(d / "config.json"))):
        assert (spec.num_layers, spec.hidden_size) == (4, 512)
        assert (spec.num_attention_heads, spec.num_kv_heads) == (8, 2)
        assert (spec.head_dim, spec.intermediate_size, spec.vocab_size) == (64, 1408, 32000)
        assert spec.max_position_embeddings == 4096 and spec.dtype == "bfloat16"
        assert spec.kv_bytes_per_token(1) == 2 * 4 * 2 * 64 * 2
        assert spec.name == "tiny-llama"


def test_from_hf_config_defaults_and_nesting() -> None:
    cfg = {
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 128,
    }
    m = from_hf_config(cfg, "x")
    assert m.num_kv_heads == 4 and m.head_dim == 64 and not m.tie_word_embeddings and m.dtype == "bfloat16"
    nested = from_hf_config({"model_type": "llava", "torch_dtype": "float16", "text_config": cfg}, "y")
    assert nested.hidden_size == 256 and nested.dtype == "float16"
    assert from_hf_config({**cfg, "torch_dtype": "float32"}, "z").dtype == "bfloat16"  # as vLLM 'auto'
    moe_cfg = {**cfg, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    moe = from_hf_config(moe_cfg, "q")
    assert (moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size) == (4, 2, 64)


def test_missing_key_error_names_file_and_key(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(
        json.dumps({"hidden_size": 256, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 512})
    )
    with pytest.raises(CatalogError, match=r"config\.json: missing key 'num_hidden_layers'"):
        load_model(str(p))
    with pytest.raises(CatalogError, match="no such file"):
        load_model(str(tmp_path / "nope" / "config.json"))
    p.write_text("{not json")
    with pytest.raises(CatalogError, match="cannot read JSON"):
        load_model(str(p))


# ---------------------------------------------------------------------- GPUs


def test_gpu_lookup_and_aliases() -> None:
    assert list_gpus() == ["A100-80GB", "H100-SXM", "H200", "B200", "B300", "GB200", "MI300X", "L40S", "L4"]
    assert get_gpu("b300_sxm").name == "B300" and get_gpu("GB200").name == "GB200"
    assert get_gpu("h100").name == "H100-SXM"
    assert get_gpu("a100").name == "A100-80GB"
    assert get_gpu("H100 SXM").name == "H100-SXM"
    assert get_gpu("l4").name == "L4" and get_gpu("L40s").name == "L40S"
    with pytest.raises(CatalogError, match="unknown GPU 'H300'"):
        get_gpu("H300")


def test_sm_counts_from_the_spec_sheets() -> None:
    """Streaming multiprocessors (AMD: compute units) that each product enables."""
    sms = {g: get_gpu(g).num_sms for g in list_gpus()}
    assert sms == {
        "A100-80GB": 108,
        "H100-SXM": 132,
        "H200": 132,
        "B200": 148,
        "B300": 148,
        "GB200": 148,
        "MI300X": 304,
        "L40S": 142,
        "L4": 58,
    }
    # Custom hardware has none (wave quantisation is off there).
    assert get_gpu(GpuConfig(name="X", bf16_tflops=100, mem_gb=40, mem_bw_tb_per_s=1.5)).num_sms == 0


def test_blackwell_variants_from_nvidia_specs() -> None:
    """B300 (HGX B300 datasheet, per 8 GPUs) and GB200 (GB200 NVL72, per 72 GPUs), per GPU."""
    from servesim.perf.kernels import kernel_versions

    b200, b300, gb200 = get_gpu("B200"), get_gpu("B300"), get_gpu("GB200")
    assert b300.flops_for("bfloat16") == 18e15 / 8 and b300.flops_for("fp8") == 36e15 / 8
    assert gb200.flops_for("bfloat16") == 180e15 / 72 and gb200.flops_for("fp8") == 360e15 / 72
    assert b300.mem_bw == gb200.mem_bw == 8e12 == 576e12 / 72
    # 288 GB and 186 GB of HBM3e per GPU, read as GiB as for the other parts; the driver sees less
    assert 0.9 * 288 * 2**30 <= b300.mem_bytes <= 288 * 2**30
    assert 0.9 * 186 * 2**30 <= gb200.mem_bytes <= 186 * 2**30
    assert b300.mem_bytes > 1.4 * b200.mem_bytes
    assert (b300.max_power_w, gb200.max_power_w) == (1100, 1200)
    assert b300.interconnect_bw == gb200.interconnect_bw == b200.interconnect_bw == 1.8e12 / 2
    # no tables of their own: B200's
    assert kernel_versions("B300") == kernel_versions("GB200") == kernel_versions("B200") != ()


def test_flops_for_falls_back_to_bf16_without_fp8() -> None:
    a100, h100 = get_gpu("A100-80GB"), get_gpu("H100-SXM")
    assert a100.flops_for("fp8") == a100.flops_for("bfloat16") == 312e12
    assert h100.flops_for("fp8") == 1979e12
    assert h100.flops_for("float32") == 67e12


def test_gpu_from_config() -> None:
    g = get_gpu(GpuConfig(name="X", bf16_tflops=100, mem_gb=40, mem_bw_tb_per_s=1.5))
    assert isinstance(g, GpuSpec)
    assert g.flops_for("bfloat16") == 100e12 and g.flops_for("fp8") == 100e12
    assert g.mem_bytes == 40e9 and g.mem_bw == 1.5e12 and g.interconnect_bw == 450e9
    assert g.interconnect_latency_s == pytest.approx(5e-6)


def test_gpu_specs_match_the_spec_sheet_table() -> None:
    path = FIXTURES / "gpu_specs.csv"
    names = {
        "A100 80GB": "A100-80GB",
        "H100 80GB": "H100-SXM",
        "H200 141GB": "H200",
        "B200 (HGX)": "B200",
        "MI300X": "MI300X",
        "L40S": "L40S",
        "L4": "L4",
    }
    for row in csv.DictReader(path.open()):
        g = get_gpu(names[row["gpu"]])
        assert g.flops_for("bfloat16") == float(row["bf16_dense_tflops"]) * 1e12
        if row["fp8_dense_tflops"]:
            assert g.peak_flops["fp8"] == float(row["fp8_dense_tflops"]) * 1e12
        assert g.mem_bw == pytest.approx(float(row["mem_bw_tbps"]) * 1e12)
        assert g.max_power_w == float(row["tdp_w"])
        assert 0.15 * g.max_power_w <= g.idle_power_w <= 0.3 * g.max_power_w
        # Driver-visible memory: the spec sheet's GB read as GiB, less a small reservation.
        assert 0.9 * float(row["hbm_gb"]) * 2**30 <= g.mem_bytes <= float(row["hbm_gb"]) * 2**30
        if row["interconnect_gbps_bidir"]:
            assert g.interconnect_bw == float(row["interconnect_gbps_bidir"]) / 2 * 1e9
        assert g.usd_per_hour > 0
