"""DeepSeek sparse attention (DSA): what its config fields add to a model's weights and KV cache.

DeepSeek-V3.2 (``deepseek_v32``) and GLM-5 / 5.1 (``glm_moe_dsa``) are MLA models (the same
latent attention as DeepSeek-V3) whose queries attend only to ``index_topk`` (2,048) of the
context's tokens, chosen each step by a "lightning indexer". vLLM (v0.19.0,
``model_executor/models/deepseek_v2.py``: ``Indexer``, ``DeepseekV32IndexerCache``) builds
one indexer per layer, replicated on every tensor-parallel rank (``ReplicatedLinear``):

- ``wq_b``: the query latent (``q_lora_rank``) to ``index_n_heads x index_head_dim``
  queries, and ``wk``: the hidden state to one ``index_head_dim`` key (both quantized as
  the checkpoint's attention is); ``weights_proj``: the hidden state to one weight per
  indexer head (never quantized: ``quant_config=None``); ``k_norm``: a LayerNorm (weight
  and bias) on the key.
- its own key cache: one key per token and layer in fp8 with one fp32 scale per 128
  values, ``index_head_dim + index_head_dim / 128 x 4`` bytes (132), an ``MLAAttentionSpec``
  of one head of that many uint8s.

The latent cache of sparse MLA is kept in the FlashMLA-sparse formats
(``v1/attention/backends/mla/flashmla_sparse.py``, ``v1/kv_cache_interface.py``
``MLAAttentionSpec.real_page_size_bytes``): with a 16-bit KV cache (vLLM's default for
these models) ``kv_lora_rank + qk_rope_head_dim`` bf16 values (1,152 bytes); with an fp8
KV cache vLLM switches to ``fp8_ds_mla``: the 512-value latent in fp8, one fp32 scale per
128 of them and the 64 rope values in bf16 (656 bytes). vLLM puts both caches of every
layer in one KV-cache group (``UniformTypeKVCacheSpecs``: a block's page is the sum of the
layers' pages, no padding), so a token costs the sum on every GPU. On Blackwell vLLM may run
FlashInfer's sparse MLA instead, whose fp8 cache keeps the standard layout (576 bytes):
the memory plan asks ``perf.sparse_attention.served_kv_bytes_per_token``, which knows the
backend; ``ModelSpec.kv_bytes_per_token`` gives FlashMLA's layout.

Not modelled: GLM-5.2's ``indexer_types`` (layers that reuse an earlier layer's top-k
instead of running their own indexer); vLLM v0.19.0 does not read that field, and
``catalog.architectures`` refuses such a config.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from servesim.errors import CatalogError


class ModelSpec(Protocol):
    """The fields of ``catalog.models.ModelSpec`` read here (a protocol: models.py imports
    this module)."""

    @property
    def num_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def q_lora_rank(self) -> int: ...
    @property
    def kv_lora_rank(self) -> int: ...
    @property
    def qk_rope_head_dim(self) -> int: ...
    @property
    def index_topk(self) -> int: ...
    @property
    def index_n_heads(self) -> int: ...
    @property
    def index_head_dim(self) -> int: ...
    @property
    def dtype_bytes(self) -> float: ...
    @property
    def activation_dtype_bytes(self) -> float: ...


#: Values per fp32 scale of the indexer's fp8 keys and of fp8_ds_mla's latent (vLLM's
#: ``Indexer.quant_block_size`` and the 656-byte layout's four scales).
QUANT_BLOCK = 128
#: Bytes of one fp32 scale.
SCALE_BYTES = 4
#: Bytes of one rope value in fp8_ds_mla (kept in bf16 "for accuracy").
ROPE_BYTES = 2

_FIELDS = ("index_topk", "index_n_heads", "index_head_dim")


def sparse_attention_fields(cfg: dict[str, Any], src: str) -> dict[str, int]:
    """The indexer's fields of a config with ``index_topk`` ({} without it), checked: each a
    positive integer, on an MLA model with a query latent (the indexer reads it)."""
    if not cfg.get("index_topk"):
        return {}
    out: dict[str, int] = {}
    for key in _FIELDS:
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise CatalogError(
                f"{src}: {key} must be a positive integer for DeepSeek sparse attention "
                f"(index_topk is given), found {value!r}"
            )
        out[key] = value
    if not cfg.get("kv_lora_rank") or not cfg.get("q_lora_rank"):
        raise CatalogError(
            f"{src}: index_topk (DeepSeek sparse attention) needs multi-head latent attention "
            f"with a query latent: kv_lora_rank and q_lora_rank must be given"
        )
    if out["index_head_dim"] % QUANT_BLOCK:
        raise CatalogError(
            f"{src}: index_head_dim ({out['index_head_dim']}) must be a multiple of "
            f"{QUANT_BLOCK} (vLLM quantizes the indexer's keys in blocks of {QUANT_BLOCK})"
        )
    return out


def indexer_params(m: ModelSpec) -> tuple[int, int]:
    """(quantizable, 16-bit) weights of one layer's indexer, whole on every TP rank:
    wq_b and wk, then weights_proj and k_norm's weight and bias."""
    if not m.index_topk:
        return 0, 0
    heads, dim = m.index_n_heads, m.index_head_dim
    return m.q_lora_rank * heads * dim + m.hidden_size * dim, m.hidden_size * heads + 2 * dim


def indexer_weight_bytes(m: ModelSpec) -> float:
    """Bytes of one layer's indexer on one GPU: wq_b and wk at the attention's bytes per
    weight, the rest 16-bit."""
    quantized, plain = indexer_params(m)
    return quantized * m.dtype_bytes + plain * m.activation_dtype_bytes


def indexer_key_bytes(m: ModelSpec) -> int:
    """Bytes of one token's indexer key in one layer: fp8 values and an fp32 scale per 128."""
    return m.index_head_dim + m.index_head_dim // QUANT_BLOCK * SCALE_BYTES


def sparse_latent_bytes(m: ModelSpec, kv_dtype_bytes: float) -> float:
    """Bytes of one token's latent in one layer: ``fp8_ds_mla`` (656 for DeepSeek-V3.2's
    512 + 64) with an fp8 KV cache, else ``kv_lora_rank + qk_rope_head_dim`` values."""
    if kv_dtype_bytes == 1:
        scales = m.kv_lora_rank // QUANT_BLOCK * SCALE_BYTES
        return m.kv_lora_rank + scales + m.qk_rope_head_dim * ROPE_BYTES
    return (m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes


def kv_bytes_per_token_layer(m: ModelSpec, kv_dtype_bytes: float) -> float:
    """Bytes one token takes in one layer's caches: the latent and the indexer key."""
    return sparse_latent_bytes(m, kv_dtype_bytes) + indexer_key_bytes(m)


def kv_bytes_per_token(m: ModelSpec, kv_dtype_bytes: float, pp: int = 1) -> float:
    """KV bytes of one token on one GPU (every TP rank keeps the whole latent and key)."""
    return math.ceil(m.num_layers / pp) * kv_bytes_per_token_layer(m, kv_dtype_bytes)
