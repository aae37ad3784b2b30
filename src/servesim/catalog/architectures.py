"""Which Hugging Face architectures servesim can model, and why it refuses the others.

servesim models decoder-only transformers whose every layer is softmax attention (GQA or
MLA, optionally gpt-oss's alternating sliding window or Llama 4's chunked local attention,
``catalog.llama4``) or, in Qwen3.5, Gated DeltaNet linear attention (``catalog.hybrid``),
followed by a dense MLP or routed experts. A config that parses is not enough: a Mamba or
other linear-attention model would be run as a transformer of the same width and give
numbers with no meaning. So, as vLLM refuses an architecture it does not know,
``check_architecture`` refuses every ``model_type`` outside ``SUPPORTED``, naming the field
and, where known, the part of the model servesim cannot simulate. A config that names no
``model_type`` (a hand-written one) is read from its keys, but still refused when those
keys describe layers servesim cannot model (``layer_types`` other than full and sliding
attention and Gated DeltaNet, Mamba's ``hybrid_override_pattern``, per-layer
``block_configs``).
"""

from __future__ import annotations

from typing import Any

from servesim.catalog.hybrid import (
    GATED_DELTANET_TYPES,
    GATED_DELTANET_WRAPPERS,
    LINEAR_ATTENTION,
    has_gated_deltanet,
)
from servesim.errors import CatalogError

#: Language-model ``model_type``s servesim reads, and the families they stand for.
SUPPORTED: dict[str, str] = {
    "llama": "Llama",
    "mistral": "Mistral",
    "mixtral": "Mixtral",
    "opt": "OPT",
    "qwen": "Qwen",
    "qwen2": "Qwen2",
    "qwen2_moe": "Qwen2-MoE",
    "qwen3": "Qwen3",
    "qwen3_moe": "Qwen3-MoE",
    "qwen3_vl_text": "Qwen3-VL",
    "qwen3_vl_moe_text": "Qwen3-VL-MoE",
    "deepseek_v2": "DeepSeek-V2",
    "deepseek_v3": "DeepSeek-V3",
    "deepseek_v32": "DeepSeek-V3.2",
    "glm_moe_dsa": "GLM-5",
    "kimi_k2": "Kimi-K2",
    "gpt_oss": "gpt-oss",
    "minimax_m2": "MiniMax-M2",
    "llama4_text": "Llama 4",
    **GATED_DELTANET_TYPES,
}

#: Of those, the mixture-of-experts families: their expert count and top-k must be given.
MOE_TYPES = {
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_vl_moe_text",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm_moe_dsa",
    "kimi_k2",
    "gpt_oss",
    "minimax_m2",
    "llama4_text",
    "qwen3_5_moe_text",
}

#: Multimodal wrappers whose language model is read from ``text_config``.
WRAPPERS = {"llava", "qwen3_vl", "qwen3_vl_moe", "kimi_k25", "llama4", *GATED_DELTANET_WRAPPERS}

_MAMBA = "state-space (Mamba) layers"
_HYBRID = "hybrid Mamba and attention layers"
_LINEAR = "linear-attention layers"

#: Known architectures servesim does not model, with what it lacks.
REFUSED: dict[str, str] = {
    "mamba": _MAMBA,
    "mamba2": _MAMBA,
    "falcon_mamba": _MAMBA,
    "rwkv": "recurrent (RWKV) layers",
    "jamba": _HYBRID,
    "zamba": _HYBRID,
    "zamba2": _HYBRID,
    "bamba": _HYBRID,
    "falcon_h1": _HYBRID,
    "nemotron_h": _HYBRID,
    "granitemoehybrid": _HYBRID,
    "qwen3_next": _LINEAR,
    "kimi_linear": _LINEAR,
    "minimax": "lightning (linear) attention layers",
    "gemma4_text": "global layers with their own head size and KV heads (global_head_dim)",
    "nemotron-nas": "layers of different shapes (block_configs)",
}

_ATTENTION_LAYERS = {"full_attention", "sliding_attention"}


def _types(cfg: dict[str, Any], outer: dict[str, Any]) -> list[str]:
    """The model_type to check: the language model's (``text_config``'s when it names one,
    whatever the multimodal wrapper around it), else the file's unless it is a known wrapper."""
    named = cfg.get("model_type") or outer.get("model_type")
    kind = str(named).lower() if named else ""
    return [kind] if kind and kind not in WRAPPERS else []


def check_architecture(cfg: dict[str, Any], outer: dict[str, Any], src: str) -> str:
    """The language model's model_type ("" when the config names none), or a CatalogError
    naming the field and what servesim supports. ``cfg`` is the language model's settings
    (``text_config`` of a multimodal config), ``outer`` the whole file."""
    arch = outer.get("architectures")
    arch_note = f" (architectures {arch})" if arch else ""
    types = _types(cfg, outer)
    for t in types:
        if t in REFUSED:
            raise CatalogError(
                f"{src}: model_type {t!r}{arch_note} has {REFUSED[t]}, which servesim does not model"
            )
        if t not in SUPPORTED:
            raise CatalogError(
                f"{src}: model_type {t!r}{arch_note} is not an architecture servesim "
                f"models; it models {supported_families()} (model_type "
                f"{', '.join(sorted(SUPPORTED))})"
            )
    _check_layers(cfg, src)
    return types[-1] if types else ""


def _check_layers(cfg: dict[str, Any], src: str) -> None:
    indexers = cfg.get("indexer_types") if cfg.get("index_topk") else None
    shared = [str(t) for t in indexers if t != "full"] if isinstance(indexers, list) else []
    if shared:  # GLM-5.2: layers that reuse an earlier layer's top-k (catalog.sparse_attention)
        raise CatalogError(
            f"{src}: indexer_types has {len(shared)} layers that reuse another layer's "
            f"sparse-attention indexer ({shared[0]!r}), which servesim does not model "
            f"(vLLM v0.19.0 does not read indexer_types); it models DeepSeek sparse "
            f"attention with one indexer per layer"
        )
    layer_types = cfg.get("layer_types") or []
    known = _ATTENTION_LAYERS | ({LINEAR_ATTENTION} if has_gated_deltanet(cfg) else set())
    other = sorted({str(t) for t in layer_types} - known) if isinstance(layer_types, list) else []
    if other:
        raise CatalogError(
            f"{src}: layer_types holds {', '.join(map(repr, other))}; servesim models "
            f"only 'full_attention' and 'sliding_attention' layers, and 'linear_attention' "
            f"layers with Gated DeltaNet's linear_* keys (Qwen3.5)"
        )
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        raise CatalogError(
            f"{src}: hybrid_override_pattern has Mamba layers ('M'), which servesim does not model"
        )
    if cfg.get("block_configs"):
        raise CatalogError(
            f"{src}: block_configs gives layers of different shapes, which servesim does not model"
        )


def supported_families() -> str:
    """'Llama, Mistral, ...': the families of SUPPORTED, for messages and docs."""
    return ", ".join(dict.fromkeys(SUPPORTED.values()))
