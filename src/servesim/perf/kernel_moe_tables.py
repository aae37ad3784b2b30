"""Which measured fused-MoE table times a layer's shape, and how a table is carried to it
(``perf.kernel_moe``'s order, steps 2-4, and its Marlin tables).

A table measured at another ``moe_tp`` or on the GPU's sibling is scaled by the roofline
ratio of the two shardings or GPUs (``nearest_curve``); a GPU whose own table times a path
vLLM does not serve takes another GPU's served table times the measured ratio of the two
GPUs on the same kernel (``transferred_curve``); a kernel that is the same in every vLLM
version takes the nearest version's table (``other_version_curve``); 4-bit weight-only
experts run by Marlin take vLLM 0.14.0's ``int4_wo`` tables (``marlin_curve``). Tables that
do not time the kernel vLLM serves with are skipped (``unserved_reason``).
"""

from __future__ import annotations

from dataclasses import replace
from math import log

import numpy as np

from servesim.catalog.gpus import GpuSpec, get_gpu
from servesim.catalog.models import ModelSpec
from servesim.config.vllm_version import version_tuple
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import LogCurve, RoofFn
from servesim.perf.kernels import (
    DTYPES,
    GPU_TABLES,
    SIBLINGS,
    SM100_GPUS,
    KernelDatabase,
    kernel_versions,
    load_database,
)
from servesim.perf.moe_shapes import WEIGHT_ONLY, moe_roofline, rescaled, shape_distance, table_curve

#: (catalog GPU, expert dtype) -> why the packed table is not the kernel vLLM serves with.
UNSERVED: dict[tuple[str, str], str] = {
    (name, "w4a16_mxfp4"): "vLLM serves MXFP4 experts on SM100 with FlashInfer's TRTLLM-gen MoE; "
    "the table (slower than H200's) times another path"
    for name in SM100_GPUS
}
#: One catalog GPU per table folder: the GPUs whose served tables ``transferred_curve`` may carry
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
#: Expert dtypes whose tables time one kernel in every vLLM version (Triton's ``matmul_ogs``
#: for MXFP4 on Hopper, ``triton_kernels`` built into vLLM from 0.12.0): a version without
#: the table takes the nearest version's (``other_version_curve``).
SAME_KERNEL_ACROSS_VERSIONS = ("w4a16_mxfp4",)


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


def nearest_curve(
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


def transferred_curve(
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
    mine = nearest_curve(db, gpu, m, gpu, eff, moe_tp, ep, dtype, roof)
    if mine is None:
        return None
    for other in others:
        versions = kernel_versions(other)
        if db.version not in versions:
            continue
        ogpu = get_gpu(other)
        oroof = moe_roofline(m, ogpu, eff, moe_tp, ep, dtype)
        theirs = nearest_curve(load_database(other, db.version), ogpu, m, ogpu, eff, moe_tp, ep, dtype, oroof)
        if theirs is None:
            continue
        for v in sorted((v for v in versions if v != db.version), key=lambda v: version_gap(v, db.version)):
            odb = load_database(other, v)
            if unserved_reason(odb, m, ogpu, moe_tp, ep, dtype) is not None:
                continue
            served = nearest_curve(odb, ogpu, m, ogpu, eff, moe_tp, ep, dtype, oroof)
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


def other_version_curve(
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
    nearest ``db``'s that has one, carried as ``nearest_curve`` carries a table, for a kernel that
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
        for v in sorted(versions, key=lambda v: version_gap(v, db.version)):
            odb = load_database(name, v)
            if unserved_reason(odb, m, tgpu, moe_tp, ep, dtype) is not None:
                continue
            hit = nearest_curve(odb, tgpu, m, gpu, eff, moe_tp, ep, dtype, roof)
            if hit is not None:
                return hit[0], f"{hit[1]} of vLLM {v} (no {dtype} table at {db.version}: the same kernel)"
    return None


def version_gap(a: str, b: str) -> float:
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
    for version in sorted(versions, key=lambda v: version_gap(v, db.version)):
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
