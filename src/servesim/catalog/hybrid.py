"""Hybrid linear-attention models: the Gated DeltaNet layers of Qwen3.5 (``qwen3_5_text``,
``qwen3_5_moe_text``), as vLLM 0.19.0 builds and caches them.

A Qwen3.5 model interleaves ``linear_attention`` layers (Gated DeltaNet) with
``full_attention`` layers (gated softmax attention) by ``layer_types``; every layer then
has its MLP or routed experts as in Qwen3-MoE. What this module knows of a linear layer:

- its weights (``vllm/model_executor/layers/mamba/gdn_linear_attn.py``,
  ``GatedDeltaNetAttention``): ``in_proj_qkvz`` (hidden to q, k of ``key_dim`` and v, z of
  ``value_dim``), ``in_proj_ba`` (hidden to two scalars per value head), a depthwise
  ``conv1d`` of ``linear_conv_kernel_dim`` taps over q, k and v (``conv_dim`` channels),
  ``A_log`` and ``dt_bias`` (one per value head), a gated RMSNorm of ``linear_value_head_dim``
  and ``out_proj`` (value_dim to hidden); all but the norm split by TP;
- its state, constant per request however long (``mamba/mamba_utils.py``,
  ``MambaStateShapeCalculator.gated_delta_net_state_shape``): the conv state,
  (kernel - 1) x conv_dim / TP elements in the model dtype (``mamba_cache_dtype`` 'auto'),
  and the recurrent state, value heads / TP x value_head_dim x key_head_dim elements in
  ``mamba_ssm_cache_dtype``, which for Qwen3.5 vLLM takes from the config's
  ``mamba_ssm_dtype`` (float32 in every released checkpoint;
  ``models/config.py``, ``Qwen3_5ForConditionalGenerationConfig``);
- its recurrent kernel's work (``fused_recurrent_gated_delta_rule`` at decode: each
  request's state read and written once a step; ``chunk_gated_delta_rule`` at prefill:
  chunks of 64 tokens, the FLOPs of ``recurrent_flops_per_token``).

The hybrid KV cache (vLLM 0.19.0 ``model_executor/models/config.py``,
``HybridAttentionMambaModelConfig``) gives every layer pages of one size: the attention
block size is raised to the smallest multiple of 16 tokens whose page (all KV heads of one
layer) holds one linear layer's state (``attention_block_size``), and each state is padded
to that page (``perf.linear_attention.state_page_bytes``). Without prefix caching (vLLM's default for hybrid
models: ``ModelConfig.is_prefix_caching_supported`` is False for them) a running request
holds one page per linear layer (``v1/core/single_type_kv_cache_manager.py``,
``MambaManager``, ``mamba_cache_mode`` 'none') beside the blocks of its tokens in the full
attention layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from servesim.errors import CatalogError

#: Language-model ``model_type``s with Gated DeltaNet layers that servesim models.
GATED_DELTANET_TYPES = {"qwen3_5_text": "Qwen3.5", "qwen3_5_moe_text": "Qwen3.5-MoE"}
#: Their multimodal wrappers (the language model under ``text_config``).
GATED_DELTANET_WRAPPERS = {"qwen3_5", "qwen3_5_moe"}
#: A linear-attention layer in ``layer_types``.
LINEAR_ATTENTION = "linear_attention"
_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
#: ``mamba_ssm_dtype`` values and their bytes (vLLM's ``MambaDType``).
_SSM_DTYPES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}

#: Tokens per chunk of vLLM's chunked gated-delta-rule prefill kernel (FLA's ``chunk_size``
#: 64 in ``model_executor/layers/fla/ops/chunk.py``).
GDN_CHUNK = 64
#: FlashAttention's block-size alignment that vLLM's hybrid page sizing keeps
#: (``kernel_block_alignment_size`` 16 for non-MLA attention).
ATTENTION_BLOCK_ALIGN = 16


@dataclass(frozen=True, slots=True)
class GatedDeltaNet:
    """The Gated DeltaNet layers of a hybrid model (config keys ``linear_*``).

    ``ssm_dtype_bytes``: bytes of one recurrent-state element (``mamba_ssm_dtype``; 0: the
    model's activation dtype, vLLM's 'auto').
    """

    num_layers: int
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_dtype_bytes: float = 0.0

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv1d: q and k (``key_dim`` each) and v (``value_dim``)."""
        return 2 * self.key_dim + self.value_dim

    def proj_params(self, hidden: int, tp: int = 1) -> int:
        """The GEMM weights of one linear layer on one TP rank: ``in_proj_qkvz``,
        ``in_proj_ba`` (column-parallel) and ``out_proj`` (row-parallel)."""
        qkvz = hidden * (2 * self.key_dim + 2 * self.value_dim)
        ba = hidden * 2 * self.num_value_heads
        return (qkvz + ba + self.value_dim * hidden) // tp

    def params_per_layer(self, hidden: int, tp: int = 1) -> int:
        """All weights of one linear layer on one TP rank: the projections, the conv1d
        (one filter of ``conv_kernel`` taps per channel), ``A_log`` and ``dt_bias`` (one per
        value head) and the gated norm (``value_head_dim``, replicated)."""
        small = (self.conv_dim * self.conv_kernel + 2 * self.num_value_heads) // tp
        return self.proj_params(hidden, tp) + small + self.value_head_dim

    def conv_state_elems(self, tp: int = 1) -> int:
        return (self.conv_kernel - 1) * self.conv_dim // tp

    def ssm_state_elems(self, tp: int = 1) -> int:
        return self.num_value_heads // tp * self.value_head_dim * self.key_head_dim

    def state_bytes_per_layer(self, tp: int = 1, dtype_bytes: float = 2.0) -> float:
        """One request's state in one linear layer on one TP rank: the conv state in the
        model dtype (``dtype_bytes``) and the recurrent state in ``ssm_dtype_bytes``."""
        ssm_b = self.ssm_dtype_bytes or dtype_bytes
        return self.conv_state_elems(tp) * dtype_bytes + self.ssm_state_elems(tp) * ssm_b

    def recurrent_flops_per_token(self, tp: int = 1) -> float:
        """FLOPs of the gated delta rule for one token in one layer on one TP rank.

        Per value head: the state terms, q S (the output), k S (the delta's prediction) and
        the rank-one update k^T (v - k S), 2 d_k d_v each; and, chunked at prefill, the
        intra-chunk products over the ``GDN_CHUNK`` tokens of its chunk: K K^T and Q K^T,
        the WY transforms of k and v, and the intra-chunk output, 2 C d_k or 2 C d_v each
        (decode's recurrent kernel has none of those: a lower bound there, where the state
        bytes rule). The decay and gating (d_k d_v per head) are left out.
        """
        dk, dv, c = self.key_head_dim, self.value_head_dim, GDN_CHUNK
        per_head = 6.0 * dk * dv + 2.0 * c * (3 * dk + 2 * dv)
        return self.num_value_heads // tp * per_head


def attention_block_size(state_bytes: float, attn_bytes_per_token: float) -> int:
    """vLLM's attention block size of a hybrid model without prefix caching: the least
    multiple of ``ATTENTION_BLOCK_ALIGN`` tokens whose page of one attention layer
    (``attn_bytes_per_token`` a token) holds one linear layer's state (``state_bytes``)
    (``HybridAttentionMambaModelConfig.verify_and_update_config``, vLLM 0.19.0)."""
    a = ATTENTION_BLOCK_ALIGN
    return a * math.ceil(state_bytes / (a * attn_bytes_per_token))


def has_gated_deltanet(cfg: dict[str, Any]) -> bool:
    """Whether a language model's config describes Gated DeltaNet layers (all ``linear_*``
    keys given): the only ``linear_attention`` layers servesim models."""
    return all(cfg.get(k) is not None for k in _KEYS)


def parse_gated_deltanet(cfg: dict[str, Any], layer_types: list[Any], src: str) -> GatedDeltaNet | None:
    """The Gated DeltaNet layers of a config whose ``layer_types`` holds
    ``linear_attention`` (None when it holds none), each ``linear_*`` key a positive integer."""
    count = sum(1 for t in layer_types if t == LINEAR_ATTENTION)
    if not count:
        return None
    vals: dict[str, int] = {}
    for k in _KEYS:
        v = cfg.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise CatalogError(
                f"{src}: {k} must be a positive integer for linear_attention layers, found {v!r}"
            )
        vals[k] = v
    if vals["linear_num_value_heads"] % vals["linear_num_key_heads"]:
        raise CatalogError(
            f"{src}: linear_num_value_heads ({vals['linear_num_value_heads']}) is not a multiple of "
            f"linear_num_key_heads ({vals['linear_num_key_heads']})"
        )
    ssm = cfg.get("mamba_ssm_dtype")
    if ssm is not None and str(ssm) not in _SSM_DTYPES:
        raise CatalogError(f"{src}: mamba_ssm_dtype {ssm!r} is not one of {', '.join(_SSM_DTYPES)}")
    return GatedDeltaNet(
        num_layers=count,
        num_key_heads=vals["linear_num_key_heads"],
        num_value_heads=vals["linear_num_value_heads"],
        key_head_dim=vals["linear_key_head_dim"],
        value_head_dim=vals["linear_value_head_dim"],
        conv_kernel=vals["linear_conv_kernel_dim"],
        ssm_dtype_bytes=_SSM_DTYPES[str(ssm)] if ssm is not None else 0.0,
    )


def check_unquantized(la: GatedDeltaNet | None, quant_method: str, src: str) -> None:
    """A hybrid checkpoint must be unquantized: the quantized Qwen3.5 ones (NVIDIA's NVFP4
    exports) set each layer's precision by name (FP8 or bf16 linear-attention projections,
    NVFP4 experts), which servesim's per-part reading does not resolve."""
    if la is not None and quant_method:
        raise CatalogError(
            f"{src}: a quantized ({quant_method}) checkpoint with linear_attention layers; servesim "
            f"models the unquantized ones (their per-layer precisions are not read): give the "
            f"base model's config.json, or a dtype (model.dtype) for all its weights"
        )
