"""The fused-MoE operator of ``KernelPerfModel``: which measured table times it, and how.

One MoE layer on one rank (``moe_tp`` = TP / EP, ``moe_ep`` = EP) takes, in this order:

1. the table of exactly its shape and expert dtype;
2. the same shape and dtype measured at another ``moe_tp`` (the nearest, in log distance),
   scaled by the roofline ratio of the two shardings (the table's kernel efficiency at the
   wanted weight bytes and FLOPs); failing that (or where the GPU's own table is not
   used), the same lookup on the GPU's sibling (``SIBLINGS``: the same die with other
   HBM) where its table is used, scaled by the two GPUs' roofline ratio. Only the part of
   the measured time above the kernel's fixed latency scales: that latency (the table's
   time at its fewest tokens less its roof there: 76 us a layer for gpt-oss's MXFP4 MoE on
   H200, 12x the bytes' time at one token) is the kernel's launch-to-finish floor, which
   neither a narrower shard nor more bandwidth shortens;
3. where the GPU's own table is one vLLM does not serve (below) but times the same kernel
   as another GPU's table of that version: that other GPU's served table (another
   version), times the measured ratio of the two GPUs on the same kernel (``_transferred``);
4. for weight-only 4-bit experts (``int4_wo``, ``w4a16_mxfp4``): the 16-bit table of the
   same shape and sharding, scaled by the roofline ratio of 4-bit to 16-bit weights (the
   kernels do the same 16-bit math on a quarter of the weight bytes), its fixed latency
   kept as in 2;
5. the roofline: the experts the step's tokens touch read once at the experts' own weight
   bytes (4.25 bits for MXFP4, 4 for int4, ...), 16-bit math for weight-only schemes.

int4 experts, and MXFP4 ones with ``engine.moe_backend: marlin``, are timed first from the
Marlin tables (``marlin_curve``: vLLM 0.14.0's ``int4_wo`` tables, the only ones that time
``fused_marlin_moe``, carried from the nearest measured shape); without one on the GPU,
the order above. MXFP4 experts on Blackwell (B200's tables) are timed first from the table
of the kernel vLLM serves them with (``served_curve``: FlashInfer's TRTLLM-gen MoE, 16-bit
activations by default, MXFP8 ones with ``engine.moe_backend: flashinfer_mxfp4_mxfp8``;
AIConfigurator's vLLM 0.24.0 table, each row naming its kernel, carried from the nearest
measured shape). Block-FP8 experts on Blackwell are too (``SM100_FP8_BLOCK``: FlashInfer's
TRTLLM-gen MoE, the first backend of vLLM's FP8 MoE oracle on SM100; ``engine.moe_backend:
triton``, for servers that turn FlashInfer and DeepGEMM off, keeps the packed tables, which
time Triton's ``fused_experts``; docs/perf_model.md, "The served block-FP8 MoE of Blackwell").

Kernels no table times are carried from one that does (``CARRIED``: FlashInfer's CUTLASS
MoE from the kernel of the same bytes and math, DeepGEMM from Triton's block-FP8 table with
its 128-row expert blocks, ``deep_gemm_curve``), and MXFP4 experts at a version without
their table take the nearest version's (``_other_version``); ``sources`` says so.

Tables that do not time the kernel vLLM serves with are skipped (``unserved_reason``):

- a weight-only 4-bit table slower than the same GPU's 16-bit table of that shape at
  every measured decode token count (up to 64): it reads a quarter of the weight bytes
  for the same math, so a slower kernel is not the one a serving engine picks (vLLM
  0.19.0's ``vllm_marlin_int4_moe`` tables, which despite the name time vLLM's Triton
  ``fused_experts`` with an int4 W4A16 config, as AIConfigurator's collector for vLLM 0.17
  on runs it; the 0.14.0 tables time ``fused_marlin_moe``, 2-4x faster on the same GPU and
  shape, and pass);
- MXFP4 experts on B200 (``UNSERVED``): vLLM serves them on SM100 with FlashInfer's
  TRTLLM-gen MXFP4 x BF16 MoE (``Mxfp4Backend.SM100_FI_MXFP4_BF16``, the default since
  vLLM 0.10.2); the packed B200 table is slower than the H200 table of the same kernel
  and shape at every token count from 4 up, so it times another path (``served_curve``
  times the served kernel instead).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from importlib import resources
from math import log
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec, get_gpu
from servesim.catalog.models import ModelSpec
from servesim.config.engine import version_tuple
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernels import (
    DTYPES,
    GPU_TABLES,
    MAX_TOKENS,
    SIBLINGS,
    SM100_GPUS,
    KernelDatabase,
    LogCurve,
    RoofFn,
    extended_axis,
    kernel_versions,
    load_database,
    log_curve,
    roof_time,
    sm100_folder,
)

#: (catalog GPU, expert dtype) -> why the packed table is not the kernel vLLM serves with.
UNSERVED: dict[tuple[str, str], str] = {
    (name, "w4a16_mxfp4"): "vLLM serves MXFP4 experts on SM100 with FlashInfer's TRTLLM-gen MoE; "
    "the table (slower than H200's) times another path"
    for name in SM100_GPUS
}
#: One catalog GPU per table folder: the GPUs whose served tables ``_transferred`` may carry
#: to another GPU.
CANONICAL = tuple(
    name for i, (name, folder) in enumerate(GPU_TABLES.items()) if folder not in list(GPU_TABLES.values())[:i]
)
#: Weight-only expert dtypes (16-bit activations and math).
WEIGHT_ONLY = ("int4_wo", "w4a16_mxfp4")
#: Token counts at which a weight-only table is compared with the 16-bit one (decode sizes).
DECODE_TOKENS = 64
#: Bytes per weight of the Marlin int4 MoE tables (AIConfigurator's collector: 4-bit weights
#: with one 16-bit scale per group of 128).
MARLIN_TABLE_WEIGHT_BYTES = (4 + 16 / 128) / 8
#: The ``int4_wo`` tables of vLLM versions below this one time ``fused_marlin_moe``.
MARLIN_TABLES_BEFORE = (0, 17, 0)


#: Package data (``tools/pack_served_moe.py``): fused-MoE tables of kernels vLLM serves where
#: the packed tables time another, each row naming its kernel (AIConfigurator's vLLM 0.24.0
#: MoE table of B200, at the packed tables' source commit): the two TRTLLM-gen MXFP4 MoEs and
#: Marlin's int4 MoE (``MARLIN_SERVED``).
SERVED_FILE = "served_moe.json"
#: ``engine.moe_backend`` -> the kernel vLLM serves MXFP4 experts with on SM100
#: (``Mxfp4Backend``): FlashInfer's TRTLLM-gen MoE with 16-bit activations by default
#: (``SM100_FI_MXFP4_BF16``), with MXFP8 ones under ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``.
SM100_MXFP4 = {
    "auto": "flashinfer_trtllm_mxfp4_bf16",
    "flashinfer_trtllm": "flashinfer_trtllm_mxfp4_bf16",
    "flashinfer_mxfp4_mxfp8": "flashinfer_trtllm_mxfp4_mxfp8",
    "flashinfer_cutlass": "flashinfer_trtllm_mxfp4_mxfp8",
}
#: Kernels vLLM serves that no table times, -> what times them instead: the kernel of the same
#: weight bytes, activations and math (``flashinfer_cutlass``: FlashInfer's CUTLASS MoE, MXFP4 x
#: MXFP8 on SM100 as the TRTLLM-gen MXFP8 table, MXFP4 x BF16 on SM90 and FP8 as Triton's
#: tables; ``deep_gemm``: Triton's block-FP8 table with DeepGEMM's padded rows, ``deep_gemm_curve``).
CARRIED = {
    "flashinfer_cutlass": "FlashInfer CUTLASS MoE has no table: timed as the kernel of the same weight "
    "bytes, activations and math",
    "deep_gemm": "DeepGEMM MoE has no table: Triton's, with DeepGEMM's 128-row expert blocks from "
    "128 tokens a step",
}
#: Expert dtypes whose tables time one kernel in every vLLM version (Triton's ``matmul_ogs``
#: for MXFP4 on Hopper, ``triton_kernels`` built into vLLM from 0.12.0): a version without
#: the table takes the nearest version's (``_other_version``).
SAME_KERNEL_ACROSS_VERSIONS = ("w4a16_mxfp4",)
#: DeepGEMM's grouped GEMM (``TritonOrDeepGemmExperts``) runs steps of at least this many tokens
#: (vLLM's ``_valid_deep_gemm``: M >= 128), each expert's rows padded to a multiple of it.
DEEP_GEMM_BLOCK = 128
#: ``engine.moe_backend`` -> the kernel vLLM serves block-FP8 experts with on SM100: FlashInfer's
#: TRTLLM-gen MoE, the first of the FP8 oracle's priority list there (its monolithic kernel,
#: routing inside). ``triton`` is not in it: Triton's ``fused_experts``, the packed tables'.
SM100_FP8_BLOCK = {"auto": "flashinfer_trtllm_fp8_block", "flashinfer_trtllm": "flashinfer_trtllm_fp8_block"}
#: The math of each served kernel, the peak of its roofline (16-bit or FP8 tensor cores).
SERVED_MATH = {
    "flashinfer_trtllm_mxfp4_bf16": "w4a16_mxfp4",
    "flashinfer_trtllm_mxfp4_mxfp8": "fp8",
    "marlin_int4": "int4_wo",
    "flashinfer_trtllm_fp8_block": "fp8",
}
#: vLLM's Marlin MoE of int4 experts (``CompressedTensorsWNA16MarlinMoEMethod``,
#: ``fused_marlin_moe``) as the served table names it: B200's only Marlin measurement (its
#: ``int4_wo`` tables of vLLM 0.19.0 time Triton's W4A16 ``fused_experts``, ``marlin_curve``).
MARLIN_SERVED = "marlin_int4"
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


@cache
def _served() -> dict[tuple[str, str], dict[str, Any]]:
    raw = json.loads(resources.files("servesim").joinpath("data", "kernels", SERVED_FILE).read_text())
    return {(t["gpu"], t["kernel"]): t for t in raw["tables"]}


def served_curve(
    model: ModelSpec,
    gpu: GpuSpec,
    kernel: str,
    moe_tp: int,
    ep: int,
    eff: Efficiencies,
    pad: tuple[int, int] = NO_PAD,
) -> tuple[LogCurve, str] | None:
    """One MoE layer timed from the served kernel's own table (``SERVED_FILE``): the series
    of the shape nearest the model's (``_shape_distance``) and, in it, the nearest moe_tp at
    this EP size, carried to the model's shape and sharding by the roofline ratio of the
    kernel's math (``SERVED_MATH``) with its fixed latency kept (``_rescaled``), as
    ``marlin_curve`` carries Marlin's. Both rooflines are of the shapes the kernel computes
    on, padded to ``pad`` (``padded_experts``, ``mxfp4_pad``): the tables name the
    checkpoint's shape, and vLLM pads inside the layer they time. None where the GPU's
    tables have no such series.

    The tables are vLLM 0.24.0's measurements of the kernels; runs of earlier versions are
    timed from them too (the TRTLLM-gen MXFP4 MoE has been vLLM's SM100 kernel since 0.10.2,
    with older FlashInfer builds: a simplification)."""
    table = _served().get((sm100_folder(gpu.name), kernel))
    if table is None:
        return None
    series = [s for s in table["series"] if s["moe_ep"] == ep]
    if not series:
        return None
    own = (model.hidden_size, model.moe_intermediate_size, model.num_experts_per_tok, model.num_experts)
    best = min(
        series,
        key=lambda s: (_shape_distance(own, tuple(s["shape"])), abs(log(s["moe_tp"] / moe_tp)), s["moe_tp"]),
    )
    (h, i, k, e), t_tp = best["shape"], best["moe_tp"]
    math = SERVED_MATH[kernel]
    roof = moe_roofline(padded_experts(model, moe_tp, pad), gpu, eff, moe_tp, ep, math)
    tokens, lat = np.array(best["tokens"], dtype=float), np.array(best["latency_ms"], dtype=float)
    where = (
        f"table moe {kernel} {h}x{i} top-{k} of {e} experts tp={t_tp} ep={ep} of vLLM {table['vllm_version']}"
    )
    same = (h, i, k, e) == own
    if same and t_tp == moe_tp:
        return _curve(tokens, lat, roof), where
    proxy = replace(model, hidden_size=h, moe_intermediate_size=i, num_experts_per_tok=k, num_experts=e)
    ref = moe_roofline(padded_experts(proxy, t_tp, pad), gpu, eff, t_tp, ep, math)
    to = [*(() if same else ("this shape",)), *(() if t_tp == moe_tp else (f"tp={moe_tp}",))]
    return (
        _curve(tokens, _rescaled(tokens, lat, roof, ref), roof),
        f"{where} (roofline-scaled to {', '.join(to)})",
    )


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


def unserved_reason(
    db: KernelDatabase, model: ModelSpec, gpu: GpuSpec, moe_tp: int, ep: int, dtype: str
) -> str | None:
    """Why the table of ``dtype`` for this shape is not used (None: it is)."""
    if (gpu.name, dtype) in UNSERVED:
        return UNSERVED[(gpu.name, dtype)]
    if dtype not in WEIGHT_ONLY:
        return None
    m = model
    shape = (m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok, m.num_experts, moe_tp, ep)
    q, ref = db.moe(*shape, dtype), db.moe(*shape, "bfloat16")
    if q is None or ref is None:
        return None
    small = q[0] <= DECODE_TOKENS
    with np.errstate(invalid="ignore"):
        slower = q[1][small] > ref[1][small]
    ok = np.isfinite(q[1][small]) & np.isfinite(ref[1][small])
    if ok.any() and bool(slower[ok].all()):
        return f"slower than the 16-bit table at every decode size up to {DECODE_TOKENS} tokens"
    return None


def _nearest(
    db: KernelDatabase,
    tgpu: GpuSpec,
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    dtype: str,
    roof: RoofFn,
) -> tuple[LogCurve, str] | None:
    """The table of ``db`` (measured on ``tgpu``) at this shape and the nearest moe_tp,
    scaled by the roofline ratio of this GPU and sharding to the table's."""
    m = model
    hit = db.moe_nearest(
        m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok, m.num_experts, moe_tp, ep, dtype
    )
    if hit is None:
        return None
    tokens, lat, t_tp = hit
    where = "" if tgpu.name == gpu.name else f" of {tgpu.name}"
    if t_tp == moe_tp and not where:
        return _curve(tokens, lat, roof), f"table moe {dtype} tp={moe_tp} ep={ep}"
    ref = moe_roofline(m, tgpu, eff, t_tp, ep, dtype)
    return (
        _curve(tokens, _rescaled(tokens, lat, roof, ref), roof),
        f"table moe {dtype} tp={t_tp} ep={ep}{where} (roofline-scaled to {gpu.name} tp={moe_tp})",
    )


def _transferred(
    db: KernelDatabase,
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    dtype: str,
    roof: RoofFn,
) -> tuple[LogCurve, str] | None:
    """Another GPU's served table of this shape and dtype (at the vLLM version nearest
    ``db``'s where that GPU's table passes ``unserved_reason``), times the measured ratio
    of this GPU to that one for the same kernel at ``db``'s version, token count by token
    count: ``log t = log t_other,served + log t_this,v - log t_other,v``.

    It is for a kernel this GPU's own tables time, but only at a version whose collector
    timed a path vLLM does not serve (0.19.0's ``vllm_marlin_int4_moe``: Triton's int4
    W4A16 ``fused_experts``, slower than the 16-bit table everywhere). The ratio of the two
    GPUs on that same kernel is a measured figure and the roofline's bandwidth ratio is
    not: that kernel on B200 takes 0.78-0.96x the H200's time at every token count (the
    roofline says 0.6x). Simplified: the ratio of the Triton kernel stands for that of the
    served one."""
    m = model
    here = GPU_TABLES.get(gpu.name)
    others = sorted(
        {name for name, folder in GPU_TABLES.items() if folder != here and name in CANONICAL},
        key=lambda name: abs(log(get_gpu(name).mem_bw / gpu.mem_bw)),
    )
    mine = _nearest(db, gpu, m, gpu, eff, moe_tp, ep, dtype, roof)
    if mine is None:
        return None
    for other in others:
        versions = kernel_versions(other)
        if db.version not in versions:
            continue
        ogpu = get_gpu(other)
        oroof = moe_roofline(m, ogpu, eff, moe_tp, ep, dtype)
        theirs = _nearest(load_database(other, db.version), ogpu, m, ogpu, eff, moe_tp, ep, dtype, oroof)
        if theirs is None:
            continue
        for v in sorted((v for v in versions if v != db.version), key=lambda v: _version_gap(v, db.version)):
            odb = load_database(other, v)
            if unserved_reason(odb, m, ogpu, moe_tp, ep, dtype) is not None:
                continue
            served = _nearest(odb, ogpu, m, ogpu, eff, moe_tp, ep, dtype, oroof)
            if served is None:
                continue
            xs = np.exp(served[0].lx)
            ly = served[0].ly + np.log(mine[0].at_many(xs)) - np.log(theirs[0].at_many(xs))
            return (
                LogCurve(xs, ly),
                f"table moe {dtype} tp={moe_tp} ep={ep} of {other} {v}, times the measured "
                f"{gpu.name}/{other} ratio of the same kernel at {db.version}",
            )
    return None


def _other_version(
    db: KernelDatabase,
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    dtype: str,
    roof: RoofFn,
) -> tuple[LogCurve, str] | None:
    """This GPU's (else its sibling's) table of this shape and dtype at the vLLM version
    nearest ``db``'s that has one, carried as ``_nearest`` carries a table, for a kernel that
    is the same in every version (``SAME_KERNEL_ACROSS_VERSIONS``): the MXFP4 tables time
    Triton's ``matmul_ogs`` (``triton_kernels``), which only vLLM 0.19.0's Hopper tables
    measure at gpt-oss's shape; without this a run at vLLM 0.12-0.18 (0.14.0 tables) took
    the roofline. Simplified: the ``triton_kernels`` build differs between versions."""
    m = model
    for name in (gpu.name, SIBLINGS.get(gpu.name)):
        if name is None:
            continue
        tgpu = get_gpu(name)
        versions = [v for v in kernel_versions(name) if v != db.version]
        for v in sorted(versions, key=lambda v: _version_gap(v, db.version)):
            odb = load_database(name, v)
            if unserved_reason(odb, m, tgpu, moe_tp, ep, dtype) is not None:
                continue
            hit = _nearest(odb, tgpu, m, gpu, eff, moe_tp, ep, dtype, roof)
            if hit is not None:
                return hit[0], f"{hit[1]} of vLLM {v} (no {dtype} table at {db.version}: the same kernel)"
    return None


def _version_gap(a: str, b: str) -> float:
    """Distance of two vLLM versions (major.minor.patch as one number)."""

    def num(v: str) -> float:
        t = (*version_tuple(v), 0, 0)
        return t[0] * 1e6 + t[1] * 1e3 + t[2]

    return abs(num(a) - num(b))


def _shape_distance(own: tuple[int, int, int, int], shape: tuple[int, int, int, int]) -> float:
    """How far a table's (hidden, width, top-k, experts) is from the model's ``own``: log
    ratios of the expert's weights, the top-k and the expert count, summed."""
    (h, i, k, e), (oh, oi, ok, oe) = shape, own
    return abs(log(h * i / (oh * oi))) + abs(log(k / ok)) + abs(log(e / oe))


def marlin_curve(
    model: ModelSpec, gpu: GpuSpec, db: KernelDatabase, moe_tp: int, ep: int, eff: Efficiencies, roof: RoofFn
) -> tuple[LogCurve, str] | None:
    """4-bit weight-only experts run by vLLM's Marlin MoE (int4 experts; MXFP4 ones with
    ``engine.moe_backend: marlin``).

    vLLM's ``fused_marlin_moe`` is one kernel for the 4-bit weight types it takes (int4 with
    group scales, MXFP4 with e8m0 scales): the weights dequantized to 16 bits in registers,
    16-bit tensor-core math. MXFP4 experts on Hopper run it with ``VLLM_MXFP4_USE_MARLIN=1``
    (by default vLLM 0.10-0.19 run them with Triton's ``matmul_ogs``, the kernel the
    ``w4a16_mxfp4`` tables time). Of the ``int4_wo`` tables only those of vLLM before 0.17
    (``MARLIN_TABLES_BEFORE``) time Marlin: AIConfigurator's first MoE collector ran
    ``fused_marlin_moe`` (GPTQ weights repacked, groups of 128); its second (vLLM 0.17 on)
    runs vLLM's Triton ``fused_experts`` with an int4 W4A16 config under the same kernel
    name, 2-4x slower at decode sizes. The table of the shape nearest the model's
    (``_shape_distance``) is carried to the model's shape, sharding and weight bytes by the
    roofline ratio, its fixed latency kept (``_rescaled``); ``roof`` is the model's roofline
    (``moe_curve`` gives MXFP4 experts that of their padded shape, ``mxfp4_pad``).
    None where this GPU has none."""
    code = DTYPES.index("int4_wo")
    own = (model.hidden_size, model.moe_intermediate_size, model.num_experts_per_tok, model.num_experts)
    versions = [v for v in kernel_versions(gpu.name) if version_tuple(v) < MARLIN_TABLES_BEFORE]
    for version in sorted(versions, key=lambda v: _version_gap(v, db.version)):
        vdb = load_database(gpu.name, version)
        keys = vdb.arrays.get("moe.keys")
        if keys is None:
            continue
        shapes = {(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in keys if r[6] == code and r[5] == ep}
        for h, i, k, e in sorted(shapes, key=lambda s: (_shape_distance(own, s), s)):
            hit = vdb.moe_nearest(h, i, k, e, moe_tp, ep, "int4_wo")
            if hit is None:
                continue
            tokens, lat, t_tp = hit
            proxy = replace(
                model, hidden_size=h, moe_intermediate_size=i, num_experts_per_tok=k, num_experts=e
            )
            ref = moe_roofline(proxy, gpu, eff, t_tp, ep, "int4_wo", weight_bytes=MARLIN_TABLE_WEIGHT_BYTES)
            to = [
                *(() if (h, i, k, e) == own else ("this shape",)),
                *(() if t_tp == moe_tp else (f"tp={moe_tp}",)),
                "its weight bytes",
            ]
            return (
                _curve(tokens, _rescaled(tokens, lat, roof, ref), roof),
                f"Marlin MoE: table moe int4_wo {h}x{i} top-{k} of {e} experts tp={t_tp} ep={ep} of vLLM "
                f"{version} (roofline-scaled to {', '.join(to)})",
            )
    return None


def moe_curve(
    model: ModelSpec,
    gpu: GpuSpec,
    db: KernelDatabase | None,
    tp: int,
    ep: int,
    dtype: str | None,
    eff: Efficiencies,
    backend: str = "auto",
) -> tuple[LogCurve, str]:
    """``_moe_curve``, with the kernels no table times carried from the one that does
    (``CARRIED``), and ``sources`` saying so."""
    curve, where = _moe_curve(model, gpu, db, tp, ep, dtype, eff, backend)
    if backend == "deep_gemm" and dtype == "fp8_block":
        curve = deep_gemm_curve(curve, model, gpu, eff, tp // ep, ep)
        return curve, f"{where}; {CARRIED[backend]}"
    if backend == "flashinfer_cutlass":
        return curve, f"{where}; {CARRIED[backend]}"
    return curve, where


def deep_gemm_curve(
    curve: LogCurve, model: ModelSpec, gpu: GpuSpec, eff: Efficiencies, moe_tp: int, ep: int
) -> LogCurve:
    """Triton's block-FP8 MoE curve carried to DeepGEMM's grouped GEMM (vLLM's
    ``TritonOrDeepGemmExperts``, block-FP8 on SM90/SM100 before the FP8 MoE oracle): steps of
    at least ``DEEP_GEMM_BLOCK`` tokens run DeepGEMM on the contiguous layout, every touched
    expert's rows padded up to a multiple of 128 (``deep_gemm_moe_permute``); the math grows
    by the padded over the real rows and the weights are read as before, so the curve is
    scaled there by the ratio of the two rooflines (the routed rows spread evenly over the
    touched experts: a simplification). Smaller steps run Triton's kernel, as the table."""
    m = model
    E, k = m.num_experts / ep, m.num_experts_per_tok
    per_expert = m.expert_params(moe_tp)
    peak = gpu.flops_for("fp8")
    ts = np.exp(curve.lx)
    pairs = ts * k / ep
    touched = np.maximum(E * (1.0 - (1.0 - k / m.num_experts) ** ts), 1.0)
    padded = touched * DEEP_GEMM_BLOCK * np.ceil(pairs / touched / DEEP_GEMM_BLOCK)
    nbytes = per_expert * m.expert_weight_bytes * touched + pairs * m.hidden_size * 2.0 * 4
    real = roof_time(
        2.0 * per_expert * pairs, nbytes, peak, gpu.mem_bw, eff.linear_compute, eff.linear_memory
    )
    pad = roof_time(
        2.0 * per_expert * padded, nbytes, peak, gpu.mem_bw, eff.linear_compute, eff.linear_memory
    )
    scale = np.where(ts >= DEEP_GEMM_BLOCK, pad / real, 1.0)
    return LogCurve(ts, curve.ly + np.log(scale))


def _moe_curve(
    model: ModelSpec,
    gpu: GpuSpec,
    db: KernelDatabase | None,
    tp: int,
    ep: int,
    dtype: str | None,
    eff: Efficiencies,
    backend: str = "auto",
) -> tuple[LogCurve, str]:
    """Seconds of one MoE layer vs tokens T of the step, and where it comes from.

    int4 weight-only experts (GPTQ, AWQ, compressed-tensors W4A16) take ``marlin_curve``
    first: vLLM runs them with its Marlin MoE wherever Marlin supports the layer
    (``GPTQMarlinMoEMethod``, ``CompressedTensorsWNA16MarlinMoEMethod``; Triton's W4A16
    ``fused_experts`` is the fallback); where the GPU's packed tables have no Marlin
    measurement (B200), its served table's (``MARLIN_SERVED``). MXFP4 experts do with
    ``backend`` 'marlin' (``engine.moe_backend``, 'auto' resolved by ``perf.execution_path``:
    vLLM's default for them on Hopper is Marlin through 0.11 and Triton's ``matmul_ogs``
    from 0.12)."""
    m, moe_tp = model, tp // ep
    roof = moe_roofline(m, gpu, eff, moe_tp, ep, dtype)
    pad = mxfp4_pad(gpu, backend) if dtype == "w4a16_mxfp4" else NO_PAD  # the kernels' expert shape
    ts = extended_axis(np.array([1.0]), 1.0, MAX_TOKENS)
    skipped = ""
    if db is not None and (dtype == "int4_wo" or (dtype in WEIGHT_ONLY and backend == "marlin")):
        mroof = (
            roof
            if pad == NO_PAD
            else moe_roofline(padded_experts(m, moe_tp, pad), gpu, eff, moe_tp, ep, dtype)
        )
        hit = marlin_curve(m, gpu, db, moe_tp, ep, eff, mroof)
        if hit is None and dtype == "int4_wo":
            hit = served_curve(m, gpu, MARLIN_SERVED, moe_tp, ep, eff)
            hit = None if hit is None else (hit[0], f"Marlin MoE: {hit[1]}")
        if hit is not None:
            return hit
        skipped = "; no Marlin MoE table on this GPU"
    if db is not None and dtype == "w4a16_mxfp4" and backend in SM100_MXFP4:
        hit = served_curve(m, gpu, SM100_MXFP4[backend], moe_tp, ep, eff, pad)
        if hit is not None:
            return hit
    if db is not None and dtype == "fp8_block" and backend in SM100_FP8_BLOCK:
        hit = served_curve(m, gpu, SM100_FP8_BLOCK[backend], moe_tp, ep, eff)  # None off Blackwell
        if hit is not None:
            return hit
    if db is not None and dtype is not None:
        why = unserved_reason(db, m, gpu, moe_tp, ep, dtype)
        if why is not None:
            skipped += f"; {dtype} table not used: {why}"
        found = None if why is not None else _nearest(db, gpu, m, gpu, eff, moe_tp, ep, dtype, roof)
        sib = SIBLINGS.get(gpu.name)
        if found is None and sib is not None and db.version in kernel_versions(sib):
            sdb, sgpu = load_database(sib, db.version), get_gpu(sib)
            if unserved_reason(sdb, m, sgpu, moe_tp, ep, dtype) is None:
                found = _nearest(sdb, sgpu, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is None and why is not None and (gpu.name, dtype) not in UNSERVED:
            found = _transferred(db, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is None and why is None and dtype in SAME_KERNEL_ACROSS_VERSIONS:
            found = _other_version(db, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is not None:
            return found
        if dtype in WEIGHT_ONLY:
            base = db.moe(
                m.hidden_size,
                m.moe_intermediate_size,
                m.num_experts_per_tok,
                m.num_experts,
                moe_tp,
                ep,
                "bfloat16",
            )
            if base is not None:
                ref = moe_roofline(m, gpu, eff, moe_tp, ep, "bfloat16", weight_bytes=2.0)
                return (
                    _curve(base[0], _rescaled(base[0], base[1], roof, ref), roof),
                    f"table moe bfloat16 tp={moe_tp} ep={ep} (roofline-scaled to {dtype} weights{skipped})",
                )
    return LogCurve(ts, np.log(roof(ts))), f"roofline (no fused-MoE table for this shape{skipped})"


def _rescaled(tokens: np.ndarray, lat_ms: np.ndarray, roof: RoofFn, ref: RoofFn) -> np.ndarray:
    """A table measured where ``ref`` is the roofline, carried to where ``roof`` is: the
    kernel's fixed latency (its time at the fewest tokens over its roof there) kept, the
    rest scaled by the roofline ratio (milliseconds, as the table)."""
    tf = tokens.astype(float)
    fixed = max(0.0, float(lat_ms[0]) * 1e-3 - float(ref(tf[:1])[0]))
    return lat_ms * (roof(tf) + fixed) / (ref(tf) + fixed)


def _curve(tokens: np.ndarray, lat_ms: np.ndarray, roof: RoofFn) -> LogCurve:
    ts = extended_axis(tokens, 1.0, MAX_TOKENS)
    return LogCurve(ts, log_curve(tokens.astype(float), lat_ms, ts, roof) + log(1e-3))
