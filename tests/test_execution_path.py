"""vLLM's default execution path (``perf.execution_path``): for a grid of (version, GPU,
weight format) the kernel is the one vLLM's selection code picks at that release tag, read
in the tag's source distribution; the id of each case names the file and the tag. The
environment variables switch it, and the summary, console and report name it."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
from pydantic import ValidationError
from rich.console import Console

import servesim
from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.catalog.models import ModelSpec
from servesim.config.engine import EngineConfig
from servesim.config.hardware import ParallelConfig
from servesim.metrics.console import print_summary
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.execution_path import ExecutionPath, execution_path, moe_backend_for
from servesim.perf.kernel_curves import LogCurve, roof_time
from servesim.perf.kernel_moe_deep_gemm import DEEP_GEMM_BLOCK, padded_triton_curve
from servesim.perf.memory import served_weights_bytes
from servesim.report.tables import run_rows

OSS = "openai/gpt-oss-120b"
QWEN_FP8 = "Qwen/Qwen3-235B-A22B-FP8"  # block-FP8 (128 x 128 weight blocks)
KIMI = "moonshotai/Kimi-K2.5"  # int4 experts
DSV3 = "deepseek-ai/DeepSeek-V3"  # block-FP8 and MLA


def _model(name: str) -> ModelSpec:
    return load_model(name)


def _per_tensor_fp8() -> ModelSpec:
    """Qwen3-235B with per-tensor FP8 scales (no weight blocks)."""
    return dataclasses.replace(_model(QWEN_FP8), quant_method="fp8")


def _path(
    model: ModelSpec, gpu: str, version: str, tp: int = 4, ep: int = 1, env: dict[str, str] | None = None
) -> ExecutionPath:
    return execution_path(model, get_gpu(gpu), EngineConfig(version=version, vllm_env=env or {}), tp, ep)


# (model, GPU, version, TP, EP, vLLM's kernel) with the file and tag whose code picks it.
MOE_GRID = [
    # MXFP4 experts: quantization/mxfp4.py get_mxfp4_backend
    pytest.param(
        OSS, "H100-SXM", "0.10.2", 2, 1, "marlin", id="mxfp4.py@v0.10.2 H100: no triton_kernels -> Marlin"
    ),
    pytest.param(
        OSS, "H100-SXM", "0.11.0", 2, 1, "marlin", id="mxfp4.py@v0.11.0 H100: no triton_kernels -> Marlin"
    ),
    pytest.param(
        OSS,
        "H200",
        "0.12.0",
        8,
        1,
        "triton_kernels_matmul_ogs",
        id="mxfp4.py@v0.12.0 H200: built-in triton_kernels",
    ),
    pytest.param(
        OSS,
        "H100-SXM",
        "0.18.0",
        2,
        1,
        "triton_kernels_matmul_ogs",
        id="mxfp4.py@v0.18.0 H100: triton_kernels",
    ),
    pytest.param(
        OSS,
        "H200",
        "0.19.0",
        4,
        1,
        "triton_kernels_matmul_ogs",
        id="oracle/mxfp4.py@v0.19.0 H200: TRITON before FLASHINFER_CUTLASS_MXFP4_BF16",
    ),
    pytest.param(
        OSS, "B200", "0.11.0", 1, 1, "flashinfer_trtllm", id="mxfp4.py@v0.11.0 B200: SM100_FI_MXFP4_BF16"
    ),
    pytest.param(
        OSS, "B300", "0.11.0", 1, 1, "marlin", id="mxfp4.py@v0.11.0 B300: SM 10.3 is not 10.0 -> Marlin"
    ),
    pytest.param(
        OSS, "B300", "0.12.0", 1, 1, "triton_kernels_matmul_ogs", id="mxfp4.py@v0.12.0 B300: 10.3 in 9.0-10.x"
    ),
    pytest.param(OSS, "B300", "0.13.0", 1, 1, "flashinfer_trtllm", id="mxfp4.py@v0.13.0 B300: SM100 family"),
    pytest.param(OSS, "A100-80GB", "0.19.0", 2, 1, "marlin", id="oracle/mxfp4.py@v0.19.0 A100: MARLIN"),
    pytest.param(
        OSS, "L40S", "0.12.0", 2, 1, "marlin", id="mxfp4.py@v0.12.0 L40S: triton_kernels needs SM90"
    ),
    # Block-FP8 experts: quantization/fp8.py (through v0.13), fused_moe/oracle/fp8.py (v0.14 on)
    pytest.param(
        QWEN_FP8, "H100-SXM", "0.10.2", 4, 1, "triton_fused_experts", id="fp8.py@v0.10.2 H100: DeepGEMM off"
    ),
    pytest.param(
        QWEN_FP8,
        "B200",
        "0.10.2",
        4,
        1,
        "vllm_cutlass_block_grouped_gemm",
        id="fp8.py@v0.10.2 B200: CutlassBlockScaledGroupedGemm",
    ),
    pytest.param(
        QWEN_FP8, "H100-SXM", "0.11.0", 2, 1, "deep_gemm", id="fp8.py@v0.11.0 H100 TP2: VLLM_USE_DEEP_GEMM=1"
    ),
    pytest.param(
        QWEN_FP8,
        "H200",
        "0.11.0",
        4,
        1,
        "triton_fused_experts",
        id="fused_moe.py@v0.11.0 H200 TP4: no E8M0 on SM90, _valid_deep_gemm N=384 <= 512 -> Triton",
    ),
    pytest.param(
        QWEN_FP8,
        "B200",
        "0.11.0",
        4,
        1,
        "deep_gemm",
        id="fused_moe.py@v0.11.0 B200 TP4: E8M0 on SM100 -> DeepGEMM at any N",
    ),
    pytest.param(
        QWEN_FP8,
        "H200",
        "0.11.2",
        4,
        1,
        "deep_gemm",
        id="deep_gemm.py@v0.11.2 H200 TP4: E8M0 on SM90 by default -> DeepGEMM at any N",
    ),
    pytest.param(QWEN_FP8, "H200", "0.12.0", 4, 1, "deep_gemm", id="fp8.py@v0.12.0 H200 TP4: DEEPGEMM"),
    pytest.param(
        QWEN_FP8,
        "H200",
        "0.12.0",
        8,
        1,
        "triton_fused_experts",
        id="fp8.py@v0.12.0 H200 TP8: DeepGEMM off at TP>=8",
    ),
    pytest.param(
        QWEN_FP8,
        "B200",
        "0.12.0",
        8,
        1,
        "vllm_cutlass_block_grouped_gemm",
        id="fp8.py@v0.12.0 B200 TP8: CUTLASS_BLOCK_SCALED_GROUPED_GEMM",
    ),
    pytest.param(
        QWEN_FP8, "H200", "0.14.0", 2, 1, "deep_gemm", id="oracle/fp8.py@v0.14.0 H200 TP2: DEEPGEMM"
    ),
    pytest.param(
        QWEN_FP8, "B200", "0.14.0", 8, 1, "triton_fused_experts", id="oracle/fp8.py@v0.14.0 B200 TP8: TRITON"
    ),
    pytest.param(
        QWEN_FP8,
        "H200",
        "0.16.0",
        4,
        1,
        "flashinfer_cutlass",
        id="oracle/fp8.py@v0.16.0 H200: FLASHINFER_CUTLASS takes SM90 block-FP8",
    ),
    pytest.param(
        QWEN_FP8,
        "B200",
        "0.16.0",
        4,
        1,
        "flashinfer_trtllm",
        id="oracle/fp8.py@v0.16.0 B200: FLASHINFER_TRTLLM",
    ),
    pytest.param(
        QWEN_FP8,
        "H200",
        "0.17.0",
        4,
        1,
        "triton_fused_experts",
        id="oracle/fp8.py@v0.17.0 H200 TP: TRITON first",
    ),
    pytest.param(
        QWEN_FP8,
        "H200",
        "0.18.0",
        8,
        8,
        "flashinfer_cutlass",
        id="oracle/fp8.py@v0.18.0 H200 EP: FLASHINFER_CUTLASS first",
    ),
    pytest.param(QWEN_FP8, "B200", "0.19.0", 2, 1, "flashinfer_trtllm", id="oracle/fp8.py@v0.19.0 B200"),
    pytest.param(
        QWEN_FP8, "A100-80GB", "0.19.0", 8, 1, "marlin", id="oracle/fp8.py@v0.19.0 A100: below SM89"
    ),
    # int4 experts: quantization/compressed_tensors/compressed_tensors_moe.py (Marlin)
    pytest.param(
        KIMI, "H200", "0.16.0", 8, 1, "marlin", id="compressed_tensors_moe.py@v0.16.0 H200: WNA16 Marlin"
    ),
]


@pytest.mark.parametrize(("name", "gpu", "version", "tp", "ep", "kernel"), MOE_GRID)
def test_the_moe_kernel_is_the_one_vllm_selects_at_the_tag(
    name: str, gpu: str, version: str, tp: int, ep: int, kernel: str
) -> None:
    p = _path(_model(name), gpu, version, tp, ep)
    assert p.moe is not None and p.moe.value == kernel and p.moe.reason


@pytest.mark.parametrize(
    ("gpu", "version", "kernel"),
    [
        pytest.param(
            "H100-SXM", "0.12.0", "triton_fused_experts", id="fp8.py@v0.12.0 H100: per-tensor -> TRITON"
        ),
        pytest.param(
            "H100-SXM",
            "0.16.0",
            "flashinfer_cutlass",
            id="oracle/fp8.py@v0.16.0 H100: FlashInferExperts takes per-tensor FP8 on 9.0+",
        ),
        pytest.param("L40S", "0.16.0", "triton_fused_experts", id="oracle/fp8.py@v0.16.0 L40S: TRITON"),
        pytest.param(
            "B200", "0.18.0", "flashinfer_trtllm", id="oracle/fp8.py@v0.18.0 B200: FLASHINFER_TRTLLM"
        ),
    ],
)
def test_per_tensor_fp8_experts(gpu: str, version: str, kernel: str) -> None:
    p = _path(_per_tensor_fp8(), gpu, version)
    assert p.weight_format == "fp8" and p.moe.value == kernel


@pytest.mark.parametrize(
    ("name", "gpu", "version", "backend"),
    [
        pytest.param(OSS, "B200", "0.11.0", "flashinfer", id="cuda.py@v0.11.0 B200: FlashInfer on SM 10.0"),
        pytest.param(QWEN_FP8, "B300", "0.11.0", "flash_attn2", id="cuda.py@v0.11.0 B300: 10.3 is not 10.0"),
        pytest.param(
            OSS, "B300", "0.11.0", "triton_attn", id="cuda.py@v0.11.0 B300: sinks off SM90 -> Triton"
        ),
        pytest.param(OSS, "B300", "0.12.0", "flashinfer", id="cuda.py@v0.12.0 B300: major == 10"),
        pytest.param(OSS, "H100-SXM", "0.19.0", "flash_attn3", id="cuda.py@v0.19.0 H100: FLASH_ATTN (FA3)"),
        pytest.param(OSS, "A100-80GB", "0.11.0", "triton_attn", id="cuda.py@v0.11.0 A100: sinks -> Triton"),
        pytest.param(
            QWEN_FP8, "A100-80GB", "0.19.0", "flash_attn2", id="cuda.py@v0.19.0 A100: FLASH_ATTN (FA2)"
        ),
        pytest.param(DSV3, "B200", "0.14.0", "cutlass_mla", id="cuda.py@v0.14.0 B200 MLA: CUTLASS_MLA first"),
        pytest.param(
            DSV3, "B200", "0.16.0", "flashinfer_mla", id="cuda.py@v0.16.0 B200 MLA: FLASHINFER_MLA first"
        ),
        pytest.param(DSV3, "H200", "0.11.0", "flashmla", id="cuda.py@v0.11.0 H200 MLA: FlashMLA"),
        pytest.param(
            DSV3, "H200", "0.12.0", "flash_attn_mla", id="cuda.py@v0.12.0 H200 MLA: FLASH_ATTN_MLA first"
        ),
        pytest.param(DSV3, "A100-80GB", "0.19.0", "triton_mla", id="cuda.py@v0.19.0 A100 MLA: TRITON_MLA"),
    ],
)
def test_the_attention_backend_is_the_one_vllm_selects(
    name: str, gpu: str, version: str, backend: str
) -> None:
    assert _path(_model(name), gpu, version).attention.value == backend


def test_async_scheduling_and_graphs_follow_the_version() -> None:
    m = _model(OSS)
    assert _path(m, "H100-SXM", "0.13.0").async_scheduling.value == "off"
    assert _path(m, "H100-SXM", "0.14.0").async_scheduling.value == "on"
    assert _path(m, "H100-SXM", "0.10.2").cuda_graphs.value == "piecewise"
    assert _path(m, "H100-SXM", "0.11.0").cuda_graphs.value == "full_and_piecewise"


def test_async_scheduling_with_pipeline_stages_is_reported_as_not_modelled() -> None:
    # vLLM 0.15+ runs async scheduling with pp > 1 (0.14 does not); servesim's batch queue runs
    # such a pipeline synchronously, and the report says so rather than "on".
    m, gpu = _model(OSS), get_gpu("H100-SXM")
    on = execution_path(m, gpu, EngineConfig(version="0.19.0"), 4, 1, 2).async_scheduling
    assert on.value.startswith("on in vLLM, not modelled") and "engine/batch_queue.py" in on.reason
    assert execution_path(m, gpu, EngineConfig(version="0.14.0"), 4, 1, 2).async_scheduling.value == "off"
    assert execution_path(m, gpu, EngineConfig(version="0.19.0"), 4, 1, 1).async_scheduling.value == "on"


@pytest.mark.parametrize(
    ("name", "gpu", "version", "tp", "env", "kernel"),
    [
        pytest.param(OSS, "H100-SXM", "0.13.0", 2, {"VLLM_MXFP4_USE_MARLIN": "1"}, "marlin", id="marlin env"),
        pytest.param(
            OSS,
            "H100-SXM",
            "0.12.0",
            2,
            {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": "1"},
            "flashinfer_cutlass",
            id="SM90 FI",
        ),
        pytest.param(
            OSS,
            "B200",
            "0.19.0",
            1,
            {"VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": "1"},
            "flashinfer_trtllm_mxfp8",
            id="mxfp8",
        ),
        pytest.param(
            QWEN_FP8, "H200", "0.12.0", 8, {"VLLM_MOE_USE_DEEP_GEMM": "1"}, "deep_gemm", id="DeepGEMM at TP8"
        ),
        pytest.param(
            QWEN_FP8, "H200", "0.12.0", 4, {"VLLM_USE_DEEP_GEMM": "0"}, "triton_fused_experts", id="no DG"
        ),
        pytest.param(
            QWEN_FP8, "H200", "0.16.0", 4, {"VLLM_USE_FLASHINFER_MOE_FP8": "0"}, "deep_gemm", id="no FI"
        ),
        pytest.param(
            QWEN_FP8,
            "B200",
            "0.19.0",
            4,
            {"VLLM_USE_FLASHINFER_MOE_FP8": "0", "VLLM_MOE_USE_DEEP_GEMM": "0"},
            "triton_fused_experts",
            id="no FI, no DG",
        ),
    ],
)
def test_environment_variables_switch_the_kernel(
    name: str, gpu: str, version: str, tp: int, env: dict[str, str], kernel: str
) -> None:
    p = _path(_model(name), gpu, version, tp, 1, env)
    assert p.moe.value == kernel
    assert any(k in p.moe.reason for k in env) or kernel != _path(_model(name), gpu, version, tp).moe.value


def test_the_attention_env_var_and_a_set_moe_backend_override_the_default() -> None:
    m, gpu = _model(OSS), get_gpu("H100-SXM")
    p = execution_path(
        m, gpu, EngineConfig(version="0.12.0", vllm_env={"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"})
    )
    assert p.attention.value == "triton_attn"
    p = execution_path(m, gpu, EngineConfig(version="0.12.0", moe_backend="marlin"))
    assert p.moe is not None and p.moe.value == "marlin" and p.moe.reason == "engine.moe_backend set"


def test_an_unknown_environment_variable_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="VLLM_NOT_A_VAR not modelled"):
        EngineConfig(vllm_env={"VLLM_NOT_A_VAR": "1"})


def test_auto_resolves_to_the_kernel_and_pads_the_experts_for_it() -> None:
    """gpt-oss-120b at TP 8 on H100: vLLM 0.11 runs Marlin, which pads the hidden size 2880 to
    3072 (n % 256); 0.12's Triton matmul_ogs pads only a rank's intermediate 360 to 384 (64),
    as Marlin does (128): the experts grow by 3072 / 2880."""
    m, gpu = _model(OSS), get_gpu("H100-SXM")
    par = ParallelConfig(tensor_parallel_size=8)
    old, new = EngineConfig(version="0.11.0"), EngineConfig(version="0.12.0")
    assert moe_backend_for(m, gpu, old, 8, 1) == "marlin" and moe_backend_for(m, gpu, new, 8, 1) == "triton"
    w_marlin, w_triton = (served_weights_bytes(m, gpu, e, par) for e in (old, new))
    experts = m.routed_expert_bytes(8, 1, 1) * 384 / 360  # Triton's padded experts
    assert math.isclose(w_marlin - w_triton, experts * (3072 / 2880 - 1), rel_tol=1e-9)


def test_deep_gemm_without_a_gemm_table_pads_triton_expert_rows_from_128_tokens() -> None:
    """Where the GPU has no block-FP8 GEMM table (``padded_triton_curve``), DeepGEMM's grouped
    GEMM is Triton's curve with each touched expert's rows padded to 128 from 128 tokens:
    Qwen3-235B (top-8 of 128) at TP 4 on H200, 128 tokens route 1,024 rows to ~128 experts
    (8 each), run as 128 rows each: 16x the math of the real rows."""
    m, gpu, eff = _model(QWEN_FP8), get_gpu("H200"), Efficiencies()
    ts = np.array([1.0, 64.0, 127.0, 128.0, 4096.0])
    flat = LogCurve(ts, np.log(np.full(ts.size, 1e-3)))
    dg = np.exp(padded_triton_curve(flat, m, gpu, eff, 4, 1).ly)
    assert np.allclose(dg[:3], 1e-3)
    per_expert = m.expert_params(4)
    touched = 128 * (1 - (1 - 8 / 128) ** 128)
    pairs = 128 * 8
    padded = touched * DEEP_GEMM_BLOCK * math.ceil(pairs / touched / DEEP_GEMM_BLOCK)
    assert math.isclose(padded / pairs, touched * 128 / 1024, rel_tol=1e-12)
    nbytes = per_expert * m.expert_weight_bytes * touched + pairs * m.hidden_size * 8
    args = (gpu.flops_for("fp8"), gpu.mem_bw, eff.linear_compute, eff.linear_memory)
    want = roof_time(2 * per_expert * padded, nbytes, *args) / roof_time(
        2 * per_expert * pairs, nbytes, *args
    )
    assert math.isclose(dg[3] / 1e-3, float(want), rel_tol=1e-9) and dg[3] > 1e-3


SMALL = {
    "type": "synthetic",
    "num_requests": 6,
    "arrival": {"rate": 5},
    "prompt_len": {"kind": "constant", "value": 64},
    "output_len": {"kind": "constant", "value": 4},
}


def test_the_summary_console_and_report_name_the_path() -> None:
    r = servesim.simulate(
        {
            "model": {"name": OSS},
            "hardware": {"gpu": "H100-SXM"},
            "parallel": {"tensor_parallel_size": 2},
            "engine": {"version": "0.11.0"},
            "workload": SMALL,
        }
    )
    (p,) = r.summary["vllm_execution_path"]
    assert p["moe"]["value"] == "marlin" and p["moe"]["moe_backend"] == "marlin"
    assert "quantization/mxfp4.py" in p["moe"]["reason"] and p["attention"]["value"] == "flash_attn3"
    out = io.StringIO()
    print_summary(r, Console(file=out, width=300))
    assert "vLLM 0.11.0 path on H100-SXM: MoE marlin, attention flash_attn3" in out.getvalue()
    assert any(k == "vLLM path" and "MoE marlin" in v for k, v in run_rows(r.summary))


def test_every_kernel_maps_to_a_moe_backend_the_config_takes() -> None:
    """``SERVESIM_BACKEND`` (vLLM's kernel -> what times it) names only values of the
    ``engine.moe_backend`` Literal, each of which the config accepts."""
    from typing import get_args

    from servesim.perf.execution_path import SERVESIM_BACKEND

    allowed = set(get_args(EngineConfig.model_fields["moe_backend"].annotation))
    assert set(SERVESIM_BACKEND.values()) <= allowed
    for value in allowed:
        assert EngineConfig(moe_backend=value).moe_backend == value


def test_the_environment_is_a_mapping_kept_hashable() -> None:
    """A scenario writes ``vllm_env`` as a mapping (YAML numbers allowed); it is kept as
    sorted string pairs, so the engine config stays hashable and round-trips."""
    e = EngineConfig(vllm_env={"VLLM_USE_DEEP_GEMM": 0, "VLLM_MXFP4_USE_MARLIN": "1"})
    assert e.vllm_env == (("VLLM_MXFP4_USE_MARLIN", "1"), ("VLLM_USE_DEEP_GEMM", "0"))
    assert hash(e) == hash(EngineConfig.model_validate(e.model_dump()))
    with pytest.raises(ValidationError, match="expected a mapping"):
        EngineConfig(vllm_env="VLLM_USE_DEEP_GEMM=0")
