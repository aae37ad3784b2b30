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
and ``batch_time`` is a few multiplies and ``max`` calls. See docs/perf_model.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec, resolve_kv_dtype_bytes
from servesim.config import ModelConfig, ParallelConfig
from servesim.perf.base import BatchStats
from servesim.perf.cuda_graphs import EAGER_PLAN, GraphPlan
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
from servesim.perf.work import activation_dtype, work_coefficients  # noqa: F401 - activation_dtype re-exported
from servesim.perf.work_step import WorkCounter


class RooflinePerfModel:
    """Roofline time of one iteration of ``model`` on ``tp`` x ``pp`` GPUs (implements PerfModel)."""

    __slots__ = (
        "model",
        "gpu",
        "tp",
        "pp",
        "eff",
        "dtype_bytes",
        "kv_dtype_bytes",
        "_work",
        "_proj_f",
        "_proj_w",
        "_proj_a",
        "_mlp_f",
        "_mlp_w",
        "_mlp_a",
        "_router_f",
        "_router_w",
        "_num_experts",
        "_top_k",
        "_miss",
        "_pf_f",
        "_pf_kv",
        "_pf_tok",
        "_dec_f",
        "_dec_kv",
        "_dec_req",
        "_el_tok",
        "_el_floor",
        "_lm_f",
        "_lm_w",
        "_lm_req",
        "_samp_req",
        "_comm_tok",
        "_comm_const",
        "_comm_req",
        "_fixed",
        "_coef",
        "_dtype_override",
        "ep",
        "expert_imbalance",
        "links",
        "_tiles",
        "graphs",
        "_pad",
        "_c_full",
        "_c_piece",
        "work_counter",
        "dp",
    )

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int = 1,
        pp: int = 1,
        dtype_bytes: float | None = None,
        kv_dtype_bytes: float | None = None,
        eff: Efficiencies | None = None,
        *,
        links: LinkSpec | None = None,
        ep: int = 1,
        expert_imbalance: float = 1.0,
        graphs: GraphPlan | None = None,
        dp: int = 1,
    ) -> None:
        """``links`` (None: the GPU's interconnect for everything, the original model) place
        TP groups and pipeline stages on nodes of ``links.gpus_per_node`` GPUs: a group that
        spans nodes communicates over the network. ``ep`` > 1 (MoE only, dividing ``dp x
        tp``) spreads the experts over ``ep`` groups of ``dp x tp / ep`` GPUs: whole experts
        per group, no token exchange beyond the all-reduces when ``dp`` is 1 (each rank runs
        its experts on the whole batch, as vLLM does without data parallelism), and the
        busiest group carries ``expert_imbalance`` (max/mean) times the mean token-expert
        pairs. ``dp`` > 1 (vLLM's data-parallel ranks sharing an MoE model's experts): this
        model times one rank whose expert layers run on the tokens of all ``dp`` ranks, each
        taken to hold a batch like this one (``dp x T`` tokens), gathered and scattered back
        every MoE layer (the bytes of a ring all-reduce of ``dp x T`` tokens over the ``dp x
        tp`` GPUs). ``graphs`` (None:
        eager, every kernel launched, as operator measurements are timed) is the engine's
        CUDA-graph plan: steps up to its largest capture size are padded to the next size
        (their token-proportional work and all-reduces) and pay launch costs only where vLLM
        launches kernels outside the graph (``perf.cuda_graphs``; not for pipeline stages).
        """
        if ep > 1 and (not model.is_moe or (tp * dp) % ep):
            raise ValueError(f"expert parallelism {ep} needs an MoE model and must divide DP x TP {dp * tp}")
        self.dp = dp if model.is_moe else 1  # a dense model's DP ranks share nothing
        self.model, self.gpu, self.tp, self.pp = model, gpu, tp, pp
        self.ep, self.expert_imbalance, self.links = ep, expert_imbalance, links
        self.eff = eff or Efficiencies()
        self.dtype_bytes = model.dtype_bytes if dtype_bytes is None else dtype_bytes
        self._dtype_override = dtype_bytes is not None
        bwe = model.expert_weight_bytes if dtype_bytes is None else dtype_bytes  # routed experts
        self.kv_dtype_bytes = model.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        self._work = work_coefficients(model, tp, ep, self.dtype_bytes, self.kv_dtype_bytes, bwe, dp=self.dp)
        self._compute_and_memory_costs()
        self._communication_costs()
        self.graphs = graphs if graphs is not None and pp == 1 else EAGER_PLAN
        self._overheads_and_tiles()
        self._coef = self._hot_coefficients()

    def peak_flops(self) -> tuple[float, float]:
        """FLOP/s of the linear layers (the model's tensor-core math: fp8 for W8A8 and NVFP4
        weights, 16-bit for weight-only schemes; fp8 for an fp8 override) and of the activations."""
        act = activation_dtype(self.model)
        if self._dtype_override:
            lin = "fp8" if self.dtype_bytes < 2 else act
        else:
            lin = self.model.linear_compute_dtype if self.model.activation_dtype_bytes < 4 else act
        return self.gpu.flops_for(lin), self.gpu.flops_for(act)

    def _compute_and_memory_costs(self) -> None:
        """Seconds per unit of each statistic: the work coefficients over the roofs."""
        w, e, gpu, m = self._work, self.eff, self.gpu, self.model
        peak_lin, peak_act = self.peak_flops()
        (pj_c, pj_m), (ml_c, ml_m), (lm_c, lm_m) = e.of("proj"), e.of("mlp"), e.of("lm_head")
        lin_f, lin_m = 1.0 / (peak_lin * ml_c), 1.0 / (gpu.mem_bw * ml_m)
        act_f, lm_mem = 1.0 / (peak_act * lm_c), 1.0 / (gpu.mem_bw * lm_m)
        pf_f, pf_m = 1.0 / (peak_act * e.attn_prefill_compute), 1.0 / (gpu.mem_bw * e.attn_prefill_memory)
        dec_f, dec_m = 1.0 / (peak_act * e.attn_decode_compute), 1.0 / (gpu.mem_bw * e.attn_decode_memory)
        el_m = 1.0 / (gpu.mem_bw * e.elementwise_memory)
        pj_f, pj_mem = 1.0 / (peak_lin * pj_c), 1.0 / (gpu.mem_bw * pj_m)
        self._proj_f, self._proj_w, self._proj_a = (
            w["proj_f"] * pj_f,
            w["proj_w"] * pj_mem,
            w["proj_a"] * pj_mem,
        )
        ep = self.ep
        imb = self.expert_imbalance if ep > 1 else 1.0  # the busiest expert group sets the pace
        self._mlp_f, self._mlp_w = w["mlp_f"] * lin_f * imb, w["mlp_w"] * lin_m
        self._mlp_a = w["mlp_a"] * lin_m * imb
        self._router_f, self._router_w = w["router_f"] * lin_f, w["router_w"] * lin_m
        # Experts on one GPU, and the token-expert pairs and expert misses of one token of this
        # rank's batch: with DP ranks the experts see dp tokens for each of it.
        self._num_experts, self._top_k = m.num_experts / ep, m.num_experts_per_tok * self.dp
        self._miss = (1.0 - m.num_experts_per_tok / m.num_experts) ** self.dp if m.is_moe else 0.0
        self._pf_f = w["pf_f"] * pf_f
        self._pf_kv = w["kv_tok"] * pf_m  # per context token read
        self._pf_tok = (2 * w["kv_tok"] + w["qo_tok"]) * pf_m  # per new token: KV read+write, Q, O
        self._dec_f = w["dec_f"] * dec_f
        self._dec_kv = w["kv_tok"] * dec_m
        self._dec_req = (w["kv_tok"] + w["qo_tok"] + w["state_req"]) * dec_m  # KV write, Q, O, states
        self._el_tok = w["el_tok"] * el_m
        self._el_floor = w["el_rows"] * e.row_pass_s
        self._lm_f, self._lm_w, self._lm_req = w["lm_f"] * act_f, w["lm_w"] * lm_mem, w["lm_req"] * lm_mem
        self._samp_req = w["samp_req"] * el_m
        self.work_counter = WorkCounter(w, self._num_experts, self._top_k, self._miss, self.pp)

    def _communication_costs(self) -> None:
        """All-reduces, the logits gather and pipeline sends.

        Without ``links`` every transfer uses the GPU's interconnect. With them, a TP group
        larger than a node rings over the network, and of the pp - 1 stage boundaries, those
        between nodes (stages fill nodes in order) use the network.
        """
        e, gpu, links, m = self.eff, self.gpu, self.links, self.model
        tp, pp = self.tp, self.pp
        L, H, ba = m.num_layers, m.hidden_size, m.activation_dtype_bytes
        link = 1.0 / (gpu.interconnect_bw * e.comm)
        link_tp = link_pp = link_net = link
        lat_tp, lat_pp, lat_net, num_net = e.allreduce_latency_s, gpu.interconnect_latency_s, 0.0, 0
        if links is not None:
            link_tp = link_pp = 1.0 / (links.intra_bw * e.comm)
            link_net = 1.0 / (links.inter_bw * e.comm)
            lat_pp, lat_net = links.intra_latency_s, links.inter_latency_s
            if tp > links.gpus_per_node:
                link_tp, lat_tp = link_net, lat_tp + lat_net
            num_net = min(pp - 1, -(-tp * pp // links.gpus_per_node) - 1)
        ring = 2.0 * (tp - 1) / tp
        self._comm_tok = 2 * L * ring * H * ba * link_tp if tp > 1 else 0.0
        lat_tp += 2 * (tp - 1) * e.allreduce_hop_s
        self._comm_const = (2 * L + 1) * lat_tp if tp > 1 else 0.0
        self._comm_req = (tp - 1) / tp * m.vocab_size * ba * link_tp  # logits gather
        # Pipeline: hidden states and residual cross pp - 1 stage boundaries.
        self._comm_tok += 2 * H * ba * ((pp - 1 - num_net) * link_pp + num_net * link_net)
        self._comm_const += (pp - 1 - num_net) * lat_pp + num_net * lat_net
        # Expert parallelism inside the TP group moves no tokens: every rank holds the batch
        # after the attention all-reduce and the MoE block's all-reduce (above) sums the
        # ranks' expert outputs, as vLLM's FusedMoE does with dp_size 1. DP ranks gather
        # their tokens before each MoE layer and scatter the sums back (vLLM's default
        # allgather_reducescatter backend): a ring all-reduce's bytes of dp x T tokens over
        # the dp x tp GPUs, in place of the MoE block's TP all-reduce.
        if self.dp > 1:
            g, le = self.dp * tp, m.num_moe_layers
            if tp > 1:
                self._comm_tok -= le * ring * H * ba * link_tp
                self._comm_const -= le * lat_tp
            across = links is not None and g > links.gpus_per_node
            self._comm_tok += le * 2.0 * (g - 1) / g * self.dp * H * ba * (link_net if across else link_tp)
            self._comm_const += le * (e.allreduce_latency_s + 2 * (g - 1) * e.allreduce_hop_s)

    def _overheads_and_tiles(self) -> None:
        """Kernel and launch overheads, and the GEMM shapes of wave quantisation."""
        e, m, L = self.eff, self.model, self.model.num_layers
        gemm_k = e.kernel_overhead_s if e.gemm_kernel_overhead_s is None else e.gemm_kernel_overhead_s
        self._fixed = e.launch_overhead_s + L * (
            (KERNELS_PER_LAYER - GEMMS_PER_LAYER) * e.kernel_overhead_s + GEMMS_PER_LAYER * gemm_k
        )
        # Inside CUDA graphs the per-kernel costs are launches that the replay removes: a full
        # graph (uniform decode) launches once; piecewise graphs leave attention outside.
        self._pad = self.graphs.padded_sizes()
        self._c_piece = e.launch_overhead_s + L * e.kernel_overhead_s if self.graphs.mixed else self._fixed
        self._c_full = e.launch_overhead_s if self.graphs.full_decode else self._c_piece
        # Wave quantisation: per class, (seconds per output element of each GEMM, its N).
        self._tiles: tuple[tuple[tuple[float, int], ...], ...] | None = None
        if e.gemm_tile_m > 0 and e.gemm_tile_n > 0 and self.gpu.num_sms > 0 and not m.is_moe:
            peak_lin = self.peak_flops()[0]
            pj_f, lin_f = 1.0 / (peak_lin * e.of("proj")[0]), 1.0 / (peak_lin * e.of("mlp")[0])
            shapes = gemm_shapes(m, self.tp)
            self._tiles = tuple(
                tuple((2.0 * k * L * sec, n) for n, k in shapes[cls])
                for cls, sec in (("proj", pj_f), ("mlp", lin_f))
            )

    def _hot_coefficients(self) -> tuple[Any, ...]:
        """What ``batch_time`` unpacks, in its order. Beyond the classic roofline (blended
        roofs, row floors, wave quantisation) the T-dependent classes are cached per T."""
        e = self.eff
        refined = bool(e.roof_blend or self._el_floor or self._tiles)
        return (
            self._proj_f,
            self._proj_w,
            self._proj_a,
            self._mlp_f,
            self._mlp_w,
            self._mlp_a,
            self._router_f,
            self._router_w,
            self._num_experts,
            self._top_k,
            self._miss,
            self._pf_f,
            self._pf_kv,
            self._pf_tok,
            self._dec_f,
            self._dec_kv,
            self._dec_req,
            self._lm_f,
            self._lm_w,
            self._lm_req,
            self._comm_tok + (0.0 if refined else self._el_tok),
            self._samp_req + self._comm_req,
            self._fixed + self._comm_const,
            1.0 / e.roof_blend if e.roof_blend else 0.0,
            {} if refined else None,
        )

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
