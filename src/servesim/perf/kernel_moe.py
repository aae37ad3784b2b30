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

Kernels no MoE table times are carried from one that does (``CARRIED``: FlashInfer's CUTLASS
MoE from the kernel of the same bytes and math), DeepGEMM's MoE from the dense block-FP8 GEMM
table of the same kernel at the rows vLLM's version makes it compute (``deep_gemm_curve``:
the worst-case padded rows at every step in vLLM 0.11.1-0.12, the touched experts' padded
rows from 0.13; Triton's table with padded rows where the GPU has no such GEMM table,
``padded_triton_curve``), and MXFP4 experts at a version without their table take the
nearest version's (``_other_version``); ``sources`` says so.

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

from collections.abc import Callable
from dataclasses import replace
from math import log

import numpy as np

from servesim.catalog.gpus import GpuSpec, get_gpu
from servesim.catalog.models import ModelSpec
from servesim.config.vllm_version import version_tuple
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.execution_path import DeepGemmRun, deep_gemm_run
from servesim.perf.kernel_moe_served import MARLIN_SERVED, served_curve
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
    roof_time,
)
from servesim.perf.moe_nearest import nearest_shape_curve
from servesim.perf.moe_shapes import (
    NO_PAD,
    SM100_MXFP4,
    WEIGHT_ONLY,
    moe_roofline,
    mxfp4_pad,
    padded_experts,
    rescaled,
    shape_distance,
    table_curve,
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
#: Token counts at which a weight-only table is compared with the 16-bit one (decode sizes).
DECODE_TOKENS = 64
#: Bytes per weight of the Marlin int4 MoE tables (AIConfigurator's collector: 4-bit weights
#: with one 16-bit scale per group of 128).
MARLIN_TABLE_WEIGHT_BYTES = (4 + 16 / 128) / 8
#: The ``int4_wo`` tables of vLLM versions below this one time ``fused_marlin_moe``.
MARLIN_TABLES_BEFORE = (0, 17, 0)


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
#: Expert dtypes whose tables time one kernel in every vLLM version (Triton's ``matmul_ogs``
#: for MXFP4 on Hopper, ``triton_kernels`` built into vLLM from 0.12.0): a version without
#: the table takes the nearest version's (``_other_version``).
SAME_KERNEL_ACROSS_VERSIONS = ("w4a16_mxfp4",)
#: DeepGEMM's grouped GEMM (``TritonOrDeepGemmExperts``) runs steps of at least this many tokens
#: (vLLM's ``_valid_deep_gemm``: M >= 128), each expert's rows padded to a multiple of it.
DEEP_GEMM_BLOCK = 128
#: How DeepGEMM runs where no engine says (``perf.execution_path.deep_gemm_run`` of the default
#: vLLM version on Hopper).
DEFAULT_DEEP_GEMM_RUN = deep_gemm_run(None, "H200")
#: ``engine.moe_backend`` -> the kernel vLLM serves block-FP8 experts with on SM100: FlashInfer's
#: TRTLLM-gen MoE, the first of the FP8 oracle's priority list there (its monolithic kernel,
#: routing inside). ``triton`` is not in it: Triton's ``fused_experts``, the packed tables'.
SM100_FP8_BLOCK = {"auto": "flashinfer_trtllm_fp8_block", "flashinfer_trtllm": "flashinfer_trtllm_fp8_block"}


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
        return table_curve(tokens, lat, roof), f"table moe {dtype} tp={moe_tp} ep={ep}"
    ref = moe_roofline(m, tgpu, eff, t_tp, ep, dtype)
    return (
        table_curve(tokens, rescaled(tokens, lat, roof, ref), roof),
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
    (``shape_distance``) is carried to the model's shape, sharding and weight bytes by the
    roofline ratio, its fixed latency kept (``rescaled``); ``roof`` is the model's roofline
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
        for h, i, k, e in sorted(shapes, key=lambda s: (shape_distance(own, s), s)):
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
                table_curve(tokens, rescaled(tokens, lat, roof, ref), roof),
                f"Marlin MoE: table moe int4_wo {h}x{i} top-{k} of {e} experts tp={t_tp} ep={ep} of vLLM "
                f"{version} (roofline-scaled to {', '.join(to)})",
            )
    return None


#: Seconds of one dense block-FP8 GEMM, (m x k) @ (k x n), at every m of an array: the served
#: block-FP8 GEMM table (``KernelLayerOps._gemm_table``), read as the linear layers read it.
GemmFn = Callable[[np.ndarray, int, int], np.ndarray]
#: The memory-bound kernels of DeepGEMM's MoE besides its two GEMMs (vLLM's ``DeepGemmExperts``,
#: ``fused_moe/deep_gemm_moe.py``): ``count_expert_num_tokens``, the two ``ep_scatter`` kernels
#: (``deepgemm_moe_permute``), the gated activation and ``ep_gather`` (the unpermute and sum).
DEEP_GEMM_MEM_KERNELS = 5


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


def deep_gemm_rows(
    ts: np.ndarray, model: ModelSpec, moe_tp: int, ep: int, run: DeepGemmRun
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows DeepGEMM computes, routed rows, touched experts) of one rank at ``ts`` tokens a
    step (``DeepGemmRun``): from vLLM 0.13 the touched experts' rows, each expert's padded to
    a multiple of 128 (the routed rows spread evenly over the touched experts: a
    simplification); before, every chunk's ``round_up(M x topk + local_experts x 127, 128)``,
    the routed rows of every rank counted (with EP the other ranks' pairs are unwritten rows
    too). ``moe_tp`` is unused by the row count, kept for the caller's symmetry."""
    del moe_tp
    m, b = model, float(DEEP_GEMM_BLOCK)
    experts, k = m.num_experts / ep, m.num_experts_per_tok
    pairs = ts * k / ep
    touched = np.maximum(experts * (1.0 - (1.0 - k / m.num_experts) ** ts), 1.0)
    if run.skips_padding:
        return touched * b * np.ceil(pairs / touched / b), pairs, touched
    c = float(run.chunk_tokens)
    full, rest = np.floor(ts / c), ts - np.floor(ts / c) * c

    def worst(tokens: np.ndarray | float) -> np.ndarray:
        return b * np.ceil((np.asarray(tokens) * k + experts * (b - 1.0)) / b)

    rows = full * worst(c) + np.where(rest > 0, worst(rest), 0.0)
    return rows, pairs, touched


def deep_gemm_curve(
    triton: LogCurve,
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    run: DeepGemmRun,
    gemm: GemmFn,
    mem_op_s: float = 0.0,
) -> LogCurve:
    """One MoE layer run by DeepGEMM's MoE (vLLM's ``DeepGemmExperts``: permute, grouped GEMM
    of the gate and up projections, gated activation, grouped GEMM of the down projection,
    unpermute and sum; ``fused_moe/deep_gemm_moe.py`` of vLLM 0.11-0.19) on the ``Triton``
    curve's token axis; steps DeepGEMM does not run (``run.every_step`` false, below 128
    tokens) keep the Triton curve.

    The grouped GEMM is timed from the dense block-FP8 GEMM table ``gemm`` (on Hopper vLLM
    0.19.0's, which times DeepGEMM's ``fp8_gemm_nt`` from 32 rows, ``W8A8BlockFp8LinearOp``)
    at the rows it computes (``deep_gemm_rows``). ``m_grouped_fp8_gemm_nt_contiguous`` runs
    the same SM90 kernel as ``fp8_gemm_nt`` tile for tile on the concatenated rows (each
    128-row block multiplies its own expert's weights: the layout's alignment, 128, is the
    kernel's M block), so its math at R rows is the dense GEMM's at R rows; what differs is
    that each touched expert's weights are read from HBM rather than one matrix from L2.
    The kernel's loads overlap its math (TMA pipeline), so a grouped GEMM takes the longer
    of the dense table's time at R rows and its own bytes (R x K FP8 activations, touched x
    N x K FP8 weights, R x N 16-bit outputs) at the HBM bandwidth (``linear_memory`` of
    it): at Qwen3-235B's TP 2 decode (16,384 rows, 82 experts touched) the table's 0.30 ms
    for the gate/up GEMM against 0.16 ms of bytes, the table. The activation, permute and
    unpermute kernels are
    memory-bound: their bytes (the permuted FP8 activations written, the gate/up output
    read and the activation written in 16 bits, the down output read and the step's output
    written in 16 bits) at the HBM bandwidth, plus ``mem_op_s`` each of
    ``DEEP_GEMM_MEM_KERNELS``. Simplified: the table's GEMM times the quantization of its
    own input, so the first GEMM's counts a quantization of R rows where vLLM quantizes the
    step's tokens before the permute; the tables' DeepGEMM build is vLLM 0.19's."""
    m = model
    ts = np.exp(triton.lx)
    rows, pairs, touched = deep_gemm_rows(ts, m, moe_tp, ep, run)
    h, n = m.hidden_size, m.moe_intermediate_size // moe_tp
    up = (2 if m.mlp_gated else 1) * n
    bw = gpu.mem_bw

    def grouped(n_out: int, k_in: int) -> np.ndarray:
        streamed = (rows * k_in + touched * n_out * k_in + rows * n_out * 2.0) / (bw * eff.linear_memory)
        return np.maximum(np.asarray(gemm(rows, n_out, k_in)), streamed)

    moved = ts * h + pairs * h + rows * up * 2.0 + rows * n * 2.0 + pairs * h * 2.0 + ts * h * 2.0
    t = grouped(up, h) + grouped(h, n) + moved / (bw * eff.linear_memory) + DEEP_GEMM_MEM_KERNELS * mem_op_s
    on = np.ones_like(ts, dtype=bool) if run.every_step else ts >= DEEP_GEMM_BLOCK
    return LogCurve(ts, np.where(on, np.log(t), triton.ly))


def padded_triton_curve(
    curve: LogCurve, model: ModelSpec, gpu: GpuSpec, eff: Efficiencies, moe_tp: int, ep: int
) -> LogCurve:
    """Triton's block-FP8 MoE curve carried to DeepGEMM's grouped GEMM where the GPU has no
    block-FP8 GEMM table to time it from (``deep_gemm_curve``): steps of at least
    ``DEEP_GEMM_BLOCK`` tokens take every touched expert's rows padded up to a multiple of
    128; the math grows by the padded over the real rows and the weights are read as before,
    so the curve is scaled there by the ratio of the two rooflines (the routed rows spread
    evenly over the touched experts: a simplification). Smaller steps run Triton's kernel,
    as the table."""
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
                    table_curve(base[0], rescaled(base[0], base[1], roof, ref), roof),
                    f"table moe bfloat16 tp={moe_tp} ep={ep} (roofline-scaled to {dtype} weights{skipped})",
                )
        carried = nearest_shape_curve(db, m, gpu, eff, moe_tp, ep, dtype, roof) if why is None else None
        if carried is not None:
            return carried
    return LogCurve(ts, np.log(roof(ts))), f"roofline (no fused-MoE table for this shape{skipped})"
