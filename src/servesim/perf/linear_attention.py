"""Serving cost of the Gated DeltaNet layers of hybrid models (Qwen3.5; ``catalog.hybrid``),
as vLLM 0.19.0 runs them.

Engine: vLLM raises a hybrid model's attention block size until an attention page holds one
linear layer's state (``hybrid_block_size``; ``HybridAttentionMambaModelConfig``
in ``model_executor/models/config.py``, "even if the user has explicitly set it") and does
not enable prefix caching for it by default (``ModelConfig.is_prefix_caching_supported``:
False for hybrid models), so ``hybrid_engine`` runs such a model with that block size and
without prefix caching, saying so where it was on (vLLM's experimental ``mamba_cache_mode``
'align'/'all' is not modelled).

Memory: each running request holds one padded state page per linear layer beside the
blocks of its tokens in the full-attention layers, all from one pool
(``v1/core/single_type_kv_cache_manager.py``, ``MambaManager``). servesim's KV cache counts
token blocks only, so ``state_reserve_bytes`` sets the states aside as the sliding-window
layers' windows are (``perf.memory.plan_memory``): those of ``max_num_seqs`` requests, or
of as many requests as the memory holds each with one block of tokens, if fewer, but never
so many that one ``max_model_len`` request no longer fits; and the engine runs at most as
many requests as it holds states for (``running_cap``). A simplification, conservative:
vLLM's pool hands out states and token blocks as requests come and go, so where
``max_model_len`` bounds the states, or requests are long, it runs more requests at once.

Step time: the linear layers' projections (``in_proj_qkvz``, ``in_proj_ba``, ``out_proj``)
are GEMMs, timed from the kernel tables like the attention projections; the recurrent
kernel has no table and is timed on the roofline: per request of the step, its state read
and written once in every linear layer (``fused_recurrent_gated_delta_rule`` at decode,
the chunked kernel's initial and final state at prefill: memory-bound), and per token the
gated delta rule's FLOPs (``GatedDeltaNet.recurrent_flops_per_token``) and the
activations the conv1d, the recurrence and the gated norm read and write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.hybrid import attention_block_size
from servesim.catalog.models import ModelSpec
from servesim.config.engine_defaults import ResolvedEngine
from servesim.errors import ConfigError
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import MAX_TOKENS, LogCurve, extended_axis, roof_time

#: ``name, n, k, dtype -> seconds-vs-m curve`` of one GEMM (``KernelLayerOps._gemm``).
GemmCurve = Callable[[str, int, int, "str | None"], LogCurve]


def hybrid_block_size(model: ModelSpec, tp: int = 1, kv_dtype_bytes: float | None = None) -> int:
    """The attention block size vLLM gives ``model`` at TP ``tp`` (``attention_block_size``
    of one linear layer's state and one attention layer's KV a token); 0 for a model without
    linear-attention layers."""
    la = model.linear_attention
    if la is None:
        return 0
    kv_b = model.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    state = la.state_bytes_per_layer(tp, model.activation_dtype_bytes)
    return attention_block_size(state, model.kv_elems_per_layer(tp) * kv_b)


def state_page_bytes(model: ModelSpec, tp: int = 1, kv_dtype_bytes: float | None = None) -> float:
    """Bytes one linear layer's state takes in vLLM's hybrid cache: one attention page of
    ``hybrid_block_size`` tokens (the state padded to it)."""
    kv_b = model.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
    return hybrid_block_size(model, tp, kv_b) * model.kv_elems_per_layer(tp) * kv_b


def state_bytes_per_request(
    model: ModelSpec, tp: int = 1, kv_dtype_bytes: float | None = None, pp: int = 1
) -> float:
    """Cache bytes one running request holds in the linear layers of the largest pipeline
    stage on one GPU: a padded page (``state_page_bytes``) per layer (``MambaManager`` with
    ``mamba_cache_mode`` 'none' allocates one block per request in each of its groups)."""
    la = model.linear_attention
    if la is None:
        return 0.0
    return math.ceil(la.num_layers / pp) * state_page_bytes(model, tp, kv_dtype_bytes)


def hybrid_engine(
    engine: ResolvedEngine, model: ModelSpec, tp: int, kv_dtype_bytes: float
) -> tuple[ResolvedEngine, list[dict[str, Any]]]:
    """``engine`` as vLLM runs a hybrid model, the attention block size raised to hold a
    linear layer's state and prefix caching off (see the module docstring), with a notice
    when prefix caching was on; ``engine`` itself for any other model."""
    if model.linear_attention is None:
        return engine, []
    if engine.kv_offload.enabled:
        raise ConfigError(
            f"engine.kv_offload: {model.name} has linear_attention layers, whose KV offload "
            "servesim does not model (it needs prefix caching, off for hybrid models)"
        )
    block = max(engine.block_size, hybrid_block_size(model, tp, kv_dtype_bytes))
    notes = []
    if engine.enable_prefix_caching:
        notes.append(
            {  # workload.notices.notice's shape
                "code": "hybrid_no_prefix_caching",
                "source": "",
                "count": None,
                "message": f"{model.name} has linear_attention layers: run without prefix "
                "caching, as vLLM runs hybrid models by default (its experimental "
                "mamba_cache_mode is not modelled)",
            }
        )
    upd = {"block_size": block, "enable_prefix_caching": False}
    return ResolvedEngine(engine.model_copy(update=upd)), notes


def state_reserve_bytes(
    model: ModelSpec,
    tp: int,
    pp: int,
    kv_dtype_bytes: float | None,
    room: float,
    kv_per_block: float,
    block_size: int,
    max_num_seqs: int,
    max_model_len: int,
) -> float:
    """Bytes of the linear layers' states set aside from ``room`` (the memory left for the
    cache): a whole number of requests' states, ``max_num_seqs`` of them, or as many as
    ``room`` holds with one ``kv_per_block`` block of tokens each, if fewer, but never more
    than leaves one ``max_model_len`` request its blocks (at least one). 0 for a model
    without linear layers. ``running_cap`` recovers the count from the plan."""
    state = state_bytes_per_request(model, tp, kv_dtype_bytes, pp)
    if not state:
        return 0.0
    n = math.floor(min(max_num_seqs, room / (state + kv_per_block)))
    longest = math.ceil(max_model_len / block_size) * kv_per_block
    if room - n * state < longest:
        n = math.floor((room - longest) / state)
    return max(1, n) * state


def running_cap(
    engine: ResolvedEngine,
    model: ModelSpec,
    states_bytes: float,
    num_blocks: int,
    kv_per_block: float,
    tp: int,
    pp: int,
    kv_dtype_bytes: float,
) -> tuple[ResolvedEngine, list[dict[str, Any]]]:
    """``engine`` running at most as many requests as the memory plan set states aside for
    (``states_bytes`` of them, ``state_reserve_bytes``'s): a request the engine runs needs
    its states, which servesim's KV cache does not count (vLLM's hybrid pool does: see the
    module docstring); and a notice where the memory would have held more requests with a
    block each (the plan's ``num_blocks`` blocks of ``kv_per_block`` bytes past those of n
    requests hold another's state and block: ``engine.max_model_len`` bounded the states).
    ``engine`` itself for a model without linear layers or when ``max_num_seqs`` is no
    larger."""
    state = state_bytes_per_request(model, tp, kv_dtype_bytes, pp)
    if not state:
        return engine, []
    n = max(1, round(states_bytes / state))
    seqs = engine.max_num_seqs
    if seqs is not None and seqs <= n:
        return engine, []
    capped = ResolvedEngine(engine.model_copy(update={"max_num_seqs": n}))
    if (num_blocks - n - 1) * kv_per_block < state:
        return capped, []
    note = {  # workload.notices.notice's shape
        "code": "hybrid_state_cap",
        "source": "",
        "count": None,
        "message": f"{model.name} keeps {state / 1e6:.1f} MB of linear-attention state a running "
        f"request: beside the blocks of one engine.max_model_len request the memory holds {n} "
        f"requests' states, so at most {n} run at once (engine.max_num_seqs {seqs} lowered; "
        "vLLM shares one pool between states and tokens); a smaller engine.max_model_len "
        "leaves room for more",
    }
    return capped, [note]


def state_traffic_bytes(model: ModelSpec, tp: int = 1) -> float:
    """Bytes one request's recurrent step moves in all linear layers on one TP rank: its
    conv and recurrent states read and written once (unpadded: the kernels touch the
    state, not the page around it)."""
    la = model.linear_attention
    if la is None:
        return 0.0
    return 2.0 * la.num_layers * la.state_bytes_per_layer(tp, model.activation_dtype_bytes)


def token_work(model: ModelSpec, tp: int = 1) -> tuple[float, float]:
    """(FLOPs, bytes) of one token through the recurrent part of all linear layers on one TP
    rank: the gated delta rule's FLOPs; the conv1d reading q, k, v and writing them back,
    the recurrence reading them with g and beta and writing its output, the gated norm
    reading that output and z and writing the result (activation dtype)."""
    la = model.linear_attention
    if la is None:
        return 0.0, 0.0
    ba = model.activation_dtype_bytes
    elems = (3 * la.conv_dim + 2 * la.num_value_heads + 4 * la.value_dim) / tp
    return la.num_layers * la.recurrent_flops_per_token(tp), la.num_layers * elems * ba


def kernel_token_ops(
    model: ModelSpec,
    tp: int,
    gpu: GpuSpec,
    eff: Efficiencies,
    gemm: GemmCurve,
    dtype: str | None,
    sources: dict[str, str],
) -> list[tuple[str, LogCurve, float]]:
    """(name, seconds-vs-T curve, multiplier) of the linear layers' operators that depend on
    the step's token count: the three projections' GEMMs (tables through ``gemm``) and the
    recurrent kernels' per-token work on the roofline (at the prefill-attention fractions of
    the bf16 peak and of the bandwidth). [] for a model without linear layers."""
    la = model.linear_attention
    if la is None:
        return []
    H, L = model.hidden_size, la.num_layers
    ops: list[tuple[str, LogCurve, float]] = [
        (
            "gemm_gdn_in_proj_qkvz",
            gemm("gemm_gdn_in_proj_qkvz", (2 * la.key_dim + 2 * la.value_dim) // tp, H, dtype),
            L,
        ),
        ("gemm_gdn_in_proj_ba", gemm("gemm_gdn_in_proj_ba", 2 * la.num_value_heads // tp, H, dtype), L),
        ("gemm_gdn_out_proj", gemm("gemm_gdn_out_proj", H, la.value_dim // tp, dtype), L),
    ]
    flops, nbytes = token_work(model, tp)
    xs = extended_axis(np.array([1.0]), 1.0, MAX_TOKENS)
    peak = gpu.flops_for("bfloat16")
    secs = roof_time(
        flops * xs, nbytes * xs, peak, gpu.mem_bw, eff.attn_prefill_compute, eff.attn_prefill_memory
    )
    sources["gdn_recurrence"] = (
        f"roofline (no table: gated delta rule of {L} layers, {flops / 1e6:.1f} MFLOP and "
        f"{nbytes / 1e3:.1f} kB a token)"
    )
    ops.append(("gdn_recurrence", LogCurve(xs, np.log(secs)), 1.0))
    return ops


def kernel_request_ops(
    model: ModelSpec, tp: int, gpu: GpuSpec, eff: Efficiencies, sources: dict[str, str]
) -> list[tuple[str, LogCurve, float]]:
    """(name, seconds-vs-requests curve, multiplier) of the states' traffic: every request of
    a step (decode or prefill chunk) reads and writes its state once in each linear layer,
    at the decode-attention fraction of the bandwidth. [] for a model without linear layers."""
    per_req = state_traffic_bytes(model, tp)
    if not per_req:
        return []
    xs = extended_axis(np.array([1.0]), 1.0, MAX_TOKENS)
    secs = per_req * xs / (gpu.mem_bw * eff.attn_decode_memory)
    sources["gdn_state"] = f"roofline (no table: {per_req / 1e6:.1f} MB of state read and written a request)"
    return [("gdn_state", LogCurve(xs, np.log(secs)), 1.0)]
