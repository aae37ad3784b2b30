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
   version), times the measured ratio of the two GPUs on the same kernel (``transferred_curve``);
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

Kernels no MoE table times are carried from one that does (``CARRIED``: FlashInfer's CUTLASS
MoE from the kernel of the same bytes and math), DeepGEMM's MoE from the dense block-FP8 GEMM
table of the same kernel at the rows vLLM's version makes it compute (``deep_gemm_curve``:
the worst-case padded rows at every step in vLLM 0.11.1-0.12, the touched experts' padded
rows from 0.13; Triton's table with padded rows where the GPU has no such GEMM table,
``padded_triton_curve``), and MXFP4 experts at a version without their table take the
nearest version's (``other_version_curve``); ``sources`` says so.

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

The tables' lookups and carrying are in ``perf.kernel_moe_tables``, DeepGEMM's MoE in
``perf.kernel_moe_deep_gemm``.
"""

from __future__ import annotations

import numpy as np

from servesim.catalog.gpus import GpuSpec, get_gpu
from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import MAX_TOKENS, LogCurve, RoofFn, extended_axis
from servesim.perf.kernel_moe_deep_gemm import (
    DEEP_GEMM_BLOCK,
    DEFAULT_DEEP_GEMM_RUN,
    GemmFn,
    deep_gemm_curve,
    padded_triton_curve,
)
from servesim.perf.kernel_moe_served import MARLIN_SERVED, served_curve
from servesim.perf.kernel_moe_tables import (
    SAME_KERNEL_ACROSS_VERSIONS,
    UNSERVED,
    marlin_curve,
    nearest_curve,
    other_version_curve,
    transferred_curve,
    unserved_reason,
)
from servesim.perf.kernels import SIBLINGS, KernelDatabase, kernel_versions, load_database
from servesim.perf.moe_backend import DeepGemmRun
from servesim.perf.moe_nearest import nearest_shape_curve
from servesim.perf.moe_shapes import (
    NO_PAD,
    SM100_MXFP4,
    WEIGHT_ONLY,
    moe_roofline,
    mxfp4_pad,
    padded_experts,
    rescaled,
    table_curve,
)

#: Kernels vLLM serves that no table times, -> what times them instead: the kernel of the same
#: weight bytes, activations and math (``flashinfer_cutlass``: FlashInfer's CUTLASS MoE, MXFP4 x
#: MXFP8 on SM100 as the TRTLLM-gen MXFP8 table, MXFP4 x BF16 on SM90 and FP8 as Triton's
#: tables; ``deep_gemm``, without a block-FP8 GEMM table: Triton's block-FP8 table with DeepGEMM's
#: padded rows, ``padded_triton_curve``).
CARRIED = {
    "flashinfer_cutlass": "FlashInfer CUTLASS MoE has no table: timed as the kernel of the same weight "
    "bytes, activations and math",
    "deep_gemm": "DeepGEMM MoE has no table: Triton's, with DeepGEMM's 128-row expert blocks from "
    "128 tokens a step",
}
#: ``engine.moe_backend`` -> the kernel vLLM serves block-FP8 experts with on SM100: FlashInfer's
#: TRTLLM-gen MoE, the first of the FP8 oracle's priority list there (its monolithic kernel,
#: routing inside). ``triton`` is not in it: Triton's ``fused_experts``, the packed tables'.
SM100_FP8_BLOCK = {"auto": "flashinfer_trtllm_fp8_block", "flashinfer_trtllm": "flashinfer_trtllm_fp8_block"}


def moe_curve(
    model: ModelSpec,
    gpu: GpuSpec,
    db: KernelDatabase | None,
    tp: int,
    ep: int,
    dtype: str | None,
    eff: Efficiencies,
    backend: str = "auto",
    deep_gemm: DeepGemmRun | None = None,
    gemm: GemmFn | None = None,
    mem_op_s: float = 0.0,
    gemm_source: str = "the block-FP8 GEMM table",
) -> tuple[LogCurve, str]:
    """``_moe_curve``, with the kernels no table times carried from the one that does
    (``CARRIED``), and ``sources`` saying so. DeepGEMM's MoE (``backend`` 'deep_gemm',
    block-FP8 experts) is timed from ``gemm``, the GPU's dense block-FP8 GEMM table, at the
    rows ``deep_gemm`` says vLLM computes (``deep_gemm_curve``; without ``gemm``, Triton's
    table with DeepGEMM's padded rows, ``padded_triton_curve``); ``gemm_source`` names it."""
    curve, where = _moe_curve(model, gpu, db, tp, ep, dtype, eff, backend)
    if backend == "deep_gemm" and dtype == "fp8_block":
        run = deep_gemm if deep_gemm is not None else DEFAULT_DEEP_GEMM_RUN
        if gemm is None:
            curve = padded_triton_curve(curve, model, gpu, eff, tp // ep, ep)
            return curve, f"{where}; {CARRIED[backend]}"
        curve = deep_gemm_curve(curve, model, gpu, eff, tp // ep, ep, run, gemm, mem_op_s)
        first = (
            "every step" if run.every_step else f"steps of {DEEP_GEMM_BLOCK} tokens or more ({where} below)"
        )
        rows = (
            "the touched experts' rows padded to 128"
            if run.skips_padding
            else "the worst-case M x topk + experts x 127 rows"
        )
        return curve, (
            f"DeepGEMM MoE at {first}: {gemm_source or 'the block-FP8 GEMM table'} at {rows}, "
            "the touched experts' weights streamed"
        )
    if backend == "flashinfer_cutlass":
        return curve, f"{where}; {CARRIED[backend]}"
    return curve, where


def _weight_bytes_scaled(
    db: KernelDatabase,
    m: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    dtype: str,
    roof: RoofFn,
    skipped: str,
) -> tuple[LogCurve, str] | None:
    """Weight-only experts: the 16-bit table of their shape, scaled by the roofline ratio of
    the weight bytes (its fixed latency kept); None where that shape has none."""
    base = db.moe(
        m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok, m.num_experts, moe_tp, ep, "bfloat16"
    )
    if base is None:
        return None
    ref = moe_roofline(m, gpu, eff, moe_tp, ep, "bfloat16", weight_bytes=2.0)
    return (
        table_curve(base[0], rescaled(base[0], base[1], roof, ref), roof),
        f"table moe bfloat16 tp={moe_tp} ep={ep} (roofline-scaled to {dtype} weights{skipped})",
    )


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
        found = None if why is not None else nearest_curve(db, gpu, m, gpu, eff, moe_tp, ep, dtype, roof)
        sib = SIBLINGS.get(gpu.name)
        if found is None and sib is not None and db.version in kernel_versions(sib):
            sdb, sgpu = load_database(sib, db.version), get_gpu(sib)
            if unserved_reason(sdb, m, sgpu, moe_tp, ep, dtype) is None:
                found = nearest_curve(sdb, sgpu, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is None and why is not None and (gpu.name, dtype) not in UNSERVED:
            found = transferred_curve(db, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is None and why is None and dtype in SAME_KERNEL_ACROSS_VERSIONS:
            found = other_version_curve(db, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is None and dtype in WEIGHT_ONLY:
            found = _weight_bytes_scaled(db, m, gpu, eff, moe_tp, ep, dtype, roof, skipped)
        if found is None and why is None:
            found = nearest_shape_curve(db, m, gpu, eff, moe_tp, ep, dtype, roof)
        if found is not None:
            return found
    return LogCurve(ts, np.log(roof(ts))), f"roofline (no fused-MoE table for this shape{skipped})"
