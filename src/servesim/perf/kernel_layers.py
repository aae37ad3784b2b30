"""How ``KernelPerfModel`` composes one forward pass from the kernel tables: which GEMM
(``perf.kernel_gemms``), attention, fused-MoE and collective curve times each operator of a
layer, sharded as vLLM shards it, and the elementwise kernels no table times
(``MEM_OP_LATENCY_S``). The timing
of a step from these curves (tables on demand, the hot path) is ``perf.kernel_model``'s.
"""

from __future__ import annotations

import numpy as np

from servesim.catalog.gpus import LinkSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.kernel_attention import attention_grid
from servesim.perf.kernel_comm import allreduce_curve, gather_scatter_curve
from servesim.perf.kernel_curves import LogCurve
from servesim.perf.kernel_gemms import KernelGemms, gemm_dtype
from servesim.perf.kernels import (
    SM100_GPUS,
    KernelDatabase,
    kernel_versions,
    load_database,
)
from servesim.perf.linear_attention import kernel_request_ops, kernel_token_ops
from servesim.perf.moe_backend import DeepGemmRun

#: Fixed time of one memory-bound elementwise kernel (a fused residual add and RMSNorm, the
#: gated activation, the embedding gather) on top of its bytes: the tables' own authors
#: compose a layer from their GEMM, attention, MoE and collective tables plus such "memory
#: ops", each ``bytes / (0.8 x HBM bandwidth) + 3 us`` (AIConfigurator's system files,
#: ``mem_empirical_constant_latency``, the same 3 us on A100, H100, H200, B200 and L40S).
#: At decode sizes the bytes are nothing and this latency is all a small kernel costs.
MEM_OP_LATENCY_S = 3e-6
#: MLA's projections (``_mla_ops``), which its measured prefill module holds too.
MLA_PROJECTIONS = ("gemm_qkv_a", "gemm_q_b", "gemm_uk", "gemm_uv", "gemm_o_proj")


def mem_ops_per_step(model: ModelSpec) -> int:
    """The memory-bound elementwise kernels of one forward pass that no table times, as
    AIConfigurator composes a vLLM layer: two fused residual-add + RMSNorm kernels a layer,
    the gated activation of a dense MLP (an MoE layer's is inside the fused-MoE kernel),
    and the embedding gather."""
    return 2 * model.num_layers + (model.num_layers - model.num_moe_layers) + 1


def _per_rank(curve: LogCurve, dp: int) -> LogCurve:
    """``curve`` of the tokens of all ``dp`` ranks as a curve of one rank's tokens."""
    return curve if dp == 1 else LogCurve(np.exp(curve.lx) / dp, curve.ly)


class KernelLayerOps(KernelGemms):
    """The operator curves of one forward pass (mixed into ``KernelPerfModel``, whose
    constructor sets the attributes below, and ``KernelGemms``', before it builds them)."""

    tp: int
    ep: int
    dp: int
    moe_backend: str
    deep_gemm: DeepGemmRun  # how the version runs DeepGEMM's MoE (perf.moe_backend)
    links: LinkSpec | None
    kv_dtype_bytes: float
    cuda_graph_max_tokens: int
    _token_ops: list[tuple[str, LogCurve, float]]  # _build_token_ops's answer, built once

    def _build_token_ops(self) -> list[tuple[str, LogCurve, float]]:
        """(name, seconds-vs-T curve, multiplier) of every operator whose time depends on T alone."""
        m, tp, L = self.model, self.tp, self.model.num_layers
        dt = gemm_dtype(m)
        H = m.hidden_size
        q = m.num_attention_heads // tp * m.head_dim
        kv = m.kv_heads_per_rank(tp) * m.head_dim
        qg, La = (2 * q if m.attn_output_gate else q), m.num_attention_layers  # gated: q and its gate
        ops: list[tuple[str, LogCurve, float]] = (
            self._mla_ops(dt)
            if m.is_mla
            else [
                ("gemm_qkv", self._gemm("gemm_qkv", qg + 2 * kv, H, dt), La),
                ("gemm_o_proj", self._gemm("gemm_o_proj", H, q, dt), La),
            ]
        )
        ops += kernel_token_ops(m, tp, self.gpu, self.eff, self._gemm, dt, self.sources)
        gate = 2 if m.mlp_gated else 1
        dense_layers = L - m.num_moe_layers
        if m.is_moe:
            from servesim.perf.moe_shapes import moe_dtype  # MoE models only

            moe_layers = m.num_moe_layers
            ops.append(("gemm_router", self._router(), moe_layers))
            ops.append(("moe", self._moe(moe_dtype(m, gemm_dtype(m))), moe_layers))
            if m.shared_expert_intermediate_size:  # every token through the shared expert(s)
                sw = m.shared_expert_intermediate_size // tp
                gate_up = self._gemm("gemm_shared_gate_up", gate * sw, H, dt)
                ops.append(("gemm_shared_gate_up", gate_up, moe_layers))
                down = self._gemm("gemm_shared_down", H, sw, dt)
                ops.append(("gemm_shared_down", down, moe_layers))
        if dense_layers:
            width = m.intermediate_size // tp
            ops.append(("gemm_gate_up", self._gemm("gemm_gate_up", gate * width, H, dt), dense_layers))
            ops.append(("gemm_down", self._gemm("gemm_down", H, width, dt), dense_layers))
        if self.dp > 1:  # the ranks' tokens gathered and scattered back around each MoE layer
            curve, self.sources["gather_scatter"] = gather_scatter_curve(
                self.gpu, self._comm_db(self.dp * tp), self.dp * tp, H, self.eff
            )
            ops.append(("gather_scatter", _per_rank(curve, self.dp), m.num_moe_layers))
        if tp > 1:  # attention's and the MLP's (with DP ranks, the dense layers' only)
            ops.append(("allreduce", self._allreduce(H), 2 * L - (m.num_moe_layers if self.dp > 1 else 0)))
            if m.qk_norm_allreduce:  # q and k variances: 2 fp32 per token = 4 bf16 elements
                ops.append(("allreduce_qk_norm", self._allreduce(4), L))
        # Expert parallelism inside the TP group (vLLM's FusedMoE with dp_size 1) moves no
        # tokens: every rank holds the whole batch after the attention all-reduce, runs its
        # own experts on it, and the MoE block's all-reduce (counted above) sums the ranks'
        # outputs (``FusedMoEParallelConfig.use_all2all_kernels`` needs dp_size > 1).
        return ops

    def _mla_ops(self, dt: str | None) -> list[tuple[str, LogCurve, float]]:
        """MLA's projections as vLLM's DeepSeek-V2/V3 layers run them at decode: the fused
        query and latent down-projection (``fused_qkv_a_proj``, replicated on every rank),
        the query up-projection ``q_b`` (split by heads), the absorbed key and value
        up-projections (two per-head batched GEMMs of kv_lora_rank x qk_nope and v_head_dim x
        kv_lora_rank, priced as one GEMM of the same weights) and the output projection."""
        m, tp, L, H = self.model, self.tp, self.model.num_layers, self.model.hidden_size
        heads = m.num_attention_heads // tp
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        latent = m.kv_lora_rank + m.qk_rope_head_dim
        if m.q_lora_rank:
            ops = [
                ("gemm_qkv_a", self._gemm("gemm_qkv_a", m.q_lora_rank + latent, H, dt), L),
                ("gemm_q_b", self._gemm("gemm_q_b", heads * qk, m.q_lora_rank, dt), L),
            ]
        else:
            ops = [("gemm_qkv_a", self._gemm("gemm_qkv_a", heads * qk + latent, H, dt), L)]
        return [
            *ops,
            ("gemm_uk", self._gemm("gemm_uk", heads * m.kv_lora_rank, m.qk_nope_head_dim, "bfloat16"), L),
            ("gemm_uv", self._gemm("gemm_uv", heads * m.v_head_dim, m.kv_lora_rank, "bfloat16"), L),
            ("gemm_o_proj", self._gemm("gemm_o_proj", H, heads * m.v_head_dim, dt), L),
        ]

    def _moe(self, dtype: str | None) -> LogCurve:
        """One MoE layer vs this rank's tokens: with DP ranks, the experts of all ``dp x tp``
        GPUs run on ``dp`` times as many."""
        from servesim.perf.kernel_moe import moe_curve  # MoE models only

        m, g = self.model, self.tp * self.dp
        gemm, gemm_source = self._block_fp8_gemm() if self.moe_backend == "deep_gemm" else (None, "")
        curve, self.sources["moe"] = moe_curve(
            m,
            self.gpu,
            self.db,
            g,
            self.ep,
            dtype,
            self.eff,
            self.moe_backend,
            self.deep_gemm,
            gemm,
            MEM_OP_LATENCY_S,
            gemm_source,
        )
        # Per token of the step: its top-k experts' gate/up and down GEMMs, the experts spread
        # over the group's GPUs.
        gate = 3 if m.mlp_gated else 2
        flops = 2.0 * m.num_experts_per_tok * m.hidden_size * gate * m.moe_intermediate_size / g
        if not self.sources["moe"].startswith("roofline"):
            self._keep_hot("moe", curve, flops, dtype)
        curve = _per_rank(curve, self.dp)
        if "moe" in self.hot:
            self.hot["moe"] = _per_rank(self.hot["moe"], self.dp)
        return curve

    def _comm_db(self, num_gpus: int) -> KernelDatabase | None:
        """The tables for a collective over ``num_gpus`` GPUs (None: a group across nodes)."""
        return None if self.links is not None and num_gpus > self.links.gpus_per_node else self.db

    def _allreduce(self, width: int) -> LogCurve:
        """Seconds of one all-reduce of T x ``width`` bf16 elements, vs T (``kernel_comm``); a
        Blackwell GPU whose own tables lack the group size (GB200's trays of 4 GPUs at TP 8)
        reads B200's (NVLink 5 within an 8-GPU board)."""
        db = self._comm_db(self.tp)
        curve, src = allreduce_curve(self.gpu, db, self.tp, width, self.eff, self.cuda_graph_max_tokens)
        if (
            src.startswith("roofline")
            and db is not None
            and self.gpu.name in SM100_GPUS
            and self.gpu.name != "B200"
            and db.version in kernel_versions("B200")
        ):
            curve, src = allreduce_curve(
                self.gpu,
                load_database("B200", db.version),
                self.tp,
                width,
                self.eff,
                self.cuda_graph_max_tokens,
            )
            src += " of B200"
        self.sources["allreduce"] = src
        return curve

    def _build_request_ops(self) -> list[tuple[str, LogCurve, float]]:
        m = self.model
        vt = -(-m.vocab_size // self.tp)
        lm = [("lm_head", self._gemm("lm_head", vt, m.hidden_size, "bfloat16"), 1.0)]
        return lm + kernel_request_ops(m, self.tp, self.gpu, self.eff, self.sources)

    def _attention(self, prefix: str, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(log batch axis, length axis, log seconds [batch, length]) of all layers' attention
        (``perf.kernel_attention``: tables, sliding-window layers, MLA's latent decode; an MLA
        prefill from the measured module less its projections, ``perf.kernel_mla``)."""
        m = self.model
        if prefix == "ctx" and m.is_mla and self.db is not None:
            from servesim.perf.kernel_mla import mla_prefill_grid  # MLA models only

            proj = [c for n, c, _ in self._token_ops if n in MLA_PROJECTIONS]

            def proj_s(t: np.ndarray) -> np.ndarray:
                """Seconds of the MLA projections at ``t`` tokens (summed in order from 0)."""
                total = np.zeros(np.shape(t))
                for c in proj:
                    total = total + c.at_many(t)
                return total

            hit = mla_prefill_grid(
                m, self.gpu, self.tp, self.kv_dtype_bytes, gemm_dtype(m) or "bfloat16", proj_s, self.eff
            )
            if hit is not None:
                self.sources[name] = hit[1]
                return hit[0]
        grid, self.sources[name] = attention_grid(
            prefix, m, self.gpu, self.db, self.tp, self.kv_dtype_bytes, self.eff
        )
        return grid
