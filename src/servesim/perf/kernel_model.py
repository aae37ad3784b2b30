"""Measured-kernel performance model: one iteration's time from vLLM's measured kernels.

``KernelPerfModel`` implements the same interface as ``RooflinePerfModel`` (``batch_time``
from aggregate ``BatchStats``, O(1)) but times each operator of the forward pass from the
kernel database (``perf.kernels``: NVIDIA AIConfigurator's measurements of vLLM 0.14.0 and
0.19.0 kernels), on one TP rank, all layers::

    step = L x (QKV GEMM + o_proj GEMM)     (MLA: q_a/kv_a, q_b, absorbed k/v, o_proj GEMMs)
         + dense layers x (gate_up + down GEMMs)
         + MoE layers x (router GEMM + fused MoE [+ shared-expert gate_up + down GEMMs])
         + L x 2 all-reduces of T x hidden (TP > 1; custom all-reduce below 8 MiB, NCCL above)
         + L x prefill attention + L x decode attention
         + LM head GEMM (one row per request) + sampling + logits gather
         + elementwise kernels (norms, rotary, activation: the roofline's class)
         + launch and per-kernel overheads of the kernels not measured (the roofline's)

and a step holding a prefill runs its compute-bound work past the GPU's onset (25-55 ms) at
the slower clocks it sustains at its power limit (``perf.sustained``: every GEMM, fused-MoE
and prefill-attention curve has a twin at those clocks).

Shapes are sharded as vLLM shards them: column-parallel QKV and gate/up (N divided by TP),
row-parallel o_proj and down (K divided by TP), vocabulary-parallel LM head, and for MoE
the fused-MoE table's ``moe_tp`` = TP / EP and ``moe_ep`` = EP.

How the aggregate statistics map onto the tables:

- GEMMs and MoE take m = T tokens of the step (LM head: m = requests);
- decode attention: a batch of ``num_decode_reqs`` requests, each attending to the mean
  context ``sum_decode_context / num_decode_reqs`` (the table's kernels are timed with
  equal lengths);
- prefill attention: ``num_prefill_reqs`` causal prefills of the length ``s`` whose work
  equals the step's, ``num_prefill_reqs x s^2 / 2 = prefill_attn_work`` (exact for whole
  prompts of one length; chunks on top of cached context get the same (query, key) pairs
  as a longer full prefill);
- all-reduce: inside a CUDA graph for steps of at most ``cuda_graph_max_tokens`` tokens
  (vLLM's largest capture size, 512 by default), eager above.

Which table times each operator is ``perf.kernel_layers``'s (mixed in). The fused MoE
(``perf.kernel_moe``) and attention (``perf.kernel_attention``: sliding-window
layers, MLA's latent decode) and the collectives (``perf.kernel_comm``) say there which
table they take. Every operator without a table (GPU, dtype, shape class, MoE shape, TP
size) is timed by the roofline formula for that operator; ``sources`` says where each
operator's time comes from and ``fallbacks`` lists the ones on the roofline. The T-dependent
terms are tabulated per token count (grown by doubling on demand) and the attention rows per batch size, so a
step costs a few list reads and two 1-D interpolations (``perf.kernel_step_tables``, mixed in).
"""

from __future__ import annotations

from math import log
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec, LinkSpec
from servesim.catalog.models import ModelSpec
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats
from servesim.perf.cuda_graphs import EAGER_PLAN, GraphPlan, eager_kernels_per_layer, reference_kernels
from servesim.perf.efficiencies import KERNELS_PER_LAYER, Efficiencies
from servesim.perf.kernel_layers import MEM_OP_LATENCY_S, KernelLayerOps, mem_ops_per_step
from servesim.perf.kernel_step import KernelStepTime, Row, past_onset, row_time
from servesim.perf.kernel_step_tables import KernelStepTables
from servesim.perf.kernels import KernelDatabase, kernel_versions, load_database
from servesim.perf.moe_backend import DeepGemmRun, deep_gemm_run
from servesim.perf.pipelined import MicroBatchShare
from servesim.perf.roofline import RooflinePerfModel, RooflineWork
from servesim.perf.sustained import SustainedClocks, sustained_clocks

#: vLLM's largest CUDA-graph capture size by default (``max_cudagraph_capture_size``).
CUDA_GRAPH_MAX_TOKENS = 512
#: Host time per layer to launch a step that runs without CUDA graphs (more tokens than the
#: largest capture size, a step holding a prefill under FULL_DECODE_ONLY, or
#: ``enforce_eager``): vLLM then runs the torch.compile'd layers eagerly, the CPU issuing
#: every kernel (Inductor's Triton launches, attention's metadata, eager all-reduces), and the
#: GPU cannot finish the step before the host has issued it. The kernel tables are timed
#: inside CUDA graphs or in isolation and do not hold it. Fitted on the measured
#: Llama-3.1-70B serving runs alone, with their launch scripts' settings (docs/fidelity.md
#: section 5: the other models' runs are its held-out check); it bounds a step from below,
#: it is not added.
EAGER_HOST_S_PER_LAYER = 0.8e-3


class KernelPerfModel(KernelLayerOps, KernelStepTables, RooflineWork):
    """Step time of ``model`` on ``tp`` x ``pp`` GPUs from measured vLLM kernels (PerfModel)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int = 1,
        pp: int = 1,
        kv_dtype_bytes: float | None = None,
        *,
        version: str | None = None,
        links: LinkSpec | None = None,
        ep: int = 1,
        expert_imbalance: float = 1.0,
        cuda_graph_max_tokens: int = CUDA_GRAPH_MAX_TOKENS,
        graphs: GraphPlan | None = None,
        eager_host_s_per_layer: float | None = None,
        dp: int = 1,
        moe_backend: str = "auto",
        deep_gemm: DeepGemmRun | None = None,
        sustained: bool = True,
        fp32_matmul: str = "highest",
    ) -> None:
        """``version``: the vLLM version whose kernels to use (None: the newest with tables
        for this GPU). ``graphs``: the engine's CUDA-graph plan (``perf.cuda_graphs``; None:
        eager, no padding, every kernel launched, all-reduces from the CUDA-graph table up to
        ``cuda_graph_max_tokens``); with a plan, steps up to its largest capture size are
        timed at the padded size and all-reduces use the CUDA-graph table exactly there,
        and a step above it lasts at least ``eager_host_s_per_layer`` x layers (the host
        launching every kernel itself; None: ``EAGER_HOST_S_PER_LAYER``, read when the model
        is built, so that the silicon suite's cross-group check can refit it).
        ``dp`` > 1: one of vLLM's data-parallel ranks of an MoE model, its expert layers run
        on the tokens of all ``dp`` ranks (each taken to hold a batch like this one) over the
        ``dp x tp`` GPUs, the tokens gathered and scattered back around each. ``moe_backend``:
        ``engine.moe_backend``; ``deep_gemm``: how the engine's version runs DeepGEMM's MoE
        (``perf.moe_backend.deep_gemm_run``; None: the default version's). ``sustained``:
        a step's compute-bound work past the GPU's onset runs at its sustained clocks where
        they are measured (``perf.sustained``; ``hardware.sustained_clocks``). ``fp32_matmul``:
        ``engine.float32_matmul_precision`` (an fp32 router on the CUDA cores, or TF32). Other
        arguments as ``RooflinePerfModel``'s, which times the operators without tables and
        gives FLOPs and bytes (for MFU/MBU)."""
        if graphs is not None:
            cuda_graph_max_tokens = graphs.max_size if pp == 1 else 0
        self.graphs = graphs if graphs is not None and pp == 1 else EAGER_PLAN
        self._pad = np.asarray(self.graphs.padded_sizes() or [0], np.float64)
        self.roofline = RooflinePerfModel(
            model,
            gpu,
            tp=tp,
            pp=pp,
            kv_dtype_bytes=kv_dtype_bytes,
            links=links,
            ep=ep,
            expert_imbalance=expert_imbalance,
            dp=dp,
        )
        self.model, self.gpu, self.tp, self.pp, self.ep = model, gpu, tp, pp, ep
        self.moe_backend, self.fp32_matmul = moe_backend, fp32_matmul
        self.deep_gemm = deep_gemm if deep_gemm is not None else deep_gemm_run(None, gpu)
        self.dp = self.roofline.dp  # 1 for a dense model, whose DP ranks share nothing
        self.links, self.cuda_graph_max_tokens = links, cuda_graph_max_tokens
        self.kv_dtype_bytes = self.roofline.kv_dtype_bytes
        self.eff = Efficiencies()
        self._load_tables(version, sustained)
        self._layers = model.num_layers
        self._token_ops = self._build_token_ops()
        self._req_ops = self._build_request_ops()
        self._prefill = self._attention("ctx", "attn_prefill")
        self._decode = self._attention("gen", "attn_decode")
        self._elementwise_and_sampling()
        self._launch_costs()
        self._build_step(eager_host_s_per_layer, floored=graphs is not None and pp == 1)
        if pp == 1:
            # Whole-count steps go straight to the (compiled) step function: the engine calls
            # it without an interpreted frame. (A pipeline micro-batch's fractional share
            # needs the method below; PipelinedPerfModel only wraps models with pp > 1.)
            self.batch_time = self.step.batch_time  # type: ignore[method-assign]

    # ------------------------------------------------------------------ construction

    def _load_tables(self, version: str | None, sustained: bool) -> None:
        """The kernel tables of ``version`` on this GPU (None: the newest it has; none at all:
        every operator on the roofline) and its sustained clocks."""
        gpu = self.gpu
        versions = kernel_versions(gpu.name)
        if version is not None and version not in versions:
            raise ValueError(
                f"no kernel tables for vLLM {version} on {gpu.name} (have: {', '.join(versions) or 'none'})"
            )
        self.version = version or (versions[-1] if versions else None)
        self.db: KernelDatabase | None = load_database(gpu.name, self.version) if self.version else None
        self.sources: dict[str, str] = {}
        self.clocks = sustained_clocks(gpu.name) if sustained and self.db is not None else None
        self.hot = {}

    def _elementwise_and_sampling(self) -> None:
        """The classes no table times: elementwise kernels (the roofline's bytes plus a fixed
        time per memory-bound op) and sampling (the roofline's)."""
        one = self.roofline.breakdown(BatchStats(num_prefill_tokens=1, num_prefill_reqs=1))
        # The default roofline's elementwise class is linear in T; the MoE layers' activation
        # is left to the fused-MoE tables, which time vLLM's whole op (activation included).
        r = self.roofline
        self._el_tok = one["elementwise"] * (1.0 - r._work["moe_act_tok"] / r._work["el_tok"])
        ops = mem_ops_per_step(self.model)
        self._el_const = MEM_OP_LATENCY_S * ops
        self._samp_req = one["sampling"]
        self.sources["elementwise"] = (
            f"roofline bytes (norms, rotary, activation, embedding) + {ops} "
            f"memory ops x {MEM_OP_LATENCY_S * 1e6:g} us"
        )
        self.sources["sampling"] = "roofline"

    def _launch_costs(self) -> None:
        """Launch costs (the tables hold kernel time): every kernel of every layer when eager,
        attention only between piecewise graphs, one launch for a full graph."""
        e, L = self.eff, self._layers
        self._c_eager = e.launch_overhead_s + L * KERNELS_PER_LAYER * e.kernel_overhead_s
        self._c_piece = e.launch_overhead_s + L * e.kernel_overhead_s if self.graphs.mixed else self._c_eager
        self._c_full = e.launch_overhead_s if self.graphs.full_decode else self._c_piece
        kinds = ", ".join(
            k
            for k, on in (("full for decodes", self.graphs.full_decode), ("piecewise", self.graphs.mixed))
            if on
        )
        self.sources["overhead"] = (
            f"launches: CUDA graphs up to {self.graphs.max_size} tokens ({kinds}"
            f"{'' if self.graphs.mixed else '; steps with a prefill eager'}), "
            "eager above"
            if self.graphs.max_size
            else "launches: eager"
        )

    def _build_step(self, eager_host_s_per_layer: float | None, floored: bool) -> None:
        """The compiled step function (``perf.kernel_step``) on this model's tables, launches
        and graphs; with ``floored`` (the engine has a plan, one stage) a step without graphs
        lasts at least the host's launches (``eager_host_s_per_layer``, None:
        ``EAGER_HOST_S_PER_LAYER``); its twin at
        sustained clocks where they are measured."""
        self.step = KernelStepTime(
            [0.0],
            [0.0],
            self._token_table,
            self._request_table,
            lambda b: self._row(self._prefill, b),
            lambda b: self._row(self._decode, b),
        )
        self.step.graph_max = self.graphs.max_size
        self.step.mixed_max = self.graphs.mixed_max_size
        self.step.c_full, self.step.c_piece, self.step.c_eager = self._c_full, self._c_piece, self._c_eager
        L = self._layers
        host = EAGER_HOST_S_PER_LAYER if eager_host_s_per_layer is None else eager_host_s_per_layer
        per_layer = host * eager_kernels_per_layer(self.model, self.tp, self.dp) / reference_kernels(self.tp)
        self.step.eager_floor = L * per_layer if floored else 0.0
        if self.eager_floor:
            self.sources["overhead"] += (
                f"; a step without graphs lasts at least {L} layers x "
                f"{per_layer * 1e3:.2f} ms of host launches"
            )
        self.step.tok = self._token_table(1023)
        self.step.req = self._request_table(255)
        if self.clocks is not None and self.hot:
            self._build_sustained(self.clocks)

    def _build_sustained(self, clocks: SustainedClocks) -> None:
        """The step's twin at the GPU's sustained clocks (``perf.sustained``): the operators'
        slowed curves where ``hot`` has them, the same launches, graphs and decode rows."""
        self._hot_token_ops = [(n, self.hot.get(n, c), k) for n, c, k in self._token_ops]
        self._prefill_hot = self._hot_grid(self._prefill)
        hot = KernelStepTime(
            [0.0],
            [0.0],
            lambda n: self._token_table(n, True),
            self._request_table,
            lambda b: self._row(self._prefill_hot, b),
            lambda b: self._row(self._decode, b),
        )
        hot.graph_max, hot.mixed_max = self.step.graph_max, self.step.mixed_max
        hot.c_full, hot.c_piece, hot.c_eager = self._c_full, self._c_piece, self._c_eager
        self.step.hot, self.step.onset_s = hot, clocks.onset_s
        self.sources["sustained_clocks"] = clocks.describe()

    @property
    def eager_floor(self) -> float:
        """Seconds a step without CUDA graphs lasts at least (0: no floor)."""
        return self.step.eager_floor

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """Operators timed by the roofline (no table for this GPU, dtype or shape)."""
        return tuple(
            k
            for k, v in self.sources.items()
            if v.startswith("roofline") and k not in ("elementwise", "sampling", "logits_gather", "pipeline")
        )

    # ------------------------------------------------------------------ hot path

    def batch_time(self, stats: BatchStats) -> float:
        """Seconds of one iteration (``KernelStepTime.batch_time``; fractional counts, a
        pipeline micro-batch's share, from the curves directly)."""
        t = stats.num_prefill_tokens + stats.num_decode_reqs
        r = stats.num_prefill_reqs + stats.num_decode_reqs
        if type(t) is int and type(r) is int and isinstance(stats, BatchStats):
            return self.step.batch_time(stats)
        if t == 0:
            return 0.0
        total = self._curves_time(stats, False)
        if stats.num_prefill_tokens and self.step.hot is not None and total > self.step.onset_s:
            total += past_onset(total, self._curves_time(stats, True), self.step.onset_s)
        return total

    def _curves_time(self, stats: BatchStats, hot: bool) -> float:
        """``batch_time`` of any (fractional) statistics from the curves, at full clocks or
        (``hot``) at sustained ones."""
        t = stats.num_prefill_tokens + stats.num_decode_reqs
        r = stats.num_prefill_reqs + stats.num_decode_reqs
        total = float(self._token_seconds(np.array([t]), hot)[0] + self._request_seconds(np.array([r]))[0])
        total += self._const_for(t, stats.num_prefill_tokens)
        if stats.num_prefill_tokens:
            pr = stats.num_prefill_reqs
            grid = self._prefill_hot if hot else self._prefill
            total += row_time(self._row(grid, pr), 0.5 * log(2.0 * stats.prefill_attn_work / pr))
        if stats.num_decode_reqs:
            d = stats.num_decode_reqs
            total += row_time(self._row(self._decode, d), log(stats.sum_decode_context / d))
        return total

    def decode_affine(self, num_decode_reqs: int) -> None:
        """Not affine in the context sum: the engine times decode runs with ``batch_time``
        and ``decode_step_times``."""
        return None

    def decode_terms(self, num_decode_reqs: int) -> tuple[float, Row] | None:
        """(rest, row) with ``batch_time = rest + row_time(row, log(s / n))`` for a pure-decode
        batch of ``n = num_decode_reqs`` requests and context sum ``s`` (the engine's decode
        runs time their steps with it, without a call per step); None for a fractional share."""
        if type(num_decode_reqs) is not int:
            return None
        if self.eager_floor and num_decode_reqs > self.graphs.max_size:
            return None  # max(rest + row, floor) is not of that form: batch_time every step
        return self.step.decode_terms(num_decode_reqs)

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        """``batch_time`` of pure-decode batches of ``num_decode_reqs`` requests, vectorized
        over their context sums (equal to ``batch_time`` up to rounding)."""
        n = num_decode_reqs
        if type(n) is not int:  # a pipeline micro-batch's share
            row = self._row(self._decode, n)
            zero = MicroBatchShare(0.0, 0.0, 0.0, n, n, 0.0)  # context 1: log length 0
            rest = self.batch_time(zero) - row_time(row, 0.0)  # type: ignore[arg-type]
        else:
            rest, row = self.step.decode_terms(n)  # the unfloored terms
        lx, ly = row
        ctx = np.asarray(sum_decode_context, np.float64) / n
        out = rest + np.exp(np.interp(np.log(ctx), lx, ly))
        if self.eager_floor and n > self.graphs.max_size:
            out = np.maximum(out, self.eager_floor)
        return out

    # ------------------------------------------------------------------ reporting (not hot)

    def breakdown(self, stats: BatchStats) -> dict[str, float]:
        """Seconds per operator (all layers), for reports and tests; sums to ``batch_time``."""
        d, pt = stats.num_decode_reqs, stats.num_prefill_tokens
        t, r = pt + d, stats.num_prefill_reqs + d
        if t == 0:
            return {}
        tg = float(self._padded(np.array([float(t)]))[0])  # the CUDA graph's size
        out = {name: mult * curve.at(tg) for name, curve, mult in self._token_ops}
        out.update({name: mult * curve.at(r) for name, curve, mult in self._req_ops})
        out["elementwise"] = self._el_tok * tg + self._el_const
        out["sampling"] = self._samp_req * r
        out["other"] = float(
            self._token_seconds(np.array([float(t)]))[0]
            - out["elementwise"]
            - sum(mult * curve.at(tg) for _n, curve, mult in self._token_ops)
            + self._request_seconds(np.array([float(r)]))[0]
            - self._samp_req * r
            - sum(mult * curve.at(r) for _n, curve, mult in self._req_ops)
        )
        out["overhead"] = self._const_for(t, pt)
        out["attn_prefill"] = (
            row_time(
                self._row(self._prefill, stats.num_prefill_reqs),
                0.5 * log(2.0 * stats.prefill_attn_work / stats.num_prefill_reqs),
            )
            if pt
            else 0.0
        )
        out["attn_decode"] = (
            row_time(self._row(self._decode, d), log(stats.sum_decode_context / d)) if d else 0.0
        )
        gpu = sum(out.values())
        if pt and self.step.hot is not None and gpu > self.step.onset_s:  # past the onset, slower clocks
            out["sustained_clocks"] = past_onset(gpu, self._curves_time(stats, True), self.step.onset_s)
        if self.eager_floor and t > (self.graphs.mixed_max_size if pt else self.graphs.max_size):
            # the host's launches outlast the GPU
            out["eager_host"] = max(0.0, self.eager_floor - sum(out.values()))
        return out

    def describe(self) -> str:
        """Which vLLM version's kernels, and where each operator's time comes from."""
        head = (
            f"measured kernels of vLLM {self.version} on {self.gpu.name}"
            if self.version
            else f"no kernel tables for {self.gpu.name}: every operator on the roofline"
        )
        return head + "".join(f"\n  {k}: {v}" for k, v in self.sources.items())

    def bubble_fraction(self, stats: BatchStats) -> float:
        return self.roofline.bubble_fraction(stats)

    def last_stage_s(self, stats: BatchStats) -> float:
        """Seconds of ``batch_time`` only the last pipeline stage spends: the per-request
        operators (LM head, sampling, logits gather; ``perf.pipelined.stage_times``)."""
        r = stats.num_prefill_reqs + stats.num_decode_reqs
        if not r:
            return 0.0
        step = self.step
        if type(r) is int:  # the step's own per-request table, as batch_time reads it
            if r >= len(step.req):
                step.req = step.grow_requests(r)
            return step.req[r]
        return float(self._request_seconds(np.array([float(r)]))[0])


def kernel_perf_model(
    model: ModelSpec, gpu: GpuSpec, version: str | None = None, **kwargs: Any
) -> KernelPerfModel:
    """``KernelPerfModel`` for a scenario: a vLLM version without tables is a config error."""
    versions = kernel_versions(gpu.name)
    if version is not None and version not in versions:
        have = f"it has {', '.join(versions)}" if versions else "it has none (the roofline times it)"
        raise ConfigError(
            f"hardware.kernel_version: no kernel tables for vLLM {version} on {gpu.name}; {have}"
        )
    return KernelPerfModel(model, gpu, version=version, **kwargs)
