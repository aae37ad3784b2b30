"""Work terms: the roofline's FLOPs, bytes and counts of measured quantities, vectorized.

Each measurement becomes a row of *work terms* (FLOPs and bytes per operator class, link
bytes, number of all-reduces and their ring hops, kernels, row passes, steps) computed once
with the same formulas as ``RooflinePerfModel`` (``_classes``, ``_work``); ``predict`` then
turns a parameter vector into seconds for every row with a few array operations, which is
what ``servesim.calibration.calibrate`` fits. A test checks that the terms reproduce
``RooflinePerfModel.batch_time`` exactly, refinements included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.base import BatchStats
from servesim.perf.operator_tables import OPERATOR_KERNELS, AllReduceTable, OperatorTable
from servesim.perf.roofline import (
    GEMMS_PER_LAYER,
    KERNELS_PER_LAYER,
    ROW_THREADS,
    SKINNY_TILE_M,
    Efficiencies,
    RooflinePerfModel,
    activation_dtype,
    gemm_shapes,
)

#: Roofline classes with a compute and a memory roof; "elementwise" and "sampling" are memory only.
CLASSES = ("proj", "mlp", "attn_prefill", "attn_decode", "lm_head", "elementwise", "sampling")
#: Operator classes of a profile that are GEMMs (their kernels pay ``gemm_kernel_overhead_s``).
GEMM_CLASSES = ("proj", "mlp")


@dataclass(slots=True)
class Terms:
    """Work of N measured quantities, one row each (see ``predict``).

    flops/bytes[c]: FLOPs and bytes of class c (per rank); peak[c]: the FLOP/s its compute
    roof uses; link_bytes: bytes over the GPU link (all-reduces, logits gather, pipeline);
    num_allreduce, num_allreduce_hops: all-reduces and their ring steps (for the latencies);
    num_kernels, num_gemm_kernels: kernels other than GEMMs, and GEMMs (per-kernel overheads);
    row_passes: 1024-element passes along token rows of the elementwise kernels (their
    latency floor, ``row_pass_s``); num_launch: iterations (launch overhead); num_steps:
    engine steps (CPU time); fixed_s: seconds no parameter scales (pipeline link latency).
    gemm_m, gemm_n[c], gemm_f[c], num_sms: for wave quantisation (``gemm_tile_*``), the
    tokens of each row, and per GEMM class c two columns, the N and the FLOPs per output
    element (2 K x layers) of its GEMMs (0: no shape known, the class keeps ``flops[c]``),
    and the GPU's SMs.
    """

    flops: dict[str, np.ndarray]
    bytes: dict[str, np.ndarray]
    peak: dict[str, np.ndarray]
    mem_bw: np.ndarray
    link_bw: np.ndarray
    link_bytes: np.ndarray
    num_allreduce: np.ndarray
    num_allreduce_hops: np.ndarray
    num_kernels: np.ndarray
    num_gemm_kernels: np.ndarray
    row_passes: np.ndarray
    num_launch: np.ndarray
    num_steps: np.ndarray
    fixed_s: np.ndarray
    gemm_m: np.ndarray
    gemm_n: dict[str, np.ndarray]
    gemm_f: dict[str, np.ndarray]
    num_sms: np.ndarray

    @staticmethod
    def concat(parts: Sequence[Terms]) -> Terms:
        """The rows of ``parts``, one after another (field by field, class by class)."""
        joined: dict[str, Any] = {}
        for f in fields(Terms):
            cols = [getattr(p, f.name) for p in parts]
            if isinstance(cols[0], dict):
                joined[f.name] = {c: np.concatenate([col[c] for col in cols]) for c in cols[0]}
            else:
                joined[f.name] = np.concatenate(cols)
        return Terms(**joined)

    def __len__(self) -> int:
        return len(self.mem_bw)


def _optional(e: Efficiencies | Mapping[str, float | None], name: str) -> float | None:
    """An efficiency by name: a field of ``Efficiencies``, or a key of a fit's trial point
    (a dict); None where unset (the per-class GEMM fields fall back to the linear ones)."""
    if isinstance(e, Efficiencies):
        value: float | None = getattr(e, name)
        return value
    return e.get(name)


def _eff(e: Efficiencies | Mapping[str, float | None], name: str) -> float:
    """An efficiency that has no fallback (see ``_optional``)."""
    value = _optional(e, name)
    if value is None:
        raise KeyError(f"efficiency {name!r} is unset")
    return value


def _eff_pair(e: Efficiencies | Mapping[str, float | None], cls: str) -> tuple[float, float]:
    if cls in ("proj", "mlp", "lm_head"):
        c, m = _optional(e, f"{cls}_compute"), _optional(e, f"{cls}_memory")
        return (_eff(e, "linear_compute") if c is None else c, _eff(e, "linear_memory") if m is None else m)
    if cls in ("elementwise", "sampling"):
        return 1.0, _eff(e, "elementwise_memory")
    return _eff(e, f"{cls}_compute"), _eff(e, f"{cls}_memory")


def predict(
    terms: Terms, eff: Efficiencies | Mapping[str, float | None], cpu_overhead_s: float = 0.0
) -> np.ndarray:
    """Seconds of every row of ``terms`` with these efficiencies (the roofline, vectorized)."""

    def get(name: str) -> float:
        return _eff(eff, name)

    total = terms.fixed_s.copy()
    blend = get("roof_blend")
    tm, tn = get("gemm_tile_m"), get("gemm_tile_n")
    for c in CLASSES:
        ec, em = _eff_pair(eff, c)
        mem = terms.bytes[c] / (terms.mem_bw * em)
        if c == "elementwise":
            total += roof(terms.row_passes * get("row_pass_s"), mem, blend)
        elif c == "sampling":
            total += mem
        else:
            flops = terms.flops[c]
            if tm and tn and c in GEMM_CLASSES:
                flops = tiled_flops(terms, c, tm, tn)
            total += roof(flops / (terms.peak[c] * ec), mem, blend)
    total += terms.link_bytes / (terms.link_bw * get("comm"))
    total += terms.num_allreduce * get("allreduce_latency_s")
    total += terms.num_allreduce_hops * get("allreduce_hop_s")
    k, gk = get("kernel_overhead_s"), _optional(eff, "gemm_kernel_overhead_s")
    total += terms.num_kernels * k + terms.num_gemm_kernels * (k if gk is None else gk)
    total += terms.num_launch * get("launch_overhead_s")
    return total + terms.num_steps * cpu_overhead_s


def tiled_flops(terms: Terms, cls: str, tile_m: float, tile_n: float) -> np.ndarray:
    """FLOPs of GEMM class ``cls`` with wave quantisation (``roofline.tiled_area``, vectorized);
    rows without GEMM shapes or SM count keep their ideal FLOPs."""
    m, sms = terms.gemm_m[:, None], terms.num_sms[:, None]
    tm = np.where((m <= SKINNY_TILE_M) & (tile_m > SKINNY_TILE_M), SKINNY_TILE_M, tile_m)
    safe = np.maximum(sms, 1)
    waves = np.ceil(np.ceil(m / tm) * np.ceil(terms.gemm_n[cls] / tile_n) / safe)
    area = np.where(m > 0, waves * safe * tm * tile_n, 0.0)
    tiled = np.sum(terms.gemm_f[cls] * area, axis=1)
    known = (terms.gemm_f[cls][:, 0] > 0) & (terms.num_sms > 0)
    return np.where(known, tiled, terms.flops[cls])


def _gemm_rows(
    model: ModelSpec, tp: int, tokens: np.ndarray, layers: float, classes: Sequence[str] = GEMM_CLASSES
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """gemm_n and gemm_f of rows of ``tokens`` (see ``Terms``) for ``classes``; others empty."""
    n = len(tokens)
    shapes = gemm_shapes(model, tp)
    gn, gf = _no_gemms(n)
    for c in classes:
        for j, (out, k) in enumerate(shapes[c]):
            gn[c][:, j] = out
            gf[c][:, j] = np.where(tokens > 0, 2.0 * k * layers, 0.0)
    return gn, gf


def _no_gemms(n: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    return {c: np.zeros((n, 2)) for c in GEMM_CLASSES}, {c: np.zeros((n, 2)) for c in GEMM_CLASSES}


def roof(compute_s: np.ndarray, memory_s: np.ndarray, blend: float) -> np.ndarray:
    """``roofline.roof`` on arrays: max for ``blend`` 0, else the p-norm with p = 1/blend."""
    hi = np.maximum(compute_s, memory_s)
    if not blend:
        return hi
    lo = np.minimum(compute_s, memory_s)
    ratio = np.divide(lo, hi, out=np.zeros_like(hi), where=hi > 0)
    return hi * (1.0 + ratio ** (1.0 / blend)) ** blend


def _empty(n: int) -> dict[str, np.ndarray]:
    return {c: np.zeros(n) for c in CLASSES}


def _terms(n: int, gpu: GpuSpec, peak: dict[str, np.ndarray], **given: Any) -> Terms:
    """``Terms`` of ``n`` rows measured on ``gpu`` with compute roofs ``peak``, built by name:
    the fields ``given``, the GPU's memory and link bandwidths, and for every other field no
    work (zeros, no GEMM shapes)."""
    gemm_n, gemm_f = _no_gemms(n)
    named: dict[str, Any] = {
        "flops": _empty(n),
        "bytes": _empty(n),
        "peak": peak,
        "mem_bw": np.full(n, gpu.mem_bw),
        "link_bw": np.full(n, gpu.interconnect_bw),
        "gemm_n": gemm_n,
        "gemm_f": gemm_f,
    }
    for f in fields(Terms):
        if f.name not in named:
            named[f.name] = np.zeros(n)
    named.update(given)
    return Terms(**named)


def iteration_terms(
    model: ModelSpec,
    gpu: GpuSpec,
    stats: Sequence[BatchStats],
    tp: int = 1,
    pp: int = 1,
    kv_dtype_bytes: float | None = None,
    engine_steps: bool = False,
) -> Terms:
    """Work terms of whole iterations (``RooflinePerfModel.batch_time`` of each ``stats``).

    ``engine_steps``: the measured time includes the engine's CPU time per step.
    """
    pm = RooflinePerfModel(model, gpu, tp=tp, pp=pp, kv_dtype_bytes=kv_dtype_bytes)
    n = len(stats)
    flops, nbytes, peak = _empty(n), _empty(n), _empty(n)
    peak_lin, peak_act = pm.peak_flops()
    for c in CLASSES:
        peak[c][:] = peak_lin if c in ("proj", "mlp") else peak_act
    link_bytes, n_ar, nonzero = np.zeros(n), np.zeros(n), np.zeros(n)
    L, H, ba = model.num_layers, model.hidden_size, model.activation_dtype_bytes
    tokens = np.array([float(s.num_tokens) for s in stats])
    gemm_n, gemm_f = _gemm_rows(model, tp, tokens, L)
    ring = 2.0 * (tp - 1) / tp
    for i, s in enumerate(stats):
        t, r = s.num_tokens, s.num_reqs
        if t == 0:
            continue
        nonzero[i] = 1.0
        for c, (f, b) in pm._classes(s).items():
            flops[c][i], nbytes[c][i] = f, b
        link_bytes[i] = ((2 * L * ring * H * ba if tp > 1 else 0.0) + (pp - 1) * 2 * H * ba) * t
        link_bytes[i] += (tp - 1) / tp * model.vocab_size * ba * r
        n_ar[i] = (2 * L + 1) if tp > 1 else 0
    return _terms(
        n,
        gpu,
        peak,
        flops=flops,
        bytes=nbytes,
        link_bytes=link_bytes,
        num_allreduce=n_ar,
        num_allreduce_hops=n_ar * 2 * (tp - 1),
        num_kernels=nonzero * (KERNELS_PER_LAYER - GEMMS_PER_LAYER) * L,
        num_gemm_kernels=nonzero * GEMMS_PER_LAYER * L,
        row_passes=nonzero * pm._work["el_rows"],
        num_launch=nonzero.copy(),
        num_steps=nonzero.copy() if engine_steps else np.zeros(n),
        fixed_s=nonzero * (pp - 1) * gpu.interconnect_latency_s,
        gemm_m=tokens,
        gemm_n=gemm_n,
        gemm_f=gemm_f,
        num_sms=np.full(n, float(gpu.num_sms)),
    )


def operator_terms(table: OperatorTable, gpu: GpuSpec, cls: str) -> Terms:
    """Work terms of one operator class of one layer over the table's token counts."""
    tokens = table.num_tokens
    n = len(tokens)
    flops, nbytes, peak = _empty(n), _empty(n), _empty(n)
    pm = RooflinePerfModel(table.shape, gpu, tp=table.tp)
    layer_rows = pm._work["el_rows"] - table.shape.hidden_size / ROW_THREADS  # without the final norm
    for i, t in enumerate(tokens):
        f, b = pm._classes(BatchStats(num_prefill_tokens=int(t), num_prefill_reqs=1))[cls]
        flops[cls][i], nbytes[cls][i] = f, b
        if cls == "elementwise":  # the roofline's class also holds the embedding and final norm
            nbytes[cls][i] -= 6 * table.shape.hidden_size * table.shape.activation_dtype_bytes * t
    for c in CLASSES:
        peak[c][:] = gpu.flops_for(activation_dtype(table.shape))
    gemm_n, gemm_f = _gemm_rows(
        table.shape,
        table.tp,
        tokens.astype(float),
        table.shape.num_layers,
        [cls] if cls in GEMM_CLASSES else [],
    )
    return _terms(
        n,
        gpu,
        peak,
        flops=flops,
        bytes=nbytes,
        num_kernels=np.full(n, 0.0 if cls in GEMM_CLASSES else float(OPERATOR_KERNELS[cls])),
        num_gemm_kernels=np.full(n, float(OPERATOR_KERNELS[cls]) if cls in GEMM_CLASSES else 0.0),
        row_passes=np.full(n, layer_rows if cls == "elementwise" else 0.0),
        gemm_m=tokens.astype(float),
        gemm_n=gemm_n,
        gemm_f=gemm_f,
        num_sms=np.full(n, float(gpu.num_sms)),
    )


def attention_terms(table: OperatorTable, gpu: GpuSpec) -> Terms:
    """Work terms of one layer's attention kernel over the table's attention rows."""
    assert table.attention is not None
    stats = table.attention.stats()
    n = len(stats)
    flops, nbytes, peak = _empty(n), _empty(n), _empty(n)
    pm = RooflinePerfModel(table.shape, gpu, tp=table.tp)
    for i, s in enumerate(stats):
        cls = "attn_prefill" if s.num_prefill_tokens else "attn_decode"
        flops[cls][i], nbytes[cls][i] = pm._classes(s)[cls]
    for c in CLASSES:
        peak[c][:] = gpu.flops_for(activation_dtype(table.shape))
    return _terms(n, gpu, peak, flops=flops, bytes=nbytes, num_kernels=np.ones(n))


def allreduce_terms(table: AllReduceTable, gpu: GpuSpec) -> Terms:
    """One ring all-reduce per row: 2 (n-1)/n x bytes over the link, plus one latency."""
    n = len(table.time_s)
    w = table.num_workers.astype(float)
    return _terms(
        n,
        gpu,
        {c: np.ones(n) for c in CLASSES},
        link_bytes=2 * (w - 1) / w * table.size_bytes,
        num_allreduce=np.ones(n),
        num_allreduce_hops=2 * (w - 1),
    )
