"""Llama 4 (``llama4_text``: Scout, Maverick): which layers are MoE, which attend locally.

Read from Hugging Face's ``Llama4TextConfig`` and vLLM's ``model_executor/models/llama4.py``
(v0.11.0 to v0.19.0, the same in each):

- **Chunked local attention.** A layer with RoPE (``no_rope_layers[i] == 1``) attends only
  within its ``attention_chunk_size`` chunk of the sequence (vLLM: ``use_chunked_local_attn
  = not self.nope and config.attention_chunk_size``); a NoPE layer (every fourth by default,
  ``no_rope_layer_interval`` 4) attends to the whole context. A query at position p of a
  local layer sees ``p mod C + 1`` keys.
- **Interleaved MoE.** Layer i is MoE when ``(i + 1) % interleave_moe_layer_step == 0``
  (Scout: every layer, Maverick: every second): ``num_local_experts`` routed experts of
  ``intermediate_size`` width, top-``num_experts_per_tok`` (1), plus one shared expert of
  the same width that every token passes through; the other layers are a dense MLP of
  ``intermediate_size_mlp`` width.

How servesim carries it (``catalog.models.ModelSpec``): the local layers are **charged as
full-attention layers**, in their attention and in their KV cache. That is exact up to C
tokens of context (8,192 in Scout and Maverick), where a local layer sees every key a
global one does. Past C it is an over-estimate: a local layer's query sees ``p mod C + 1``
keys (C / 2 on average), so those layers' attention is charged up to 2 x context / C times
its work; and their KV is counted for every token, as vLLM 0.11-0.13 allocate it (they turn
the hybrid KV cache manager off for chunked local attention unless
``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1``, ``config/vllm.py``), where 0.14 on
(the variable's default is 1 there) free a local layer's blocks before the current chunk
(``ChunkedLocalAttentionManager``), so past C servesim's cache holds fewer long requests
than theirs. servesim's windowed layers (gpt-oss's ``sliding_window``) are not used for it:
they charge every token the whole window, which is right for a window of 128 and not for
one of 8,192 at shorter contexts. The temperature tuning of the NoPE layers' queries and
the weightless L2 q/k norm are elementwise work below the model's other norms and are not
counted; the vision encoder is not counted (as Kimi-K2.5's, ``catalog.models``).
"""

from __future__ import annotations

from typing import Any

from servesim.errors import CatalogError


def moe_layers(cfg: dict[str, Any], layers: int, src: str) -> int:
    """Layers whose MLP is routed experts: ``moe_layers`` where given, else every
    ``interleave_moe_layer_step``-th (vLLM: ``(layer_idx + 1) % step == 0``)."""
    given = cfg.get("moe_layers")
    if isinstance(given, list) and given:
        return sum(1 for i in given if 0 <= int(i) < layers)
    step = int(cfg.get("interleave_moe_layer_step", 1) or 0)
    if step < 0:
        raise CatalogError(f"{src}: interleave_moe_layer_step: expected 0 or more, found {step}")
    return sum(1 for i in range(layers) if step and (i + 1) % step == 0)


def llama4_layout(cfg: dict[str, Any], layers: int, src: str) -> dict[str, Any]:
    """The ModelSpec fields a Llama 4 text config sets beyond a Llama's: the dense MLP's and
    the experts' widths, the shared expert, the dense layers; its chunked local layers are
    full ones (above)."""
    for key in ("intermediate_size", "intermediate_size_mlp"):
        if not isinstance(cfg.get(key), int) or cfg[key] < 1:
            raise CatalogError(f"{src}: {key}: expected a positive integer, found {cfg.get(key)!r}")
    return {
        "intermediate_size": cfg["intermediate_size_mlp"],
        "moe_intermediate_size": cfg["intermediate_size"],
        "shared_expert_intermediate_size": cfg["intermediate_size"],
        "num_dense_layers": layers - moe_layers(cfg, layers, src),
        "num_sliding_layers": 0,  # the chunked local layers as full ones (above)
        "sliding_window": None,
    }
