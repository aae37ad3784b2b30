"""The attention operators of ``KernelPerfModel``: prefill ('ctx') and decode ('gen') grids.

Each grid holds the log seconds of all layers' attention on one TP rank over (batch,
length), from the attention tables of ``perf.kernels`` or, without a table, the roofline.
Where the model's shape class (heads, KV heads) is not measured, the nearest class is
carried to it: the table's smallest latency is the kernel's fixed time (launch, the
split-KV reduction, the tail), kept as it is, and only the part above it is scaled by the
ratio of the two shapes' rooflines. (Scaling the whole latency multiplied the fixed time
too: a 7B without GQA, 32 KV heads carried from the 8-KV-head class, was charged 1.7 ms
for one 900-token decode, twelve times its KV bytes at HBM bandwidth.) Two layer kinds:

- **full-attention layers** attend to the whole context;
- **sliding-window layers** (gpt-oss's alternating ``sliding_attention`` layers, window
  ``W`` = 128): FlashAttention skips the key blocks outside the window and vLLM's
  sliding-window KV manager frees them, so a decode reads at most ``W`` keys: the
  window class of the table where one is measured (``window_size`` = W), else the
  full-attention grid at length min(s, W). A causal prefill of ``s`` > W tokens covers
  s W - W^2/2 (query, key) pairs instead of s^2/2: the full grid at length W times
  (2 s / W - 1). gpt-oss's attention sinks (one learned logit per head added to the
  softmax denominator) cost one extra term per row and are not priced.

Multi-head latent attention (DeepSeek-V3, Kimi-K2): vLLM's MLA decode backends (FlashMLA
on Hopper, CUTLASS / FlashInfer MLA on Blackwell) absorb the key and value
up-projections, so a decode step reads each token's cached latent once
(``kv_lora_rank + qk_rope_head_dim`` elements, shared by all heads) and does
``attn_flops_per_pair(decode=True)`` per key. No MLA table is measured: the decode is
priced from the GQA decode table class of head_dim 128 whose KV bytes per token are
nearest the latent's (2 x KV heads x 128 elements), at this rank's heads, scaled by the
roofline ratio of the latent's bytes and FLOPs to the class's, i.e. at the measured
bandwidth efficiency (and latency floor) of the decode kernel at each (batch, length).
The padding of heads to the kernel's tile (64 or 128 on these backends) is not modelled.
MLA prefill (multi-head attention at head_dim 192, no GQA class) is timed from the measured
MLA attention module where its shape is the model's (``perf.kernel_mla``), else here by the
roofline.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import log

import numpy as np

from servesim.catalog.gpus import GpuSpec, get_gpu
from servesim.catalog.models import ModelSpec
from servesim.config.vllm_version import version_tuple
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import ext_grid, extended_axis, roof_time
from servesim.perf.kernels import DTYPES, SIBLINGS, KernelDatabase, kernel_versions, load_database

#: (log batch axis, length axis, log seconds [batch, length]) of all layers.
Grid = tuple[np.ndarray, np.ndarray, np.ndarray]
Roof3 = Callable[[np.ndarray, np.ndarray, float, float], np.ndarray]
#: The head size of the GQA decode class MLA's latent read is priced from.
MLA_PROXY_HEAD_DIM = 128
#: How far the grids' batch and length axes are extended beyond the measurements.
MAX_BATCH, MAX_LENGTH = float(1 << 16), float(1 << 22)


def gqa_roof(prefix: str, gpu: GpuSpec, eff: Efficiencies, kvb: float, hd: int) -> Roof3:
    """Roofline seconds of one layer's attention at (batch, length, heads, KV heads)."""
    peak = gpu.flops_for("bfloat16")
    if prefix == "ctx":
        ce, me = eff.attn_prefill_compute, eff.attn_prefill_memory

        def roof_p(b: np.ndarray, s: np.ndarray, h: float, kv: float) -> np.ndarray:
            return roof_time(
                2.0 * b * h * hd * s * s, b * s * hd * (2 * h + 4 * kv) * 2.0, peak, gpu.mem_bw, ce, me
            )

        return roof_p
    ce, me = eff.attn_decode_compute, eff.attn_decode_memory

    def roof_d(b: np.ndarray, s: np.ndarray, h: float, kv: float) -> np.ndarray:
        return roof_time(
            4.0 * b * h * hd * s, b * (s * 2 * kv * hd * kvb + 4 * h * hd), peak, gpu.mem_bw, ce, me
        )

    return roof_d


def _mla_decode_roof(
    model: ModelSpec, gpu: GpuSpec, eff: Efficiencies, tp: int, kvb: float
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Roofline seconds of one layer's absorbed MLA decode: the latent once per key, the
    query and output latents per head."""
    m = model
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    flops_key = m.attn_flops_per_pair(tp, decode=True)
    heads = m.num_attention_heads // tp
    peak = gpu.flops_for("bfloat16")

    def roof(b: np.ndarray, s: np.ndarray) -> np.ndarray:
        return roof_time(
            b * s * flops_key,
            b * (s * latent * kvb + heads * (latent + m.kv_lora_rank) * 2.0),
            peak,
            gpu.mem_bw,
            eff.attn_decode_compute,
            eff.attn_decode_memory,
        )

    return roof


def _layer_grid(
    prefix: str,
    model: ModelSpec,
    gpu: GpuSpec,
    db: KernelDatabase | None,
    tp: int,
    kvb: float,
    eff: Efficiencies,
    window: int,
    table_gpu: GpuSpec | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | None:
    """(batch axis, length axis, log seconds of one layer, source) from a table class, or None.
    ``table_gpu``: the GPU ``db`` was measured on, when not ``gpu`` (scaled by the roofline)."""
    m = model
    kv_dtype = "fp8" if kvb < 2 else "bfloat16"
    h = m.num_attention_heads // tp
    mla = m.is_mla and prefix == "gen"
    hd = MLA_PROXY_HEAD_DIM if mla else m.head_dim
    kv: float = (m.kv_lora_rank + m.qk_rope_head_dim) / (2 * hd) if mla else m.kv_heads_per_rank(tp)
    if db is None or (m.is_mla and not mla):
        return None
    cls = db.attention_class(prefix, kv_dtype, hd, h, max(1, round(kv)), window)
    if cls is None:
        return None
    batch, lens, lat, (ch, ckv) = cls
    bound = ""
    if prefix == "gen" and table_gpu is None:
        lat, bound = _sibling_bound(
            db, gpu, kv_dtype, hd, ch, ckv, window, batch, lens, lat, not mla, max(1, round(kv)), eff
        )
    roof_h = gqa_roof(prefix, gpu, eff, kvb, hd)
    roof_t = roof_h if table_gpu is None else gqa_roof(prefix, table_gpu, eff, kvb, hd)
    target: Callable[[np.ndarray, np.ndarray], np.ndarray]
    target = _mla_decode_roof(m, gpu, eff, tp, kvb) if mla else (lambda b, s: roof_h(b, s, h, kv))
    lat = lat.astype(np.float64)
    bb, ss = np.meshgrid(batch.astype(float), lens.astype(float), indexing="ij")
    exact = not mla and (ch, ckv) == (h, kv) and table_gpu is None
    if not exact:
        # The kernel's fixed time (launch, the split-KV reduction, the tail) does not grow
        # with heads or bytes: only the part above the table's smallest latency is carried
        # to this shape by the roofline ratio.
        floor = float(np.nanmin(lat))
        lat = floor + (lat - floor) * target(bb, ss) / roof_t(bb, ss, ch, ckv)
    ext_b, ext_s = extended_axis(batch, 1.0, MAX_BATCH), extended_axis(lens, 1.0, MAX_LENGTH)
    grid = ext_grid(batch, lens, lat, ext_b, ext_s, target) + log(1e-3)
    win = f" window={window}" if window else ""
    if mla:
        src = (
            f"table {prefix} {kv_dtype} KV heads={ch} kv={ckv} head_dim={hd}{win} "
            f"(MLA latent {m.kv_lora_rank}+{m.qk_rope_head_dim}, heads={h}: roofline-scaled)"
        )
    else:
        note = "" if (ch, ckv) == (h, kv) else f" (nearest class heads={ch} kv={ckv}, roofline-scaled)"
        src = f"table {prefix} {kv_dtype} KV heads={h} kv={kv} head_dim={hd}{win}{note}{bound}"
    return ext_b, ext_s, grid, src


def _sibling_bound(
    db: KernelDatabase,
    gpu: GpuSpec,
    kv_dtype: str,
    hd: int,
    heads: int,
    kv_heads: int,
    window: int,
    batch: np.ndarray,
    lens: np.ndarray,
    lat: np.ndarray,
    split_kv: bool = True,
    model_kv_heads: int = 0,
    eff: Efficiencies | None = None,
) -> tuple[np.ndarray, str]:
    """A decode class's latencies (ms) bounded by the same class measured on the same die:
    this GPU's table of another vLLM version, and its sibling's (``SIBLINGS``: the same die
    with less HBM bandwidth) of any version; and a note.

    The sibling runs the same kernel on the same SMs at the same clocks, so the GPU with more
    memory bandwidth cannot take longer at any (batch, length). vLLM's FlashAttention 3 decode
    splits the KV sequence across thread blocks in every version the tables measure
    (``v1/attention/backends/flash_attn.py``: ``aot_schedule`` with ``get_scheduler_metadata``,
    at most ``VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH`` = 32 splits under full CUDA
    graphs, from vLLM 0.10.2 through 0.19.0), so a table of the same GPU's that did not split
    did not time the kernel as vLLM runs it either. Where a table is slower than such a one
    (H100's vLLM 0.14.0 and H200's 0.14.0 and 0.19.0 decode tables against H100's 0.19.0: one
    KV head per rank at batch 8 and 32k tokens takes 151 us on H200 and 149 us on H100 at
    0.14.0, 58 us on H100 at 0.19.0, where the KV bytes at HBM bandwidth take 14-20 us; the
    sliding-window classes 2-4x at every size), the newer measurement of the same die bounds
    it (the 0.19.0 collector's H100 runs split the KV as vLLM does; an older table is not
    taken to bound a newer one).
    The sibling's latencies are carried to this GPU before they bound it: the table's
    smallest latency (the kernel's fixed time) kept, the part above it scaled by what the
    two GPUs' own tables of that version measure where neither kernel splits the KV
    (``sibling_decode_ratio``: H200 over H100 0.71-0.72 with a bf16 KV cache, about its
    bandwidth ratio 3.35 / 4.8 = 0.70, and 0.87-0.92 with an FP8 one), else by the ratio of
    the class's decode rooflines (``gqa_roof``; ``eff``: default ``Efficiencies()``). Taken
    raw, the bound left H200 at H100's bandwidth: MiniMax-M2.5 at TP 8 (one bf16 KV head a
    rank), 64 requests of 16k tokens, took 162 us a layer (H200's own point; H100's 188 us
    did not bound it) where H200 reads the 537 MB of KV at full bandwidth in 112 us; carried,
    136 us.
    ``split_kv`` False (an MLA decode priced from the class, another kernel): only the
    sibling's table of the same version bounds it."""
    splits = _split_rows(gpu, batch, model_kv_heads or kv_heads)
    out, names = lat, []
    eff = eff if eff is not None else Efficiencies()
    kvb = 1.0 if kv_dtype == "fp8" else 2.0
    bb, ss = np.meshgrid(np.asarray(batch, np.float64), np.asarray(lens, np.float64), indexing="ij")
    for name, version in _bounding_tables(db, gpu, split_kv):
        other = load_database(name, version).attention_class("gen", kv_dtype, hd, heads, kv_heads, window)
        if (
            other is None
            or other[3] != (heads, kv_heads)
            or not (np.array_equal(other[0], batch) and np.array_equal(other[1], lens))
        ):
            continue
        theirs, label = other[2].astype(np.float64), f"its {version}"
        if name != gpu.name:  # the sibling's times on this GPU, above their fixed time
            carry = sibling_decode_ratio(gpu.name, name, version, kv_dtype, hd)
            if carry is None:  # no pair of tables to measure it: the rooflines' ratio
                here = gqa_roof("gen", gpu, eff, kvb, hd)(bb, ss, float(heads), float(kv_heads))
                there = gqa_roof("gen", get_gpu(name), eff, kvb, hd)(bb, ss, float(heads), float(kv_heads))
                theirs = _above_fixed_time(theirs, here, there)
                label = f"{name} {version} (carried by the rooflines)"
            else:
                theirs = _above_fixed_time(theirs, carry)
                label = f"{name} {version} (x{carry:.2f} above its fixed time)"
        with np.errstate(invalid="ignore"):
            slower = np.isfinite(out) & np.isfinite(theirs) & (out > theirs)
        if version != db.version:  # a newer version's table: the split-KV bound
            slower &= splits
        if slower.any():
            out = np.where(slower, theirs, out)
            names.append(label)
    if not names:
        return lat, ""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(np.isfinite(out) & (out < lat), lat / out, np.nan)
    n, worst = int(np.isfinite(ratio).sum()), float(np.nanmax(ratio))
    return (
        out,
        f" (bounded by the split-KV tables of {', '.join(names)} at {n} points where it was up to "
        f"{worst:.1f}x slower)",
    )


def _bounding_tables(db: KernelDatabase, gpu: GpuSpec, split_kv: bool) -> list[tuple[str, str]]:
    """(GPU, vLLM version) of the tables that may bound ``db``'s decode class
    (``_sibling_bound``): with ``split_kv``, this GPU's newer versions; the sibling's (where
    it has less bandwidth) of the same version, and with ``split_kv`` of newer ones too."""
    sib = SIBLINGS.get(gpu.name)
    newer = [v for v in kernel_versions(gpu.name) if version_tuple(v) > version_tuple(db.version)]
    others = [(gpu.name, v) for v in newer] if split_kv else []
    if sib is not None and get_gpu(sib).mem_bw < gpu.mem_bw:
        others += [
            (sib, v)
            for v in kernel_versions(sib)
            if v == db.version or (split_kv and version_tuple(v) > version_tuple(db.version))
        ]
    return others


def _split_rows(gpu: GpuSpec, batch: np.ndarray, kv_heads: int) -> np.ndarray:
    """The batch rows (a column, to broadcast over lengths) where FA3 splits the KV: its
    ``num_splits_heuristic`` (flash-attention ``hopper/heuristics.h``) keeps one split once
    the (batch x KV heads) tiles of a decode fill 80% of the SMs, so only the rows below
    that, for the model's KV heads per rank, take a newer split-KV table's bound; the
    sibling's table of the same version bounds every row (more bandwidth, same kernel)."""
    num_sms = gpu.num_sms
    return (
        (np.asarray(batch, np.float64) * kv_heads < 0.8 * num_sms)[:, None]
        if num_sms
        else np.ones((len(batch), 1), bool)
    )


def _above_fixed_time(
    theirs: np.ndarray, here: np.ndarray | float, there: np.ndarray | float = 1.0
) -> np.ndarray:
    """A sibling's latencies carried to this GPU: its smallest (the kernel's fixed time)
    kept, the part above it times ``here / there``."""
    floor = float(np.nanmin(theirs))
    return floor + (theirs - floor) * here / there


@cache
def sibling_decode_ratio(gpu_name: str, sib_name: str, version: str, kv_dtype: str, hd: int) -> float | None:
    """How much longer ``gpu_name``'s decode attention takes than its sibling's, above each
    table's fixed time, as their own tables of ``version`` measure it where neither table's
    kernel splits the KV: the median over every (batch, length >= 2k) point of every
    full-attention class of ``kv_dtype`` and head size ``hd`` measured on both, with
    batch x KV heads >= 80% of the SMs (FA3's ``num_splits_heuristic`` runs one split
    there, whatever the collector did), of (t - its class's smallest time) / (the sibling's
    t - its smallest). None: no such point (the caller takes the rooflines' ratio).

    H200 over H100 (1.43x the bandwidth: 0.70 if memory-bound), head size 128, 241 points
    each: a bf16 KV cache 0.71 (vLLM 0.19.0's tables) and 0.72 (0.14.0's); an FP8 one 0.87
    and 0.92. The FP8 cache gains less than the bandwidth: the FP8 decode is not bound by
    its bytes alone (FA3 converts every key and value it loads), so no roofline carries it."""
    here, there = load_database(gpu_name, version), load_database(sib_name, version)
    if not (here.has("gen") and there.has("gen")) or kv_dtype not in DTYPES:
        return None
    num_sms = get_gpu(gpu_name).num_sms or get_gpu(sib_name).num_sms
    if not num_sms:
        return None
    ratios: list[np.ndarray] = []
    for key in here.arrays["gen.keys"]:
        if key[0] != DTYPES.index(kv_dtype) or key[1] != hd or key[4]:
            continue
        h, kv = int(key[2]), int(key[3])
        a, b = (
            here.attention_class("gen", kv_dtype, hd, h, kv),
            there.attention_class("gen", kv_dtype, hd, h, kv),
        )
        if a is None or b is None or a[3] != (h, kv) or b[3] != (h, kv):
            continue
        if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
            continue
        ta, tb = a[2].astype(np.float64), b[2].astype(np.float64)
        fa, fb = float(np.nanmin(ta)), float(np.nanmin(tb))
        ok = (
            (a[0].astype(np.float64)[:, None] * kv >= 0.8 * num_sms)
            & (a[1].astype(np.float64)[None, :] >= 2048)
            & np.isfinite(ta)
            & np.isfinite(tb)
        )
        ok &= tb > fb
        if ok.any():
            ratios.append((ta[ok] - fa) / (tb[ok] - fb))
    if not ratios:
        return None
    return float(np.median(np.concatenate(ratios)))


def _roof_grid(
    prefix: str, model: ModelSpec, gpu: GpuSpec, tp: int, kvb: float, eff: Efficiencies
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = model
    ext_b = extended_axis(np.array([1.0]), 1.0, MAX_BATCH)
    ext_s = extended_axis(np.array([1.0]), 1.0, MAX_LENGTH)
    bb, ss = ext_b[:, None], ext_s[None, :]
    if m.is_mla and prefix == "gen":
        sec = _mla_decode_roof(m, gpu, eff, tp, kvb)(bb, ss)
    else:
        sec = gqa_roof(prefix, gpu, eff, kvb, m.head_dim)(
            bb, ss, m.num_attention_heads // tp, m.kv_heads_per_rank(tp)
        )
    return ext_b, ext_s, np.log(sec)


def _windowed(prefix: str, ls: np.ndarray, grid: np.ndarray, window: int) -> np.ndarray:
    """A full-attention grid (log seconds over log length ``ls``) as a sliding-window layer's."""
    lw = log(window)
    at_w = np.array([np.interp(lw, ls, row) for row in grid])[:, None]
    clipped = np.minimum(ls, lw)[None, :]
    out = np.array([np.interp(clipped[0], ls, row) for row in grid])
    if prefix == "ctx":  # s W - W^2 / 2 pairs instead of W^2 / 2 at length W
        s = np.exp(ls)[None, :]
        out = np.where(s > window, at_w + np.log(np.maximum(2.0 * s / window - 1.0, 1.0)), out)
    return out


def checked_prefill_table(
    db: KernelDatabase | None, gpu: GpuSpec, kv_dtype: str
) -> tuple[KernelDatabase | None, GpuSpec | None, str]:
    """The database whose prefill-attention classes of ``kv_dtype`` time this GPU, the GPU
    they were measured on (None: ``gpu`` itself) and a note: ``db`` unless its classes imply
    points faster than the GPU's peak FLOP/s (``KernelDatabase.prefill_peak_fraction`` above
    1; the fp8 peak for an fp8 KV cache), then the sibling GPU's of the same vLLM version
    where they pass (the same die: prefill attention is compute-bound, the roofline scales
    the rest), else none (the roofline).

    What this rejects in the packed tables: H200's vLLM 0.19.0 prefill attention, 7-13x
    faster than the same version on H100 and than 0.14.0 on H200 from 1k tokens up (up to
    260x the peak), and L40S's fp8-KV prefill classes (up to 9.5x its fp8 peak)."""
    if db is None or not db.has("ctx"):
        return db, None, ""
    frac = db.prefill_peak_fraction(kv_dtype, gpu.flops_for(kv_dtype))
    if frac <= 1.0:
        return db, None, ""
    why = (
        f"{gpu.name}'s vLLM {db.version} {kv_dtype} prefill table not used: {frac:.1f}x the GPU's peak "
        f"FLOP/s at its fastest"
    )
    sib = SIBLINGS.get(gpu.name)
    if sib is not None and db.version in kernel_versions(sib):
        sdb, sgpu = load_database(sib, db.version), get_gpu(sib)
        if sdb.prefill_peak_fraction(kv_dtype, sgpu.flops_for(kv_dtype)) <= 1.0:
            return sdb, sgpu, f" of {sib} ({why})"
    return None, None, f" ({why})"


def attention_grid(
    prefix: str,
    model: ModelSpec,
    gpu: GpuSpec,
    db: KernelDatabase | None,
    tp: int,
    kvb: float,
    eff: Efficiencies,
) -> tuple[Grid, str]:
    """All layers' attention of ``prefix`` ('ctx' prefill, 'gen' decode), and its source."""
    m = model
    kv_dtype = "fp8" if kvb < 2 else "bfloat16"
    table_gpu, note = None, ""
    if prefix == "ctx":
        db, table_gpu, note = checked_prefill_table(db, gpu, kv_dtype)
    full = _layer_grid(prefix, m, gpu, db, tp, kvb, eff, 0, table_gpu)
    if full is None:
        hd = m.head_dim
        why = "MLA prefill at head_dim" if m.is_mla and prefix == "ctx" else f"no {kv_dtype} KV, head_dim"
        b, s, g = _roof_grid(prefix, m, gpu, tp, kvb, eff)
        src = (
            f"roofline ({why} {hd} attention table)"
            if not (m.is_mla and prefix == "gen")
            else "roofline (MLA latent decode; no head_dim 128 decode table)"
        )
    else:
        b, s, g, src = full
    src += note
    ls = np.log(s)
    n_full, n_win, window = m.num_full_attention_layers, m.num_sliding_layers, m.sliding_window or 0
    if not (n_win and window):
        return (np.log(b), s, g + log(n_full)), src
    win = _layer_grid(prefix, m, gpu, db, tp, kvb, eff, window, table_gpu)
    if win is not None and np.array_equal(win[0], b) and np.array_equal(win[1], s):
        gw, wsrc = win[2], f"{n_win} layers {win[3]}"
    else:
        gw, wsrc = _windowed(prefix, ls, g, window), f"{n_win} layers windowed to {window} keys"
    total = np.logaddexp(g + log(n_full), gw + log(n_win))
    return (np.log(b), s, total), f"{src} ({n_full} full layers; {wsrc})"
