"""Model architectures: the facts of a Hugging Face ``config.json`` that serving cost depends on.

No weights are read. A ``ModelSpec`` knows how many parameters each part of the network
has and how many KV-cache bytes a token takes on one GPU, counted the way vLLM shards them:

- tensor parallelism (TP) splits query heads, KV heads, the MLP width, the embedding and
  the LM head across ranks; when there are fewer KV heads than ranks, each rank keeps a
  replica of one KV head (vLLM's ``max(1, num_kv_heads // tp)``);
- pipeline parallelism (PP) gives each stage ``ceil(num_layers / pp)`` layers at most.

Beyond dense GQA transformers it reads multi-head latent attention (DeepSeek-V3, Kimi-K2:
one compressed latent per token and layer in the KV cache), shared experts and dense layers
of MoE models (``first_k_dense_replace``, ``mlp_only_layers``), gpt-oss's alternating
sliding-window layers (``layer_types``), Qwen3.5's Gated DeltaNet linear-attention layers
and gated attention (``hybrid.py``) and quantized checkpoints (``quantization.py``).

Presets live in ``servesim/data/models/*.json`` as subsets of the public config files and
go through the same parser (``catalog.hf_config.from_hf_config``) as a user's own
``config.json``.
Biases (Qwen2 QKV, OPT, gpt-oss's attention and experts), norms' biases, qk-norms (Qwen3,
MiniMax-M2), MLA's two latent norms, gpt-oss's attention sinks (one learned logit per head
and layer) and OPT's learned position embeddings are not counted: each is below 0.2% of the
parameters of the presets. Multi-token-prediction layers (DeepSeek-V3, MiniMax-M2) and
vision encoders (Kimi-K2.5) are not counted either: vLLM loads the former only for
speculative decoding; the latter (~0.4B parameters in Kimi-K2.5) serve image inputs.
See docs/models.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servesim.catalog import sparse_attention as dsa
from servesim.catalog.hybrid import GatedDeltaNet
from servesim.errors import CatalogError

#: Bytes per element of each dtype name servesim accepts.
DTYPE_BYTES: dict[str, float] = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0}

_DTYPE_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "float32": "float32",
    "half": "float16",
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}

# Model types whose Hugging Face config class ties input and output embeddings by default
# (PretrainedConfig's default is True; LlamaConfig, MistralConfig, Qwen2Config override it to False).
_TIED_BY_DEFAULT = {"opt", "gpt2", "gpt_neox_japanese", "bloom", "falcon"}


def normalize_dtype(name: str, source: str = "dtype") -> str:
    """'bf16' / 'torch.bfloat16' / 'float8_e4m3fn' -> one of DTYPE_BYTES' keys."""
    key = str(name).lower().removeprefix("torch.")
    if key not in _DTYPE_ALIASES:
        raise CatalogError(f"{source}: unknown dtype {name!r}; expected one of {sorted(DTYPE_BYTES)}")
    return _DTYPE_ALIASES[key]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture of a decoder-only transformer (dense or mixture-of-experts).

    ``intermediate_size`` is the dense MLP width; ``moe_intermediate_size`` the width of one
    expert (equal to ``intermediate_size`` for Mixtral). ``mlp_gated`` is True for SwiGLU
    MLPs (gate, up and down matrices) and False for OPT-style ReLU MLPs (up and down).
    ``dtype`` is the weight dtype; ``dtype_bytes`` its size (fp8 = 1).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    dtype: str = "bfloat16"
    dtype_bytes: float = 2.0
    max_position_embeddings: int = 4096
    mlp_gated: bool = True
    sliding_window: int | None = None
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): ``kv_lora_rank`` > 0. The KV
    # cache holds one latent of kv_lora_rank + qk_rope_head_dim per token and layer, shared
    # by all heads; ``head_dim`` is then qk_nope_head_dim + qk_rope_head_dim (queries, keys).
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE layout: the summed width of the shared expert(s) every token passes through in each
    # MoE layer, and the layers with a dense MLP (``intermediate_size`` wide) instead of experts.
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0
    # Layers restricted to ``sliding_window`` (gpt-oss's ``layer_types``); 0: every layer
    # attends to the whole context (a uniform ``sliding_window`` alone is not modelled).
    num_sliding_layers: int = 0
    # Bytes per parameter of the routed experts when they are quantized apart from the rest
    # (gpt-oss MXFP4, Kimi-K2.5 int4); 0: ``dtype_bytes``. ``quant_method`` names the scheme.
    expert_dtype_bytes: float = 0.0
    quant_method: str = ""
    # The checkpoint's KV-cache dtype (ModelOpt's kv_cache_quant_algo), which vLLM's
    # kv_cache_dtype 'auto' resolves to; "": the activation dtype.
    kv_cache_dtype: str = ""
    # The q and k norms span all heads of the layer (MiniMax-M2's ``qk_norm_type: per_layer``),
    # so under TP vLLM all-reduces their variances (``MiniMaxText01RMSNormTP.forward_qk``):
    # one more all-reduce per layer, of two fp32 values per token. Per-head qk-norms
    # (Qwen3) are rank-local.
    qk_norm_allreduce: bool = False
    # The MoE router runs in fp32: its weight is fp32 and the hidden states are cast to fp32
    # before it (vLLM's ``MiniMaxM2MoE``: ``params_dtype=torch.float32``,
    # ``self.gate(hidden_states.to(torch.float32))``), one cast kernel and an fp32 GEMM a layer.
    router_fp32: bool = False
    # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): ``index_topk`` > 0 tokens per query,
    # chosen by an indexer of ``index_n_heads`` x ``index_head_dim`` (``catalog.sparse_attention``).
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    # Hybrid linear-attention models (Qwen3.5): the Gated DeltaNet layers, which keep a
    # constant state per request and no KV (``catalog.hybrid``; None: every layer attends),
    # and the full attention's sigmoid output gate (``attn_output_gate``: the query
    # projection twice as wide, vLLM's ``Qwen3NextAttention``).
    linear_attention: GatedDeltaNet | None = None
    attn_output_gate: bool = False

    # ------------------------------------------------------------------ shapes per TP rank

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def activation_dtype_bytes(self) -> float:
        """Activations stay 16-bit when weights are fp8 (W8A8 kernels read/write bf16 tensors)."""
        return max(self.dtype_bytes, 2.0)

    @property
    def activation_dtype(self) -> str:
        """Dtype of activations and of the weights kept unquantized (embeddings, norms, routers)."""
        return self.dtype if self.dtype in ("float32", "float16", "bfloat16") else "bfloat16"

    @property
    def default_kv_dtype_bytes(self) -> float:
        """KV-cache bytes per element with kv_cache_dtype 'auto': the checkpoint's, else activations'."""
        return DTYPE_BYTES[self.kv_cache_dtype] if self.kv_cache_dtype else self.activation_dtype_bytes

    @property
    def linear_compute_dtype(self) -> str:
        """Tensor-core math of the linear layers: fp8 for fp8 (W8A8) and NVFP4 weights (fp4
        units are not in the GPU catalog), the activation dtype for weight-only schemes
        (int4, MXFP4 experts: dequantized into 16-bit matrix multiplies)."""
        return "fp8" if self.dtype in ("fp8", "nvfp4") else self.activation_dtype

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes per parameter of the routed experts."""
        return self.expert_dtype_bytes or self.dtype_bytes

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is routed experts (0 for a dense model)."""
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_linear_layers(self) -> int:
        """Linear-attention (Gated DeltaNet) layers of a hybrid model; 0 otherwise."""
        return self.linear_attention.num_layers if self.linear_attention else 0

    @property
    def num_attention_layers(self) -> int:
        """Softmax-attention layers (full or sliding-window)."""
        return self.num_layers - self.num_linear_layers

    @property
    def num_full_attention_layers(self) -> int:
        """Layers attending to the whole context (the others keep a sliding window or, in a
        hybrid model, a linear-attention state)."""
        return self.num_attention_layers - self.num_sliding_layers

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """KV heads held by one TP rank: split, or one replica when ``num_kv_heads < tp`` (vLLM)."""
        return max(1, self.num_kv_heads // tp)

    def layers_per_stage(self, pp: int = 1) -> int:
        """Layers of the largest pipeline stage."""
        return math.ceil(self.num_layers / pp)

    def attn_params_per_layer(self, tp: int = 1) -> int:
        """Attention projection weights of one layer on one TP rank.

        GQA: QKV (split by heads) and output projections. MLA: the query and latent
        down-projections (q_a, kv_a; replicated on every rank, as vLLM's fused_qkv_a_proj),
        then split by heads the query up-projection q_b, the latent's K/V up-projection kv_b
        (also the absorbed weights of decode) and the output projection.
        """
        h, heads = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                h * self.q_lora_rank + self.q_lora_rank * heads * qk // tp
                if self.q_lora_rank
                else h * heads * qk // tp
            )
            kv = (
                h * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim) // tp
            )
            return q + kv + heads * self.v_head_dim * h // tp
        q = heads * self.head_dim // tp
        kv = self.kv_heads_per_rank(tp) * self.head_dim
        gate = q if self.attn_output_gate else 0
        return h * (q + gate + 2 * kv) + q * h

    def mixer_params(self, tp: int = 1, pp: int = 1) -> int:
        """Token-mixing weights (attention and linear attention) of the layers of the
        largest pipeline stage on one TP rank: the linear layers' share of a stage is taken
        in proportion (ceil of each kind's layers / pp), a simplification of vLLM's split."""
        attn = math.ceil(self.num_attention_layers / pp) * self.attn_params_per_layer(tp)
        la = self.linear_attention
        if la is None:
            return attn
        return attn + math.ceil(la.num_layers / pp) * la.params_per_layer(self.hidden_size, tp)

    def expert_params(self, tp: int = 1) -> int:
        """Weights of one MLP (dense) or one routed expert (MoE) on one TP rank."""
        width = self.moe_intermediate_size if self.is_moe else self.intermediate_size
        return (3 if self.mlp_gated else 2) * self.hidden_size * width // tp

    def shared_expert_params(self, tp: int = 1) -> int:
        """The shared expert(s) of one MoE layer on one TP rank (split by width, as a dense MLP)."""
        return (3 if self.mlp_gated else 2) * self.hidden_size * self.shared_expert_intermediate_size // tp

    def dense_mlp_params(self, tp: int = 1) -> int:
        """One dense MLP of ``intermediate_size`` on one TP rank (an MoE model's dense layers)."""
        return (3 if self.mlp_gated else 2) * self.hidden_size * self.intermediate_size // tp

    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    def every_token_mlp_params(self, tp: int = 1) -> int:
        """MoE models: the MLP weights of all layers that every token passes through on one
        TP rank (shared experts of the MoE layers, dense MLPs of the dense layers)."""
        if not self.is_moe:
            return 0
        return self.num_moe_layers * self.shared_expert_params(
            tp
        ) + self.num_dense_layers * self.dense_mlp_params(tp)

    def embedding_params(self, tp: int = 1) -> int:
        """Input embedding on one TP rank (vocab-parallel)."""
        return self.vocab_size * self.hidden_size // tp

    def lm_head_params(self, tp: int = 1) -> int:
        """Separate LM head on one TP rank (0 when tied to the embedding)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size // tp

    # ------------------------------------------------------------------ totals

    def num_params(self) -> int:
        """All parameters: embeddings, every layer (all experts), norms, LM head if untied."""
        return self._count_params(self.num_experts)

    def num_active_params(self) -> int:
        """Parameters one token passes through (top-k experts for MoE), embeddings included."""
        return self._count_params(self.num_experts_per_tok) if self.is_moe else self.num_params()

    def _count_params(self, experts: int) -> int:
        h, layers = self.hidden_size, self.num_layers
        total = (
            self.mixer_params()
            + layers * 2 * h
            + self.embedding_params()
            + self.lm_head_params()
            + h
            + layers * sum(dsa.indexer_params(self))
        )
        if not self.is_moe:
            return total + layers * self.expert_params()
        moe = experts * self.expert_params() + self.shared_expert_params() + self.router_params()
        return total + self.num_moe_layers * moe + self.num_dense_layers * self.dense_mlp_params()

    def linear_weight_bytes(self, tp: int = 1, pp: int = 1, attention_dp: int = 1) -> float:
        """Bytes of the linear layers' weights on one GPU of the largest pipeline stage.

        Attention and dense MLPs (and shared experts) are split by TP. Routed experts are
        split over the TP ranks by width (vLLM's default) or whole (expert parallelism): the
        same bytes per GPU either way. With vLLM's data-parallel attention (``attention_dp``
        ranks of ``tp`` GPUs each, experts spread over all ``attention_dp x tp`` GPUs) each
        GPU holds its rank's attention share and 1/(dp x tp) of the experts. Routers stay
        16-bit, as in every quantized checkpoint. With PP the heaviest stage is the one
        holding the most MoE layers.
        """
        layers, b = self.layers_per_stage(pp), self.dtype_bytes
        attn = (
            self.mixer_params(tp, pp) * b
            if self.linear_attention
            else layers * self.attn_params_per_layer(tp) * b
        ) + layers * dsa.indexer_weight_bytes(self)
        if not self.is_moe:
            return attn + layers * self.expert_params(tp) * b
        moe = min(layers, self.num_moe_layers)
        per_moe = self.shared_expert_params(tp) * b + self.router_params() * self.activation_dtype_bytes
        return (
            attn
            + self.routed_expert_bytes(tp, pp, attention_dp)
            + moe * per_moe
            + (layers - moe) * self.dense_mlp_params(tp) * b
        )

    def routed_expert_bytes(self, tp: int = 1, pp: int = 1, attention_dp: int = 1) -> float:
        """The routed experts' share of ``linear_weight_bytes``: 1/(dp x tp) of every MoE
        layer's experts of the largest pipeline stage (0 for a dense model)."""
        if not self.is_moe:
            return 0.0
        moe = min(self.layers_per_stage(pp), self.num_moe_layers)
        return moe * self.num_experts * self.expert_params(tp * attention_dp) * self.expert_weight_bytes

    # ------------------------------------------------------------------ KV cache and attention

    def kv_elems_per_layer(self, tp: int = 1) -> int:
        """KV-cache elements of one token in one layer on one TP rank: K and V of this rank's
        KV heads; MLA: the whole latent (vLLM caches it as a single KV head, kept whole on
        every rank, so it does not shrink with TP)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_heads_per_rank(tp) * self.head_dim

    def kv_bytes_per_token(self, tp: int = 1, kv_dtype_bytes: float | None = None, pp: int = 1) -> float:
        """KV bytes of one token on one GPU: the full-attention layers of its (largest) stage.

        Sliding-window layers keep only a window per request (``kv_window_bytes_per_request``).
        """
        kv_b = self.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        if self.index_topk:  # the latent in vLLM's sparse-MLA format and the indexer's key
            return dsa.kv_bytes_per_token(self, kv_b, pp)
        return math.ceil(self.num_full_attention_layers / pp) * self.kv_elems_per_layer(tp) * kv_b

    def kv_window_bytes_per_request(
        self, tp: int = 1, kv_dtype_bytes: float | None = None, pp: int = 1, block_size: int = 16
    ) -> float:
        """KV bytes the sliding-window layers of one stage hold for one running request.

        vLLM's sliding-window manager keeps the blocks covering the last ``sliding_window - 1``
        tokens and the one being written, cdiv(W - 1, block_size) + 1 blocks, and frees the rest.
        """
        if not self.num_sliding_layers or not self.sliding_window:
            return 0.0
        kv_b = self.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        blocks = -(-(self.sliding_window - 1) // block_size) + 1
        return (
            math.ceil(self.num_sliding_layers / pp) * self.kv_elems_per_layer(tp) * kv_b * blocks * block_size
        )

    def attn_flops_per_pair(self, tp: int = 1, decode: bool = False) -> float:
        """FLOPs of one query token against one context token in one layer on one TP rank.

        QK^T and PV over this rank's heads. MLA prefill runs as multi-head attention on
        up-projected keys (qk_nope + qk_rope) and values (v_head_dim); MLA decode, with the
        up-projections absorbed into the query and output as vLLM's MLA backends do, as
        multi-query attention over the latent: kv_lora_rank + qk_rope_head_dim for the score,
        kv_lora_rank for the value, per head.
        """
        heads = self.num_attention_heads // tp
        if not self.is_mla:
            return 4.0 * heads * self.head_dim
        if decode:
            return 2.0 * heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 2.0 * heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)

    def window_attn_per_token(self, tp: int = 1, kv_dtype_bytes: float | None = None) -> tuple[float, float]:
        """(FLOPs, KV bytes read) of one new token's attention in all sliding-window layers on
        one TP rank: ``sliding_window`` keys each (at most; fewer at the start of a prompt)."""
        window = self.sliding_window or 0
        if not self.num_sliding_layers or not window:
            return 0.0, 0.0
        kv_b = self.default_kv_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        n = self.num_sliding_layers * window
        return n * self.attn_flops_per_pair(tp), n * self.kv_elems_per_layer(tp) * kv_b


def resolve_kv_dtype_bytes(kv_cache_dtype: str, model: ModelSpec) -> float:
    """vLLM's ``--kv-cache-dtype``: 'auto' follows the checkpoint's KV-cache quantization
    (ModelOpt's kv_cache_quant_algo) or else the model's activation dtype."""
    if kv_cache_dtype == "auto":
        return model.default_kv_dtype_bytes
    return DTYPE_BYTES[normalize_dtype(kv_cache_dtype, "kv_cache_dtype")]


# ---------------------------------------------------------------------- config.json parsing
