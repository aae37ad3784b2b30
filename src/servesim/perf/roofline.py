"""Roofline performance model: one iteration's time from FLOPs and HBM bytes per operator class.

For each operator class of the forward pass (QKV/output projections, MLP or experts,
prefill attention, decode attention, norms/elementwise, LM head, sampling)::

    time = max(FLOPs / (peak FLOP/s x compute efficiency), bytes / (HBM bandwidth x memory efficiency))

plus tensor-parallel all-reduces (ring: 2 (tp-1)/tp x message / link bandwidth + latency,
two per layer as in Megatron-style TP), the logits gather, pipeline send/receive, and a
fixed GPU-side launch overhead. Everything is for one TP rank; ``batch_time`` is the sum of
the pipeline stages' times (one batch's way through the whole pipeline). The engine
overlaps batches across stages as vLLM's batch queue does (``engine/batch_queue.py``), from
each stage's share (``last_stage_s``: what only the last stage runs; ``perf.pipelined.stage_times``).

Every count is linear in a handful of aggregate batch statistics (except the MoE
expected-distinct-experts term), so ``__init__`` precomputes seconds-per-unit coefficients
(``perf.roofline_coefficients``) and ``batch_time`` is a few multiplies and ``max`` calls.
See docs/perf_model.md.
"""

from __future__ import annotations

import numpy as np

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec, resolve_kv_dtype_bytes
from servesim.config import ModelConfig, ParallelConfig
from servesim.perf.base import BatchStats
from servesim.perf.cuda_graphs import GraphPlan
from servesim.perf.efficiencies import (  # noqa: F401 - re-exported
    _CACHE_MAX,
    GEMMS_PER_LAYER,
    KERNELS_PER_LAYER,
    ROW_THREADS,
    SKINNY_TILE_M,
    Efficiencies,
    _pnorm,
    gemm_shapes,
    roof,
    tiled_area,
)
from servesim.perf.pipelined import MicroBatchShare, PipelinedPerfModel  # noqa: F401 - PipelinedPerfModel re-exported
from servesim.perf.roofline_coefficients import RooflineCoefficients
from servesim.perf.work import activation_dtype  # noqa: F401 - re-exported
from servesim.perf.work_step import WorkCounter


class RooflinePerfModel(RooflineCoefficients):
    """Roofline time of one iteration of ``model`` on ``tp`` x ``pp`` GPUs (implements PerfModel;
    its coefficients, and its constructor, are ``RooflineCoefficients``')."""

    __slots__ = ()

    # ------------------------------------------------------------------ hot path

    def batch_time(self, stats: BatchStats) -> float:
        """Seconds of one iteration: sum over operator classes of max(compute, memory) time.

        Written for speed (one tuple unpack, conditional expressions instead of ``max``);
        ``breakdown`` computes the same terms readably and a test checks they agree.
        """
        d = stats.num_decode_reqs
        pt = stats.num_prefill_tokens
        t = pt + d
        r = stats.num_prefill_reqs + d
        if t == 0:
            return 0.0
        (
            proj_f,
            proj_w,
            proj_a,
            mlp_f,
            mlp_w,
            mlp_a,
            router_f,
            router_w,
            num_experts,
            top_k,
            miss,
            pf_f,
            pf_kv,
            pf_tok,
            dec_f,
            dec_kv,
            dec_req,
            lm_f,
            lm_w,
            lm_req,
            per_tok,
            per_req,
            const,
            p,
            cache,
        ) = self._coef
        pad = self._pad
        if t < len(pad):  # a CUDA graph of the next capture size (pad is empty when eager)
            t = pad[t]
            const += (self._c_piece if pt else self._c_full) - self._fixed
        if cache is None:  # the classic roofline: a few multiplies
            x, y = proj_f * t, proj_w + proj_a * t
            total = x if x > y else y
            if num_experts:
                pairs = t * top_k
                x = mlp_f * pairs + router_f * t
                y = mlp_w * num_experts * (1.0 - miss**t) + router_w + mlp_a * pairs
            else:
                x, y = mlp_f * t, mlp_w + mlp_a * t
            total += x if x > y else y
        else:  # blended roofs / row floors: the classes that depend on T alone, cached per T
            cached = cache.get(t)
            if cached is None:
                if len(cache) > _CACHE_MAX:
                    cache.clear()
                cached = cache[t] = self._token_classes(t)
            total = cached
        total += per_tok * t + per_req * r + const
        if pt:
            x = pf_f * stats.prefill_attn_work
            y = pf_kv * stats.sum_prefill_context + pf_tok * pt
            total += (x if x > y else y) if not p else _pnorm(x, y, p)
        if d:
            s = stats.sum_decode_context
            x, y = dec_f * s, dec_kv * s + dec_req * d
            total += (x if x > y else y) if not p else _pnorm(x, y, p)
        x, y = lm_f * r, lm_w + lm_req * r
        return total + ((x if x > y else y) if not p else _pnorm(x, y, p))

    def decode_affine(self, num_decode_reqs: int) -> tuple[float, float, float, float] | None:
        """(rest, a, b, c) with ``batch_time = rest + max(a * s, b * s + c)`` for a pure-decode
        batch of ``num_decode_reqs`` requests and context sum ``s``; None for blended roofs."""
        if self._coef[23]:
            return None
        n = num_decode_reqs
        c = self._dec_req * n
        return self.batch_time(_decodes(n)) - c, self._dec_f, self._dec_kv, c

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        """``batch_time`` of pure-decode batches of ``num_decode_reqs`` requests, vectorized
        over their context sums: only the decode-attention term depends on the context."""
        n = num_decode_reqs
        p = self._coef[23]
        y0 = self._dec_req * n  # the decode-attention term at zero context: roof(0, y0) = y0
        rest = self.batch_time(_decodes(n)) - y0
        s = np.asarray(sum_decode_context, np.float64)
        x, y = self._dec_f * s, self._dec_kv * s + y0
        if not p:
            return rest + np.maximum(x, y)
        hi, lo = np.maximum(x, y), np.minimum(x, y)
        with np.errstate(divide="ignore", invalid="ignore"):
            att = np.where(hi > 0, hi * (1.0 + (lo / hi) ** p) ** (1.0 / p), 0.0)
        return rest + att

    def _token_classes(self, t: float) -> float:
        """Seconds of the projections, MLP and elementwise kernels for ``t`` tokens."""
        proj, mlp = self._gemm_classes(t)
        return proj + mlp + roof(self._el_tok * t, self._el_floor, self.eff.roof_blend)

    def _gemm_classes(self, t: float) -> tuple[float, float]:
        """Seconds of the projections and of the MLP (or experts) for ``t`` tokens."""
        bl = self.eff.roof_blend
        if self._tiles is None:
            proj_c, mlp_c = self._proj_f * t, self._mlp_f * t
        else:
            tm, tn, sms = self.eff.gemm_tile_m, self.eff.gemm_tile_n, self.gpu.num_sms
            proj_c, mlp_c = (sum(c * tiled_area(t, n, tm, tn, sms) for c, n in g) for g in self._tiles)
        if self._num_experts:
            pairs = t * self._top_k
            touched = self._num_experts * (1.0 - self._miss**t)
            mlp = roof(
                self._mlp_f * pairs + self._router_f * t,
                self._mlp_w * touched + self._router_w + self._mlp_a * pairs,
                bl,
            )
        else:
            mlp = roof(mlp_c, self._mlp_w + self._mlp_a * t, bl)
        return roof(proj_c, self._proj_w + self._proj_a * t, bl), mlp

    # ------------------------------------------------------------------ reporting (not hot)

    def _classes(self, stats: BatchStats) -> dict[str, tuple[float, float]]:
        """(FLOPs, bytes) per operator class, one TP rank, all layers of all stages."""
        w, d = self._work, stats.num_decode_reqs
        t = stats.num_prefill_tokens + d
        r = stats.num_prefill_reqs + d
        if self._num_experts:
            pairs = t * self._top_k
            touched = self._num_experts * (1.0 - self._miss**t)
            mlp = (
                w["mlp_f"] * pairs + w["router_f"] * t,
                (w["mlp_w"] * touched + w["router_w"] if t else 0.0) + w["mlp_a"] * pairs,
            )
        else:
            mlp = (w["mlp_f"] * t, (w["mlp_w"] if t else 0.0) + w["mlp_a"] * t)
        pt, s = stats.num_prefill_tokens, stats.sum_decode_context
        return {
            "proj": (w["proj_f"] * t, (w["proj_w"] if t else 0.0) + w["proj_a"] * t),
            "mlp": mlp,
            "attn_prefill": (
                w["pf_f"] * stats.prefill_attn_work,
                w["kv_tok"] * (stats.sum_prefill_context + 2 * pt) + w["qo_tok"] * pt,
            )
            if pt
            else (0.0, 0.0),
            "attn_decode": (w["dec_f"] * s, w["kv_tok"] * (s + d) + (w["qo_tok"] + w["state_req"]) * d)
            if d
            else (0.0, 0.0),
            "elementwise": (0.0, w["el_tok"] * t),
            "lm_head": (w["lm_f"] * r, (w["lm_w"] if r else 0.0) + w["lm_req"] * r),
            "sampling": (0.0, w["samp_req"] * r),
        }

    def breakdown(self, stats: BatchStats) -> dict[str, float]:
        """Seconds per operator class (the terms of ``batch_time``), for reports and tests."""
        d = stats.num_decode_reqs
        t = stats.num_prefill_tokens + d
        r = stats.num_prefill_reqs + d
        if t == 0:
            return {}
        pt, s = stats.num_prefill_tokens, stats.sum_decode_context
        bl = self.eff.roof_blend
        fixed = self._fixed
        if t < len(self._pad):  # CUDA graph: padded tokens, launches outside the graph only
            t = self._pad[t]
            fixed = self._c_piece if pt else self._c_full
        proj, mlp = self._gemm_classes(t)
        comm = self._comm_tok * t + self._comm_const + self._comm_req * r
        return {
            "proj": proj,
            "mlp": mlp,
            "attn_prefill": roof(
                self._pf_f * stats.prefill_attn_work,
                self._pf_kv * stats.sum_prefill_context + self._pf_tok * pt,
                bl,
            )
            if pt
            else 0.0,
            "attn_decode": roof(self._dec_f * s, self._dec_kv * s + self._dec_req * d, bl) if d else 0.0,
            "elementwise": roof(self._el_tok * t, self._el_floor, bl),
            "lm_head": roof(self._lm_f * r, self._lm_w + self._lm_req * r, bl),
            "sampling": self._samp_req * r,
            "comm": comm,
            "overhead": fixed,
        }

    def batch_work(self, stats: BatchStats) -> tuple[float, float]:
        """(FLOPs, HBM bytes) on one GPU: the sums of ``_classes``, without building it
        (``perf.work_step.WorkCounter``; a micro-batch's fractional share too)."""
        return self.work_counter.work(
            stats.num_prefill_tokens,
            stats.prefill_attn_work,
            stats.num_prefill_reqs,
            stats.num_decode_reqs,
            stats.sum_decode_context,
            stats.sum_prefill_context,
        )

    def batch_flops(self, stats: BatchStats) -> float:
        """FLOPs on one GPU: one TP rank's share, averaged over pipeline stages."""
        return self.batch_work(stats)[0]

    def bubble_fraction(self, stats: BatchStats) -> float:
        """Fraction of the iteration a GPU idles in pipeline bubbles: (pp - 1)/pp with one
        micro-batch (each stage works while the other pp - 1 wait). The engine's batch
        queue overlaps batches across stages and counts its own bubbles (``engine/batch_queue.py``)."""
        return (self.pp - 1) / self.pp

    def last_stage_s(self, stats: BatchStats) -> float:
        """Seconds of ``batch_time`` only the last pipeline stage spends: the LM head, the
        logits gather and sampling (``perf.pipelined.stage_times`` splits the rest evenly)."""
        r = stats.num_prefill_reqs + stats.num_decode_reqs
        if not r:
            return 0.0
        p = self._coef[23]
        x, y = self._lm_f * r, self._lm_w + self._lm_req * r
        head = (x if x > y else y) if not p else _pnorm(x, y, p)
        return head + (self._samp_req + self._comm_req) * r

    def batch_bytes(self, stats: BatchStats) -> float:
        """HBM bytes on one GPU: one TP rank's share, averaged over pipeline stages."""
        return self.batch_work(stats)[1]


class RooflineWork:
    """For step-time models that change how long a step takes but not the work it does:
    the FLOPs and HBM bytes of a batch (MFU, MBU, energy) are the wrapped roofline's count."""

    __slots__ = ()
    roofline: RooflinePerfModel

    @property
    def work_counter(self) -> WorkCounter:
        """The roofline's counter, which the replica calls directly (no frame per step)."""
        return self.roofline.work_counter

    def batch_work(self, stats: BatchStats) -> tuple[float, float]:
        """(FLOPs, HBM bytes) on one GPU: the roofline's count."""
        return self.roofline.batch_work(stats)

    def batch_flops(self, stats: BatchStats) -> float:
        return self.roofline.batch_flops(stats)

    def batch_bytes(self, stats: BatchStats) -> float:
        return self.roofline.batch_bytes(stats)


def _decodes(n: float) -> BatchStats:
    """A pure-decode batch of ``n`` requests at zero context (``n`` is fractional for a
    pipeline micro-batch's share)."""
    if isinstance(n, int):
        return BatchStats(num_decode_reqs=n)
    return MicroBatchShare(0.0, 0.0, 0.0, n, 0.0, 0.0)  # type: ignore[return-value]


def build_perf_model(
    model: ModelSpec,
    gpu: GpuSpec,
    parallel: ParallelConfig,
    model_cfg: ModelConfig | None = None,
    eff: Efficiencies | None = None,
    links: LinkSpec | None = None,
    graphs: GraphPlan | None = None,
) -> RooflinePerfModel | PipelinedPerfModel:
    """The default perf model of a scenario (``model`` already loaded with ``model_cfg.dtype``).

    ``links`` None keeps the GPU's interconnect for every transfer (the single-replica
    default); clusters pass the catalog links (``catalog.gpus.link_spec``). ``graphs``: the
    engine's CUDA graphs (None: eager).
    """
    kv_b = resolve_kv_dtype_bytes(model_cfg.kv_cache_dtype if model_cfg else "auto", model)
    perf = RooflinePerfModel(
        model,
        gpu,
        tp=parallel.tensor_parallel_size,
        pp=parallel.pipeline_parallel_size,
        kv_dtype_bytes=kv_b,
        eff=eff,
        links=links,
        ep=parallel.expert_parallel_size,
        expert_imbalance=parallel.expert_imbalance,
        graphs=graphs,
        dp=parallel.data_parallel_size,
    )
    if parallel.pipeline_parallel_size > 1 and parallel.num_microbatches > 1:
        return PipelinedPerfModel(perf, parallel.num_microbatches)
    return perf
