"""Memory plan: how many KV-cache blocks one GPU holds, computed the way vLLM sizes them.

vLLM loads the weights, runs one profiling forward pass of ``max_num_batched_tokens``
dummy tokens (plus a dummy sampler pass over ``max_num_seqs`` rows of logits), records
the peak, and gives the KV cache what is left of ``gpu_memory_utilization`` x memory::

    usable    = gpu_memory_utilization * mem_bytes
    available = usable - weights - activation peak - non-torch reserve
    blocks    = floor(available / (block_size * kv_bytes_per_token))

A model with sliding-window layers (gpt-oss) counts only its full-attention layers in
``kv_bytes_per_token``; its windows are set aside in the reserve (see ``plan_memory``).

All numbers are for one GPU: the largest pipeline stage, this tensor-parallel rank's shard.
The CUDA context (~0.5 GiB) and CUDA graphs live in the ``1 - gpu_memory_utilization``
headroom in vLLM's accounting and are not subtracted here either. A simplification for
vLLM 0.21 and later: there vLLM profiles the CUDA graphs' memory by default
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), takes its estimate from the KV budget and
raised the default utilization from 0.9 to 0.92 to make up for it; servesim takes the
version's default utilization and no graph estimate, so for those versions vLLM holds fewer
KV blocks than this plan, by the estimate (which grows with the number of capture sizes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.config import EngineConfig, ParallelConfig
from servesim.config.engine_defaults import ResolvedEngine
from servesim.config.layout import check_gpu_blocks_override
from servesim.errors import ConfigError, DoesNotFitError
from servesim.perf.linear_attention import state_reserve_bytes
from servesim.perf.sparse_attention import served_kv_bytes_per_token
from servesim.perf.vllm_rules import sm_of

#: Memory outside PyTorch's allocator that grows during vLLM's profiling run (cuBLAS
#: workspaces, NCCL / custom all-reduce buffers). vLLM logs it as "non_torch_memory",
#: typically 0.1-0.6 GiB; 0.5 GiB is a round, slightly conservative figure.
NON_TORCH_RESERVE_BYTES = 0.5 * 2**30

_GB = 1e9


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where one GPU's memory goes. Bytes per GPU; ``num_gpu_blocks`` KV blocks of ``block_size``."""

    weights_bytes: float
    activation_bytes: float
    reserve_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_block: float
    block_size: int
    num_gpu_blocks: int
    max_model_len: int
    usable_bytes: float
    lora_bytes: float = 0.0  # engine.lora's stacked adapter buffers (perf.lora)

    @property
    def kv_cache_bytes(self) -> float:
        return self.num_gpu_blocks * self.kv_bytes_per_block

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def describe(self) -> str:
        return (
            f"usable {self.usable_bytes / _GB:.2f} GB = weights {self.weights_bytes / _GB:.2f} GB"
            + (f" + LoRA buffers {self.lora_bytes / _GB:.2f} GB" if self.lora_bytes else "")
            + f" + activations {self.activation_bytes / _GB:.2f} GB"
            f" + reserve {self.reserve_bytes / _GB:.2f} GB"
            f" + KV cache {self.kv_cache_bytes / _GB:.2f} GB"
            f" ({self.num_gpu_blocks} blocks x {self.block_size} tokens x"
            f" {self.kv_bytes_per_token / 1024:.0f} KiB/token = {self.kv_capacity_tokens} tokens);"
            f" max_model_len {self.max_model_len}"
        )


def weights_bytes_per_gpu(model: ModelSpec, tp: int = 1, pp: int = 1, attention_dp: int = 1) -> float:
    """Weights on the GPU of the largest pipeline stage.

    Linear layers are sharded by TP (KV projections replicated when there are fewer KV
    heads than ranks; MLA's down-projections replicated); routed experts are split over the
    ranks by width or, with expert parallelism, whole (the same bytes per GPU); the embedding
    and LM head are vocab-parallel. With PP > 1 the first stage holds the embedding and the
    last the LM head (a copy of it when tied), so the largest stage holds one vocab x hidden
    matrix. Embeddings, norms and routers stay 16-bit when the linear layers are quantized,
    as in vLLM's fp8, MXFP4, int4 and NVFP4 checkpoints (``ModelSpec.linear_weight_bytes``).
    ``attention_dp`` > 1: vLLM's data-parallel ranks (``parallel.data_parallel_size``) of an
    MoE model, its experts over all ``attention_dp x tp`` GPUs. An fp32 router
    (``ModelSpec.router_fp32``: MiniMax-M2's ``MiniMaxM2MoE`` builds its replicated gate with
    ``params_dtype=torch.float32`` in vLLM 0.18's ``models/minimax_m2.py``) holds 4 bytes a
    weight on every rank, not the 16-bit ``linear_weight_bytes`` counts (``fp32_router_extra_bytes``).
    """
    layers = model.layers_per_stage(pp)
    vocab = model.embedding_params(tp) + (model.lm_head_params(tp) if pp == 1 else 0)
    norms = (2 * layers + 1) * model.hidden_size
    return (
        model.linear_weight_bytes(tp, pp, attention_dp)
        + (vocab + norms) * model.activation_dtype_bytes
        + fp32_router_extra_bytes(model, pp)
    )


def fp32_router_extra_bytes(model: ModelSpec, pp: int = 1) -> float:
    """Bytes an fp32 router adds on one GPU of the largest pipeline stage over the 16-bit
    router ``ModelSpec.linear_weight_bytes`` counts: (4 - 2) bytes x hidden x experts for each
    MoE layer of the stage (replicated, not sharded by TP or EP); 0 for a 16-bit router or a
    dense model. MiniMax-M2.5: 62 x 3,072 x 256 x 2 = 97.5 MB a GPU."""
    if not (model.is_moe and model.router_fp32):
        return 0.0
    moe_layers = min(model.layers_per_stage(pp), model.num_moe_layers)
    return moe_layers * model.router_params() * (4 - model.activation_dtype_bytes)


def served_weights_bytes(
    model: ModelSpec, gpu: GpuSpec, engine: EngineConfig, parallel: ParallelConfig
) -> float:
    """``weights_bytes_per_gpu`` of the weights as vLLM lays them out on ``gpu``: MXFP4
    experts padded as its ``Mxfp4MoEMethod`` pads them for the backend
    (``engine.moe_backend``, 'auto' resolved by ``perf.execution_path``;
    ``moe_shapes.mxfp4_pad``): gpt-oss-120b at TP 8 on Blackwell holds 11.6 GB of experts per
    GPU (a rank's 360 columns padded to 512), not 7.6 GB."""
    tp, pp, dp = parallel.tensor_parallel_size, parallel.pipeline_parallel_size, parallel.data_parallel_size
    weights = weights_bytes_per_gpu(model, tp, pp, dp)
    if not model.is_moe:  # no experts to pad
        return weights
    from servesim.perf.execution_path import moe_backend_for
    from servesim.perf.moe_shapes import has_mxfp4_experts, mxfp4_pad, padded_experts

    if not has_mxfp4_experts(model):
        return weights
    moe_tp = max(1, tp * dp // parallel.expert_parallel_size)  # ranks sharing each expert's width
    backend = moe_backend_for(model, gpu, engine, tp * dp, parallel.expert_parallel_size)
    padded = padded_experts(model, moe_tp, mxfp4_pad(gpu, backend))
    return weights - model.routed_expert_bytes(tp, pp, dp) + padded.routed_expert_bytes(tp, pp, dp)


def resolved_batch_knobs(engine: EngineConfig) -> tuple[int, int, float]:
    """(max_num_batched_tokens, max_num_seqs, gpu_memory_utilization) of an engine that
    ``config.resolve_engine`` filled in (the memory plan needs all three)."""
    tokens, seqs, util = engine.max_num_batched_tokens, engine.max_num_seqs, engine.gpu_memory_utilization
    if tokens is None or seqs is None or util is None:
        raise ValueError("the engine's batch knobs are unset: resolve it first (config.resolve_engine)")
    return tokens, seqs, util


def lora_buffer_bytes(
    model: ModelSpec, gpu: GpuSpec, engine: EngineConfig, parallel: ParallelConfig
) -> float:
    """GPU bytes of ``engine.lora``'s stacked adapter buffers (0 when LoRA is off). vLLM
    allocates them with the model, before the profiling run: they come out of the KV cache."""
    if not engine.lora.enabled:
        return 0.0
    from servesim.perf.lora import lora_costs

    tp, pp = parallel.tensor_parallel_size, parallel.pipeline_parallel_size
    ep, dp = parallel.expert_parallel_size, parallel.data_parallel_size
    return lora_costs(
        engine.lora, model, gpu, tp, pp, engine.pcie_gb_per_s, engine.version, ep, dp
    ).buffer_bytes


def activation_peak_bytes(model: ModelSpec, engine: EngineConfig, tp: int = 1) -> float:
    """Peak of vLLM's profiling run: the larger of the forward pass and the sampler pass.

    Forward, T = max_num_batched_tokens tokens, b = activation bytes, per token:
      4 hidden-sized buffers (residual, normed input, attention output, layer output)
      + this rank's QKV output + the MLP's intermediates (gate/up output and activation
      output; for MoE one set per routed expert, plus the expert outputs before the sum).
    Sampler, R = min(max_num_seqs, T) rows: the final hidden states (T x hidden) plus logits
      in the model dtype and in fp32, fp32 probabilities and an fp32 sort workspace
      (R x vocab x (b + 12) bytes); the LM head output is gathered to the full vocab.
    """
    t, max_num_seqs, _ = resolved_batch_knobs(engine)
    b = model.activation_dtype_bytes
    h = model.hidden_size
    qkv = (model.num_attention_heads // tp + 2 * model.kv_heads_per_rank(tp)) * model.head_dim
    width = (model.moe_intermediate_size if model.is_moe else model.intermediate_size) // tp
    mlp = ((2 if model.mlp_gated else 1) + 1) * width
    if model.is_moe:
        mlp = model.num_experts_per_tok * (mlp + h)
    forward = t * b * (4 * h + qkv + mlp)
    rows = min(max_num_seqs, t)
    sampler = t * h * b + rows * model.vocab_size * (b + 12)
    return float(max(forward, sampler))


def suggest_layout(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    parallel: ParallelConfig,
    kv_dtype_bytes: float | None = None,
) -> str | None:
    """A change of layout that ``plan_memory`` was checked to accept, as a hint, or None.

    Tried in order: more tensor parallelism inside one node (TP up to 8, dividing the
    heads), then pipeline stages on top of the largest of those, then the first of these
    layouts (the current one included) with a shorter ``max_model_len`` (at least 1024
    tokens): the KV cache of one full-length sequence is what often fails.
    """
    tp0, pp0 = parallel.tensor_parallel_size, parallel.pipeline_parallel_size
    tps = [t for t in (2, 4, 8) if t > tp0 and model.num_attention_heads % t == 0]
    tp_max = max([tp0, *tps])
    layouts = [(t, pp0) for t in tps] + [(tp_max, p) for p in (2, 4, 8) if pp0 < p <= model.num_layers]

    def layout(tp: int, pp: int) -> ParallelConfig:
        return parallel.model_copy(update={"tensor_parallel_size": tp, "pipeline_parallel_size": pp})

    def named(tp: int, pp: int) -> list[str]:
        return ([f"tensor_parallel_size={tp}"] if tp != tp0 else []) + (
            [f"pipeline_parallel_size={pp}"] if pp != pp0 else []
        )

    for tp, pp in layouts:
        if _fits(model, gpu, engine, layout(tp, pp), kv_dtype_bytes):
            return " and ".join(named(tp, pp))
    for tp, pp in [(tp0, pp0), *layouts]:
        cap = _kv_tokens(model, gpu, engine, layout(tp, pp), kv_dtype_bytes)
        # the batch knobs stay as resolved for the full length (resolving again keeps set knobs)
        shorter = ResolvedEngine(engine.model_copy(update={"max_model_len": cap}))
        if cap >= 1024 and _fits(model, gpu, shorter, layout(tp, pp), kv_dtype_bytes):
            return " and ".join([*named(tp, pp), f"engine.max_model_len={cap}"])
    return None


def _fits(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    parallel: ParallelConfig,
    kv_dtype_bytes: float | None,
) -> bool:
    try:
        plan_memory(model, gpu, engine, parallel, kv_dtype_bytes, hint=False)
    except (ConfigError, DoesNotFitError):
        return False
    return True


def _kv_tokens(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    parallel: ParallelConfig,
    kv_dtype_bytes: float | None,
) -> int:
    """KV tokens one GPU holds with this layout (0 when the weights do not fit)."""
    tp, pp = parallel.tensor_parallel_size, parallel.pipeline_parallel_size
    weights = served_weights_bytes(model, gpu, engine, parallel)
    available = (
        resolved_batch_knobs(engine)[2] * gpu.mem_bytes
        - weights
        - lora_buffer_bytes(model, gpu, engine, parallel)
        - activation_peak_bytes(model, engine, tp)
        - NON_TORCH_RESERVE_BYTES
    )
    per_block = (
        served_kv_bytes_per_token(model, sm_of(gpu), engine.version, tp, kv_dtype_bytes, pp)
        * engine.block_size
    )
    return max(0, math.floor(available / per_block)) * engine.block_size


def _hint(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    parallel: ParallelConfig,
    kv_dtype_bytes: float | None,
    enabled: bool,
    kv_tokens: int = 0,
) -> str:
    """The end of a does-not-fit message: changes checked to fit, or what else can be done.

    ``kv_tokens`` (the KV cache's capacity when the weights fit) offers the shorter
    ``max_model_len`` first, when that was checked to fit too.
    """
    if not enabled:
        return ""
    tips = []
    shorter = ResolvedEngine(engine.model_copy(update={"max_model_len": kv_tokens}))
    if kv_tokens >= 1024 and _fits(model, gpu, shorter, parallel, kv_dtype_bytes):
        tips.append(f"set engine.max_model_len <= {kv_tokens}")
    found = suggest_layout(model, gpu, engine, parallel, kv_dtype_bytes)
    if found and not found.startswith("engine.max_model_len"):
        tips.append(f"try {found}")
    if tips:
        return " or ".join(tips) + " (checked to fit)"
    return "no layout of up to 8 GPUs per pipeline stage fits: use a GPU with more memory or a smaller model"


def plan_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    engine: ResolvedEngine,
    parallel: ParallelConfig,
    kv_dtype_bytes: float | None = None,
    *,
    hint: bool = True,
) -> MemoryPlan:
    """KV blocks per GPU for ``model`` on ``gpu`` with this engine and parallelism.

    ``engine`` is resolved by the caller (``deployment.resolved_engine``: vLLM's batch
    defaults for this GPU and layout), not here.

    Raises DoesNotFitError when the weights do not fit, when nothing is left for the KV
    cache, or when the cache cannot hold one ``max_model_len`` sequence (vLLM refuses to
    start in all three cases). ``engine.num_gpu_blocks_override`` replaces the block count
    without the memory fit check, as in vLLM, but must hold one ``max_model_len`` sequence
    (a ``ConfigError``; ``servesim.config.layout`` has this check and the layout ones).
    With ``hint`` a does-not-fit error suggests changes that were checked to fit
    (``suggest_layout``), when one is found.
    """
    tp, pp = parallel.tensor_parallel_size, parallel.pipeline_parallel_size
    max_model_len = _max_model_len(model, engine)
    check_gpu_blocks_override(engine, max_model_len)
    _, max_num_seqs, utilization = resolved_batch_knobs(engine)
    usable = utilization * gpu.mem_bytes
    weights = served_weights_bytes(model, gpu, engine, parallel)
    lora = lora_buffer_bytes(model, gpu, engine, parallel)
    activation = activation_peak_bytes(model, engine, tp)
    reserve = NON_TORCH_RESERVE_BYTES
    kv_per_token = served_kv_bytes_per_token(model, sm_of(gpu), engine.version, tp, kv_dtype_bytes, pp)
    kv_per_block = kv_per_token * engine.block_size
    window = model.kv_window_bytes_per_request(tp, kv_dtype_bytes, pp, engine.block_size)
    if window:
        room = max(0.0, usable - weights - lora - activation - reserve)
        reserve += _window_reserve(model, engine, window, room, max_num_seqs, max_model_len, kv_per_token)
    # Linear-attention layers (Qwen3.5): each running request's states, set aside alike.
    room = max(0.0, usable - weights - lora - activation - reserve)
    args = (kv_per_block, engine.block_size, max_num_seqs, max_model_len)
    reserve += state_reserve_bytes(model, tp, pp, kv_dtype_bytes, room, *args)
    where = (
        f"{model.name} on {gpu.name} (TP={tp}, PP={pp}, gpu_memory_utilization="
        f"{engine.gpu_memory_utilization})"
    )

    if weights > usable:
        raise DoesNotFitError(
            f"{where}: weights need {weights / _GB:.1f} GB per GPU but only {usable / _GB:.1f} GB are "
            f"usable, {(weights - usable) / _GB:.1f} GB short; "
            + _hint(model, gpu, engine, parallel, kv_dtype_bytes, hint)
        )
    available = usable - weights - lora - activation - reserve
    if engine.num_gpu_blocks_override is not None:
        num_blocks = engine.num_gpu_blocks_override
    else:
        num_blocks = max(0, math.floor(available / kv_per_block))
        if num_blocks * engine.block_size < max_model_len:
            raise DoesNotFitError(
                f"{where}: after weights {weights / _GB:.1f} GB"
                + (f", LoRA buffers {lora / _GB:.1f} GB" if lora else "")
                + f", activations {activation / _GB:.1f} GB and "
                f"reserve {reserve / _GB:.1f} GB the KV cache holds {num_blocks * engine.block_size} tokens, "
                f"fewer than one max_model_len={max_model_len} sequence (vLLM refuses to start); "
                + _hint(model, gpu, engine, parallel, kv_dtype_bytes, hint, num_blocks * engine.block_size)
            )
    return MemoryPlan(
        weights_bytes=weights,
        activation_bytes=activation,
        reserve_bytes=reserve,
        kv_bytes_per_token=kv_per_token,
        kv_bytes_per_block=kv_per_block,
        block_size=engine.block_size,
        num_gpu_blocks=num_blocks,
        max_model_len=max_model_len,
        usable_bytes=usable,
        lora_bytes=lora,
    )


def _max_model_len(model: ModelSpec, engine: ResolvedEngine) -> int:
    """``engine.max_model_len`` (None: the model's ``max_position_embeddings``), refused past
    the model's positions as vLLM refuses it."""
    max_model_len = engine.max_model_len or model.max_position_embeddings
    if max_model_len > model.max_position_embeddings:
        raise ConfigError(
            f"engine.max_model_len ({max_model_len}) exceeds {model.name}'s "
            f"max_position_embeddings ({model.max_position_embeddings}); vLLM rejects it too"
        )
    return max_model_len


def _window_reserve(
    model: ModelSpec,
    engine: ResolvedEngine,
    window: float,
    room: float,
    max_num_seqs: int,
    max_model_len: int,
    kv_per_token: float,
) -> float:
    """Bytes set aside for the sliding-window layers' blocks (gpt-oss), ``window`` bytes a
    request, in ``room`` bytes left after the weights, LoRA, activations and reserve.

    vLLM's hybrid allocator keeps each running request's window blocks in the same pool as
    the full-attention layers' blocks. A servesim block holds the full-attention layers only,
    and the windows are set aside in the reserve: those of max_num_seqs requests, or of as
    many requests as the memory could hold at once, each with a whole window in every layer,
    if fewer (conservative: requests longer than the window leave fewer windows and more room
    for full-attention blocks), but never so many that one max_model_len request no longer
    fits (vLLM's start-up check)."""
    bs = engine.block_size
    kv_per_block = kv_per_token * bs
    w = model.sliding_window or 1
    window_tokens = (-(-(w - 1) // bs) + 1) * bs  # the tokens of one request's window blocks
    most = room / (window + window_tokens * kv_per_token)
    longest = -(-max_model_len // bs) * kv_per_block  # one max_model_len request
    return min(min(max_num_seqs, most) * window, max(window, room - longest))
