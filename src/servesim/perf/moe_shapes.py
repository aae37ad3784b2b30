"""The fused-MoE layer as the kernels compute it (``perf.kernel_moe``): the experts' dtype,
the padding vLLM gives MXFP4 experts by backend (the kernel model and the memory plan read
it), the layer's roofline, and a measured table carried from one shape or GPU's roofline to
another with its fixed latency kept.
"""

from __future__ import annotations

from dataclasses import replace
from math import log

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import MAX_TOKENS, LogCurve, RoofFn, extended_axis, log_curve, roof_time
from servesim.perf.kernels import SM100_GPUS

#: Weight-only expert dtypes (16-bit activations and math).
WEIGHT_ONLY = ("int4_wo", "w4a16_mxfp4")


#: ``engine.moe_backend`` -> the kernel vLLM serves MXFP4 experts with on SM100
#: (``Mxfp4Backend``): FlashInfer's TRTLLM-gen MoE with 16-bit activations by default
#: (``SM100_FI_MXFP4_BF16``), with MXFP8 ones under ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``.
SM100_MXFP4 = {
    "auto": "flashinfer_trtllm_mxfp4_bf16",
    "flashinfer_trtllm": "flashinfer_trtllm_mxfp4_bf16",
    "flashinfer_mxfp4_mxfp8": "flashinfer_trtllm_mxfp4_mxfp8",
    "flashinfer_cutlass": "flashinfer_trtllm_mxfp4_mxfp8",
}


#: MXFP4 experts run on padded weights: vLLM's ``Mxfp4MoEMethod.create_weights`` (0.10.2 on)
#: rounds the hidden size and each rank's intermediate size up to multiples of, by backend,
#: (256, 256) for SM100_FI_MXFP4_MXFP8_TRTLLM and SM100_FI_MXFP4_BF16 (the TRTLLM-gen MoE of
#: Blackwell), (256, 128) for MARLIN (its kernel needs n % 256 and k % 128) and (1, 64) for
#: the rest (Triton's ``matmul_ogs``, Hopper's default). gpt-oss: hidden 2880 -> 3072 on the
#: first two; a TP-8 rank's intermediate 360 -> 512, 384 and 384.
SERVED_PAD = (256, 256)


MARLIN_MXFP4_PAD = (256, 128)


CUTLASS_MXFP4_PAD = (128, 128)


TRITON_MXFP4_PAD = (1, 64)


NO_PAD = (1, 1)


def mxfp4_pad(gpu: GpuSpec, backend: str) -> tuple[int, int]:
    """The (hidden, per-rank intermediate) alignment vLLM pads MXFP4 experts to on ``gpu``
    with ``engine.moe_backend`` ``backend`` (see ``SERVED_PAD``); the kernel model and the
    memory plan both read it."""
    if backend == "marlin":
        return MARLIN_MXFP4_PAD
    if backend == "flashinfer_cutlass":  # SM100_FI_MXFP4_MXFP8_CUTLASS and SM90_FI_MXFP4_BF16
        return CUTLASS_MXFP4_PAD
    if gpu.name in SM100_GPUS and backend in SM100_MXFP4:
        return SERVED_PAD
    return TRITON_MXFP4_PAD


def padded_experts(model: ModelSpec, moe_tp: int, pad: tuple[int, int]) -> ModelSpec:
    """``model`` with the expert shape the kernel computes on: hidden and per-rank
    intermediate sizes rounded up to ``pad`` (the intermediate size given back as the sum
    over ``moe_tp`` ranks, as ``ModelSpec`` holds it)."""

    def up(x: int, to: int) -> int:
        return -(-x // to) * to

    return replace(
        model,
        hidden_size=up(model.hidden_size, pad[0]),
        moe_intermediate_size=up(-(-model.moe_intermediate_size // moe_tp), pad[1]) * moe_tp,
    )


def has_mxfp4_experts(model: ModelSpec) -> bool:
    """Whether the routed experts are MXFP4 (``moe_dtype`` 'w4a16_mxfp4')."""
    return model.is_moe and moe_dtype(model, None) == "w4a16_mxfp4"


def moe_dtype(model: ModelSpec, gemm_dtype: str | None) -> str | None:
    """The fused-MoE table of the routed experts: their own scheme (MXFP4, int4 weight-only)
    where it differs from the rest, else the linear layers' GEMM dtype."""
    if model.expert_dtype_bytes:
        method = model.quant_method.lower()
        if "mxfp4" in method:
            return "w4a16_mxfp4"
        if "int4" in method or "w4a16" in method:
            return "int4_wo"
        if "nvfp4" in method:  # NVFP4 experts beside 16-bit attention (NVIDIA's MoE checkpoints)
            return "nvfp4"
    return gemm_dtype


def moe_roofline(
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    dtype: str | None,
    weight_bytes: float | None = None,
) -> RoofFn:
    """Seconds of one MoE layer vs tokens (vectorized): the touched experts' weights once,
    the token copies' activations in and out, 2 FLOPs per weight per token copy."""
    m = model
    E, k = m.num_experts / ep, m.num_experts_per_tok
    wb = m.expert_weight_bytes if weight_bytes is None else weight_bytes
    per_expert = m.expert_params(moe_tp)
    peak = gpu.flops_for("bfloat16" if dtype in WEIGHT_ONLY or wb >= 2 or dtype is None else "fp8")

    def roof(t: np.ndarray) -> np.ndarray:
        pairs = t * k / ep
        touched = E * (1.0 - (1.0 - k / m.num_experts) ** t)
        return roof_time(
            2.0 * per_expert * pairs,
            per_expert * wb * touched + pairs * m.hidden_size * 2.0 * 4,
            peak,
            gpu.mem_bw,
            eff.linear_compute,
            eff.linear_memory,
        )

    return roof


def shape_distance(own: tuple[int, int, int, int], shape: tuple[int, int, int, int]) -> float:
    """How far a table's (hidden, width, top-k, experts) is from the model's ``own``: log
    ratios of the expert's weights, the top-k and the expert count, summed."""
    (h, i, k, e), (oh, oi, ok, oe) = shape, own
    return abs(log(h * i / (oh * oi))) + abs(log(k / ok)) + abs(log(e / oe))


def rescaled(tokens: np.ndarray, lat_ms: np.ndarray, roof: RoofFn, ref: RoofFn) -> np.ndarray:
    """A table measured where ``ref`` is the roofline, carried to where ``roof`` is: the
    kernel's fixed latency (its time at the fewest tokens over its roof there) kept, the
    rest scaled by the roofline ratio (milliseconds, as the table)."""
    tf = tokens.astype(float)
    fixed = max(0.0, float(lat_ms[0]) * 1e-3 - float(ref(tf[:1])[0]))
    return lat_ms * (roof(tf) + fixed) / (ref(tf) + fixed)


def table_curve(tokens: np.ndarray, lat_ms: np.ndarray, roof: RoofFn) -> LogCurve:
    ts = extended_axis(tokens, 1.0, MAX_TOKENS)
    return LogCurve(ts, log_curve(tokens.astype(float), lat_ms, ts, roof) + log(1e-3))
