"""The kernel-level pieces of the roofline: efficiency parameters, the roof of one kernel,
GEMM shapes and their wave (tile) quantisation. See ``roofline.py`` and docs/perf_model.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from servesim.catalog.models import ModelSpec

#: Kernels per transformer layer in a vLLM forward pass (2 fused add+norm, QKV, rotary,
#: KV-cache write, attention, output projection, gate/up, activation, down).
KERNELS_PER_LAYER = 10
#: Entries of the per-T cache of the refined model before it is emptied (bounds its memory).
_CACHE_MAX = 1 << 16
#: Threads of the one block per token that vLLM's norm, rotary and activation kernels use.
ROW_THREADS = 1024
#: Of which GEMMs (QKV, output projection, gate/up, down): they pay ``gemm_kernel_overhead_s``.
GEMMS_PER_LAYER = 4
#: Token rows of the output tiles of GEMMs with at most this many tokens, whatever the fitted
#: tile: cuBLAS runs skinny GEMMs with 64-row tiles (Hopper's wgmma computes 64 rows per warpgroup).
SKINNY_TILE_M = 64


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """Fractions of peak that real kernels reach, with physics-grounded defaults (not fitted).

    linear_*: cuBLAS/CUTLASS GEMMs on H100 reach ~65-75% of dense peak at large shapes, and
        skinny decode GEMMs stream weights at ~75-85% of HBM bandwidth.
    attn_prefill_*: FlashAttention-2/3 forward reaches ~50-70% of peak on long sequences.
    attn_decode_*: paged decode attention gathers 16-token blocks; ~65-75% of bandwidth.
    elementwise_memory: small fused kernels (norms, rotary, activation) ~60-75% of bandwidth.
    comm: NCCL ring all-reduce bus bandwidth is ~80% of NVLink's (Vidur's H100 DGX
        measurement: ~365 of 450 GB/s at 64 MiB).
    allreduce_latency_s: small-message all-reduce latency (vLLM's custom all-reduce ~5-10 us;
        NCCL 20-40 us in Vidur's measurements); 15 us in between.
    launch_overhead_s: per iteration (CUDA-graph launch, embedding, final norm).
    kernel_overhead_s: per kernel: the fixed ramp-up/tail a kernel costs even when tiny
        (Vidur's H100 GEMMs on 1 token run ~2 us longer than their weight streaming).
    roof_blend: how far a kernel falls short of overlapping its compute and memory time,
        1/p of the p-norm ``(compute^p + memory^p)^(1/p)``: 0 is the hard roofline max
        (perfect overlap), 1 their sum (no overlap). Between the roofs a kernel is neither
        purely compute- nor memory-bound (pipelines drain between K-tiles, too few tiles
        to hide loads), which the max misses by up to 2x at the ridge point.
    gemm_kernel_overhead_s: per GEMM kernel (None: ``kernel_overhead_s``); a GEMM's fixed
        cost (prologue, epilogue, last-wave tail, split-K reduction) is larger than a
        small elementwise kernel's launch-to-finish latency.
    gemm_tile_m, gemm_tile_n: GEMM wave quantisation (0: off, the ideal FLOPs). A GEMM of M
        tokens x N outputs computes its output in tiles of gemm_tile_m tokens x gemm_tile_n
        outputs (64 x gemm_tile_n when M <= 64), one per SM at a time: waves =
        ceil(tiles / SMs), and its compute roof counts waves x SMs x tile area x 2K FLOPs
        instead of 2MNK. So a GEMM whose tile count is just above a multiple of the SM count
        runs a nearly empty last wave (NVIDIA's "Matrix Multiplication Background" guide,
        tile and wave quantisation). The projection and MLP GEMMs of dense models only (not
        MoE models, nor the LM head); needs the GPU's ``num_sms``. Calibration picks the tile.
    row_pass_s: one pass of a 1024-thread block along a token's row. vLLM's RMSNorm,
        rotary and activation kernels give each token one thread block that loops over the
        row; with few tokens the GPU is mostly idle and such a kernel takes (row width /
        1024) dependent memory round trips, whatever the bytes (Vidur's H100: ~0.5 us per
        1024 elements, so 13 us for a 24576-wide activation at 1 token). The elementwise
        class takes ``roof(row passes x row_pass_s, bytes / bandwidth)``; 0 (default): bytes only.
    """

    linear_compute: float = 0.70
    linear_memory: float = 0.80
    attn_prefill_compute: float = 0.55
    attn_prefill_memory: float = 0.70
    attn_decode_compute: float = 0.50
    attn_decode_memory: float = 0.70
    elementwise_memory: float = 0.70
    comm: float = 0.80
    allreduce_latency_s: float = 15e-6
    launch_overhead_s: float = 20e-6
    kernel_overhead_s: float = 2e-6
    # Refinements a calibrated profile may set (the defaults give the classic roofline):
    roof_blend: float = 0.0
    gemm_kernel_overhead_s: float | None = None
    row_pass_s: float = 0.0
    allreduce_hop_s: float = 0.0
    gemm_tile_m: int = 0
    gemm_tile_n: int = 0
    # (allreduce_hop_s: latency per step of a ring all-reduce, which takes 2 (tp - 1) steps;
    # each all-reduce costs allreduce_latency_s + 2 (tp - 1) x allreduce_hop_s.)
    # Per-class overrides of linear_* (None: use linear_*). A calibrated profile sets them
    # when the measurements tell the QKV/output projections, the MLP and the LM head apart.
    proj_compute: float | None = None
    proj_memory: float | None = None
    mlp_compute: float | None = None
    mlp_memory: float | None = None
    lm_head_compute: float | None = None
    lm_head_memory: float | None = None

    def of(self, cls: str) -> tuple[float, float]:
        """(compute, memory) efficiency of a linear class: 'proj', 'mlp' or 'lm_head'."""
        c, m = getattr(self, f"{cls}_compute"), getattr(self, f"{cls}_memory")
        return (self.linear_compute if c is None else c, self.linear_memory if m is None else m)


def roof(compute_s: float, memory_s: float, blend: float = 0.0) -> float:
    """Time of a kernel with ``compute_s`` and ``memory_s`` at its roofs: the max for
    ``blend`` 0, else the p-norm ``(compute^p + memory^p)^(1/p)`` with p = 1/blend."""
    return _pnorm(compute_s, memory_s, 1.0 / blend) if blend else max(compute_s, memory_s)


def _pnorm(x: float, y: float, p: float) -> float:
    hi, lo = (x, y) if x > y else (y, x)
    return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p) if hi > 0 else 0.0


def gemm_shapes(model: ModelSpec, tp: int = 1) -> dict[str, tuple[tuple[int, int], ...]]:
    """(outputs N, inputs K) of each GEMM of one layer on one TP rank: "proj" (fused QKV,
    output projection) and "mlp" (fused gate/up or up, down); none for MoE experts."""
    if model.is_moe:
        return {"proj": (), "mlp": ()}
    m, H = model, model.hidden_size
    q = m.num_attention_heads // tp * m.head_dim
    kv = m.kv_heads_per_rank(tp) * m.head_dim
    width = m.intermediate_size // tp
    up = (2 if m.mlp_gated else 1) * width
    return {"proj": ((q + 2 * kv, H), (H, q)), "mlp": ((up, H), (H, width))}


def tiled_area(m: float, n: int, tile_m: int, tile_n: int, num_sms: int) -> float:
    """Output elements a GEMM of ``m`` tokens x ``n`` outputs computes when it runs in
    ``tile_m`` x ``tile_n`` tiles (64-row tiles for m <= 64), ``num_sms`` tiles per wave:
    waves x SMs x tile area, against m x n ideally (tile and wave quantisation)."""
    if m <= 0:
        return 0.0
    tm = SKINNY_TILE_M if m <= SKINNY_TILE_M < tile_m else tile_m
    waves = ceil(ceil(m / tm) * ceil(n / tile_n) / num_sms)
    return float(waves * num_sms * tm * tile_n)
