"""The roofline's coefficients: seconds per unit of each aggregate batch statistic, computed
once for a model on its GPUs (``RooflineCoefficients``, the base of
``perf.roofline.RooflinePerfModel``, whose ``batch_time`` is a few multiplies and ``max``
calls over them): the work coefficients (``perf.work``) over the compute and memory roofs,
the communication per step (``comm_coefficients``: tensor-parallel all-reduces, ring: 2
(tp-1)/tp x message / link bandwidth + latency, two per layer as in Megatron-style TP; the
logits gather; pipeline send/receive; the gathers and scatters of vLLM's data-parallel
ranks around each MoE layer), the kernels' launch overheads inside and outside CUDA graphs,
and the GEMM tiles of wave quantisation.
"""

from __future__ import annotations

from typing import Any

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.cuda_graphs import EAGER_PLAN, GraphPlan
from servesim.perf.efficiencies import GEMMS_PER_LAYER, KERNELS_PER_LAYER, Efficiencies, gemm_shapes
from servesim.perf.work import activation_dtype, work_coefficients
from servesim.perf.work_step import WorkCounter


class RooflineCoefficients:
    """The seconds-per-unit coefficients of ``RooflinePerfModel`` (see the module docstring)."""

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
        """All-reduces, the logits gather and pipeline sends (``comm_coefficients``)."""
        self._comm_tok, self._comm_const, self._comm_req = comm_coefficients(
            self.model, self.gpu, self.eff, self.tp, self.pp, self.dp, self.links
        )

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


def comm_coefficients(
    m: ModelSpec, gpu: GpuSpec, e: Efficiencies, tp: int, pp: int, dp: int, links: LinkSpec | None
) -> tuple[float, float, float]:
    """(seconds per token, constant seconds, seconds per request) of one step's communication
    on one TP rank of ``m`` at ``tp`` x ``pp`` (``dp`` data-parallel ranks sharing an MoE
    model's experts; 1 for a dense model): all-reduces, the logits gather and pipeline sends.

    Without ``links`` every transfer uses the GPU's interconnect. With them, a TP group
    larger than a node rings over the network, and of the pp - 1 stage boundaries, those
    between nodes (stages fill nodes in order) use the network.
    """
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
    comm_tok = 2 * L * ring * H * ba * link_tp if tp > 1 else 0.0
    lat_tp += 2 * (tp - 1) * e.allreduce_hop_s
    comm_const = (2 * L + 1) * lat_tp if tp > 1 else 0.0
    comm_req = (tp - 1) / tp * m.vocab_size * ba * link_tp  # logits gather
    # Pipeline: hidden states and residual cross pp - 1 stage boundaries.
    comm_tok += 2 * H * ba * ((pp - 1 - num_net) * link_pp + num_net * link_net)
    comm_const += (pp - 1 - num_net) * lat_pp + num_net * lat_net
    # Expert parallelism inside the TP group moves no tokens: every rank holds the batch
    # after the attention all-reduce and the MoE block's all-reduce (above) sums the
    # ranks' expert outputs, as vLLM's FusedMoE does with dp_size 1. DP ranks gather
    # their tokens before each MoE layer and scatter the sums back (vLLM's default
    # allgather_reducescatter backend): a ring all-reduce's bytes of dp x T tokens over
    # the dp x tp GPUs, in place of the MoE block's TP all-reduce.
    if dp > 1:
        g, le = dp * tp, m.num_moe_layers
        if tp > 1:
            comm_tok -= le * ring * H * ba * link_tp
            comm_const -= le * lat_tp
        across = links is not None and g > links.gpus_per_node
        comm_tok += le * 2.0 * (g - 1) / g * dp * H * ba * (link_net if across else link_tp)
        comm_const += le * (e.allreduce_latency_s + 2 * (g - 1) * e.allreduce_hop_s)
    return comm_tok, comm_const, comm_req
