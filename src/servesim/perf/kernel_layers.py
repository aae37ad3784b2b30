"""How ``KernelPerfModel`` composes one forward pass from the kernel tables: which GEMM,
attention, fused-MoE and collective curve times each operator of a layer, sharded as vLLM
shards it, and the elementwise kernels no table times (``MEM_OP_LATENCY_S``). The timing
of a step from these curves (tables on demand, the hot path) is ``perf.kernel_model``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from math import log
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec
from servesim.config.vllm_version import version_tuple
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.execution_path import DeepGemmRun
from servesim.perf.kernel_attention import attention_grid
from servesim.perf.kernel_comm import allreduce_curve, gather_scatter_curve
from servesim.perf.kernels import (
    ACTIVATION_QUANT_BYTES_MAX,
    FP8_COMPUTE_BOUND_RATIO_MAX,
    MAX_TOKENS,
    SM100_GPUS,
    KernelDatabase,
    LogCurve,
    extended_axis,
    gemm_m_curve,
    kernel_versions,
    load_database,
    load_served_gemm,
    roof_time,
)
from servesim.perf.linear_attention import kernel_request_ops, kernel_token_ops
from servesim.perf.sustained import SustainedClocks

#: Fixed time of one memory-bound elementwise kernel (a fused residual add and RMSNorm, the
#: gated activation, the embedding gather) on top of its bytes: the tables' own authors
#: compose a layer from their GEMM, attention, MoE and collective tables plus such "memory
#: ops", each ``bytes / (0.8 x HBM bandwidth) + 3 us`` (AIConfigurator's system files,
#: ``mem_empirical_constant_latency``, the same 3 us on A100, H100, H200, B200 and L40S).
#: At decode sizes the bytes are nothing and this latency is all a small kernel costs.
MEM_OP_LATENCY_S = 3e-6
#: cuBLAS's fp32 GEMM of a router's shape on Blackwell, measured: torch's ``F.linear`` of an
#: (M, 6144) by (6144, 256) product on GB200, in a CUDA graph, fp32 on the CUDA cores
#: ('highest' precision) and as TF32 ('high'), microseconds by M (the benchmark of vLLM's
#: BF16x3 router GEMM, vllm-project/vllm#47973, before its own kernel). Small M leaves most
#: SMs idle over a long K loop: 20 us at 4 tokens, 63 us from 32, where the bf16 tables take
#: about 4 us; the time is carried to the model's hidden size in proportion to K.
FP32_ROUTER_SM100_K = 6144
FP32_ROUTER_SM100 = {  # M: (fp32 us, TF32 us)
    1: (7.52, 10.9),
    4: (20.2, 12.0),
    8: (16.7, 12.0),
    16: (22.3, 12.2),
    32: (63.2, 19.9),
    48: (63.4, 20.0),
    64: (63.3, 20.1),
    96: (64.1, 20.2),
    128: (69.3, 20.2),
    256: (77.8, 22.6),
    512: (96.8, 25.8),
    1024: (111.0, 32.8),
}
#: MLA's projections (``_mla_ops``), which its measured prefill module holds too.
MLA_PROJECTIONS = ("gemm_qkv_a", "gemm_q_b", "gemm_uk", "gemm_uv", "gemm_o_proj")


def _version_distance(a: str, b: str) -> tuple[int, ...]:
    """How far two vLLM versions are apart (major, minor, patch differences), for ordering."""
    ta, tb = (*version_tuple(a), 0, 0, 0), (*version_tuple(b), 0, 0, 0)
    return tuple(abs(x - y) for x, y in zip(ta[:3], tb[:3]))


def _gemm_dtype(model: ModelSpec) -> str | None:
    """The GEMM table of the model's linear layers: fp8 checkpoints with 128x128 weight blocks
    (DeepSeek-style ``weight_block_size``) run vLLM's block-scaled fp8 GEMM, other fp8 ones
    the per-tensor fp8 GEMM, NVFP4 the nvfp4 GEMM; weight-only schemes keep 16-bit GEMMs."""
    if model.dtype == "fp8":
        return "fp8_block" if "block" in model.quant_method else "fp8"
    return {"bfloat16": "bfloat16", "float16": "bfloat16", "nvfp4": "nvfp4"}.get(model.dtype)


def mem_ops_per_step(model: ModelSpec) -> int:
    """The memory-bound elementwise kernels of one forward pass that no table times, as
    AIConfigurator composes a vLLM layer: two fused residual-add + RMSNorm kernels a layer,
    the gated activation of a dense MLP (an MoE layer's is inside the fused-MoE kernel),
    and the embedding gather."""
    return 2 * model.num_layers + (model.num_layers - model.num_moe_layers) + 1


def _per_rank(curve: LogCurve, dp: int) -> LogCurve:
    """``curve`` of the tokens of all ``dp`` ranks as a curve of one rank's tokens."""
    return curve if dp == 1 else LogCurve(np.exp(curve.lx) / dp, curve.ly)


class KernelLayerOps:
    """The operator curves of one forward pass (mixed into ``KernelPerfModel``, whose
    constructor sets the attributes below before it builds them)."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int
    ep: int
    dp: int
    eff: Efficiencies
    moe_backend: str
    deep_gemm: DeepGemmRun  # how the version runs DeepGEMM's MoE (perf.execution_path)
    db: KernelDatabase | None
    links: LinkSpec | None
    kv_dtype_bytes: float
    cuda_graph_max_tokens: int
    sources: dict[str, str]
    fp32_matmul: str  # engine.float32_matmul_precision
    clocks: SustainedClocks | None  # the GPU's sustained clocks (None: full clocks throughout)
    hot: dict[str, LogCurve]  # the operators' curves at sustained clocks, by name
    _token_ops: list[tuple[str, LogCurve, float]]  # _build_token_ops's answer, built once

    def _peak(self, dtype: str | None) -> float:
        """The dense peak of the tensor cores a dtype's matmuls run on: NVFP4 at twice FP8's,
        MXFP4 weights with MXFP8 activations at FP8's, weight-only schemes (16-bit
        activations) at bf16's."""
        g = self.gpu
        if dtype == "nvfp4":
            return 2.0 * g.flops_for("fp8")
        return g.flops_for("fp8" if dtype in ("fp8", "fp8_block", "w4a8_mxfp4_mxfp8") else "bfloat16")

    def _keep_hot(self, name: str, curve: LogCurve, flops_per_x: float, dtype: str | None) -> LogCurve:
        """``curve`` as measured; its sustained-clock twin kept in ``hot`` (``perf.sustained``)."""
        if self.clocks is not None:
            xs = np.exp(curve.lx)
            hot = self.clocks.slowed(np.exp(curve.ly), flops_per_x * xs, self._peak(dtype))
            self.hot[name] = LogCurve(xs, np.log(hot))
        return curve

    def _gemm_roof(self, dtype: str) -> Any:
        wb = 2.0 if dtype == "bfloat16" else 1.0
        ab = 2.0 if dtype == "bfloat16" else 1.0
        peak = self.gpu.flops_for("bfloat16" if dtype == "bfloat16" else "fp8")
        bw, e = self.gpu.mem_bw, self.eff

        def roof(m: np.ndarray, n: float, k: float) -> np.ndarray:
            return roof_time(
                2.0 * m * n * k,
                m * k * ab + n * k * wb + m * n * 2.0,
                peak,
                bw,
                e.linear_compute,
                e.linear_memory,
            )

        return roof

    def _gemm_table(
        self, dtype: str | None
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None, str]:
        """The GEMM table of ``dtype`` and a note: this database's, unless it is an FP8 table
        that fails a check of what vLLM's served FP8 linear layer does (``_unserved``), then
        the same GPU's table of the nearest other vLLM version that passes both, else its
        served-GEMM table (``SERVED_GEMM_FILES``) if that passes, else this database's with
        the reason in the note.

        - Activation bytes: a table that spends more per activation element than vLLM's
          quantization moves (``ACTIVATION_QUANT_BYTES_MAX``) timed the quantization
          unfused: H100's and H200's 0.14.0 FP8 GEMMs read from their 0.19.0 tables. The
          GEMM kernels are the same in the versions these tables stand for (vLLM 0.12-0.19
          on SM90: CUTLASS ``cutlass_scaled_mm`` for per-tensor FP8, DeepGEMM's
          ``fp8_gemm_nt`` or CUTLASS's block-scaled GEMM for 128x128 blocks,
          ``W8A8BlockFp8LinearOp`` in ``quantization/utils/fp8_utils.py``), and the two
          collections' bf16 GEMMs agree within 1%.
        - Compute-bound ratio: a table slower than the same collection's bf16 GEMMs at
          compute-bound shapes (``FP8_COMPUTE_BOUND_RATIO_MAX``; FP8 has twice the dense
          rate) timed a kernel configuration vLLM does not serve. B200's 0.19.0 per-tensor
          FP8 table is one (1.14x bf16's time): AIConfigurator's collector built that layer
          with static activation scales (``Fp8Config(activation_scheme="static")``), which
          vLLM 0.14-0.19 runs on SM100 with FlashInfer's ``bmm_fp8(..., "auto")``
          (``FlashInferFP8ScaledMMLinearKernel`` first in ``_POSSIBLE_FP8_KERNELS``,
          ``vllm/model_executor/kernels/linear/__init__.py`` of 0.19.0), and timed it
          outside FlashInfer's autotuner, where ``AutoTuner.choose_one`` returns the first
          runner's fallback tactic (FlashInfer 0.6.6, ``gemm/gemm_base.py``,
          ``fp8_gemm_sm100``); vLLM serves it autotuned (``kernel_warmup.flashinfer_autotune``:
          always on SM90 and later in 0.14.0, from -O1 in 0.19.0, -O2 the default). What
          B200 FP8 GEMMs read instead is vLLM 0.24.0's table of its CUTLASS ``scaled_mm``
          with per-token dynamic scales
          (``CutlassFP8ScaledMMLinearKernel``, 0.72x bf16's time; its SM100 tile
          configurations are those of vLLM 0.10.1 and 0.19.0): the kernel vLLM 0.10-0.19
          serve dynamic-scale FP8 checkpoints with, and 0.10's static ones. The autotuned
          ``bmm_fp8`` that 0.14-0.19 serve static checkpoints with (the catalog's
          Llama-3.1-70B-FP8) is not measured: that table stands for it, a simplification.
          The two collections' bf16 GEMMs agree (median 0.995 at m = 8192). B200's 0.19.0
          block-FP8 table (1.05x) and B300's, GB200's and L40S's tables that fail keep
          their own: no other table of theirs passes."""
        db = self.db
        if db is None or not dtype:
            return None, ""
        table = db.gemm(dtype)
        if table is None or dtype not in ("fp8", "fp8_block"):
            return table, ""
        why = self._unserved(db, dtype)
        if not why:
            return table, ""
        for v in sorted(kernel_versions(self.gpu.name), key=lambda v: _version_distance(v, db.version)):
            other = load_database(self.gpu.name, v) if v != db.version else None
            if other is not None and other.gemm(dtype) is not None and not self._unserved(other, dtype):
                return other.gemm(dtype), f" of vLLM {v} ({why})"
        served = load_served_gemm(self.gpu.name)
        if served is not None and served.gemm(dtype) is not None and not self._unserved(served, dtype):
            return served.gemm(dtype), f" of vLLM {served.version}'s served kernel ({why})"
        return table, f" ({why}; no other version's table)"

    def _unserved(self, db: KernelDatabase, dtype: str) -> str:
        """Why ``db``'s ``dtype`` GEMM table does not time vLLM's served FP8 linear layer
        (``_gemm_table``), or ''."""
        spent = db.activation_quant_bytes(dtype, self.gpu.mem_bw)
        if spent > ACTIVATION_QUANT_BYTES_MAX:
            return (
                f"{db.version}'s {dtype} table spends {spent:.0f} bytes an activation element "
                "beyond bf16: its quantization unfused"
            )
        ratio = db.compute_bound_ratio(dtype)
        if ratio > FP8_COMPUTE_BOUND_RATIO_MAX:
            return (
                f"{db.version}'s {dtype} table takes {ratio:.2f}x its bf16 GEMMs' time at "
                "compute-bound shapes: a kernel configuration vLLM does not serve"
            )
        return ""

    def _gemm(self, name: str, n: int, k: int, dtype: str | None) -> LogCurve:
        """The seconds-vs-m curve of one GEMM per layer (table, else roofline)."""
        table, note = self._gemm_table(dtype)
        roof = self._gemm_roof(dtype or "bfloat16")
        if table is None:
            ms = extended_axis(np.array([1.0]), 1.0, MAX_TOKENS)
            self.sources[name] = f"roofline (no {dtype or self.model.dtype} GEMM table)"
            return LogCurve(ms, np.log(roof(ms, n, k)))
        ms = extended_axis(table[0], 1.0, MAX_TOKENS)
        off = [
            f"{a}={v} outside {int(ax[0])}-{int(ax[-1])}"
            for a, v, ax in (("n", n, table[1]), ("k", k, table[2]))
            if v > ax[-1] or v < ax[0]
        ]
        self.sources[name] = (
            f"table gemm {dtype} n={n} k={k}"
            + (f" ({', '.join(off)}: roofline-scaled)" if off else "")
            + note
        )
        return self._keep_hot(
            name, LogCurve(ms, gemm_m_curve(table, n, k, ms, roof) + log(1e-3)), 2.0 * n * k, dtype
        )

    def _build_token_ops(self) -> list[tuple[str, LogCurve, float]]:
        """(name, seconds-vs-T curve, multiplier) of every operator whose time depends on T alone."""
        m, tp, L = self.model, self.tp, self.model.num_layers
        dt = _gemm_dtype(m)
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
            ops.append(("moe", self._moe(moe_dtype(m, _gemm_dtype(m))), moe_layers))
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

    def _router(self) -> LogCurve:
        """The MoE router's GEMM (hidden size to experts, replicated on every rank), bf16 from
        the tables. An fp32 router (``ModelSpec.router_fp32``, vLLM 0.17-0.19's ``F.linear``
        of fp32 weights) casts the hidden states to fp32 (fused by torch.compile into the
        norm before it: its bytes, 2 read and 4 written an element, no kernel of its own) and
        multiplies in fp32, under vLLM's default 'highest' precision on the CUDA cores, as
        TF32 ('high', 'medium') on the tensor cores: on Blackwell as cuBLAS measured on GB200
        (``FP32_ROUTER_SM100``, carried to the hidden size in proportion to K), elsewhere at
        the fp32 peak (TF32: half the bf16 peak; ``Efficiencies``'s linear fractions); at least
        the bf16 table's time at the shape. Simplified: Hopper's fp32 GEMMs are unmeasured,
        the roofline a lower bound at decode sizes; vLLM's later fp32 router kernels (a GEMV
        for small batches, BF16x3) are not modelled."""
        m, g, e = self.model, self.gpu, self.eff
        E, H = m.num_experts, m.hidden_size
        curve = self._gemm("gemm_router", E, H, "bfloat16")
        if not m.router_fp32:
            return curve
        xs = np.exp(curve.lx)
        simt = self.fp32_matmul == "highest"
        peak = g.flops_for("float32") if simt else g.flops_for("bfloat16") / 2
        gemm = np.maximum(
            np.exp(curve.ly),
            roof_time(
                2.0 * xs * E * H,
                4.0 * (xs * H + E * H + xs * E),
                peak,
                g.mem_bw,
                e.linear_compute,
                e.linear_memory,
            ),
        )
        if g.name in SM100_GPUS:
            ms = sorted(FP32_ROUTER_SM100)
            us = [FP32_ROUTER_SM100[k][0 if simt else 1] for k in ms]
            measured = np.interp(np.log(xs), np.log(ms), us) * 1e-6 * H / FP32_ROUTER_SM100_K
            gemm = np.maximum(gemm, measured)  # past 1024 tokens: the roofline at the fp32 peak
        cast = xs * H * 6.0 / (0.8 * g.mem_bw)
        self.hot.pop("gemm_router", None)  # at sustained clocks as timed here
        self.sources["gemm_router"] += f"; fp32 router: the GEMM in {'fp32' if simt else 'TF32'}" + (
            ", cuBLAS as measured on GB200" if g.name in SM100_GPUS else " at the roofline"
        )
        return LogCurve(xs, np.log(gemm + cast))

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

    def _block_fp8_gemm(self) -> tuple[Callable[[np.ndarray, int, int], np.ndarray] | None, str]:
        """Seconds of a dense block-FP8 GEMM at every m of an array, (m x k) @ (k x n), from
        the table the linear layers read (``_gemm_table``; None: the GPU has none), and which
        table: what DeepGEMM's MoE is timed from (``kernel_moe.deep_gemm_curve``)."""
        table, note = self._gemm_table("fp8_block")
        if table is None or self.db is None:
            return None, ""
        roof = self._gemm_roof("fp8_block")

        def seconds(ms: np.ndarray, n: int, k: int) -> np.ndarray:
            return np.exp(gemm_m_curve(table, n, k, np.asarray(ms, dtype=np.float64), roof)) * 1e-3

        return seconds, f"table gemm fp8_block{note or ' of vLLM ' + self.db.version}"

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
                m, self.gpu, self.tp, self.kv_dtype_bytes, _gemm_dtype(m) or "bfloat16", proj_s, self.eff
            )
            if hit is not None:
                self.sources[name] = hit[1]
                return hit[0]
        grid, self.sources[name] = attention_grid(
            prefix, m, self.gpu, self.db, self.tp, self.kv_dtype_bytes, self.eff
        )
        return grid
