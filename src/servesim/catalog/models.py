"""Model architectures: the facts of a Hugging Face ``config.json`` that serving cost depends on.

No weights are read. A ``ModelSpec`` knows how many parameters each part of the network
has and how many KV-cache bytes a token takes on one GPU, counted the way vLLM shards them:

- tensor parallelism (TP) splits query heads, KV heads, the MLP width, the embedding and
  the LM head across ranks; when there are fewer KV heads than ranks, each rank keeps a
  replica of one KV head (vLLM's ``max(1, num_kv_heads // tp)``);
- pipeline parallelism (PP) gives each stage ``ceil(num_layers / pp)`` layers at most.

Presets live in ``servesim/data/models/*.json`` as subsets of the public config files and
go through the same parser (``from_hf_config``) as a user's own ``config.json``.
Biases (Qwen2 QKV, OPT), norms' biases and OPT's learned position embeddings are not
counted: each is below 0.2% of the parameters of the presets.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from servesim.errors import CatalogError

#: Bytes per element of each dtype name servesim accepts.
DTYPE_BYTES: dict[str, float] = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0}

_DTYPE_ALIASES = {
    "float": "float32", "fp32": "float32", "float32": "float32",
    "half": "float16", "fp16": "float16", "float16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp8": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
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

    # ------------------------------------------------------------------ shapes per TP rank

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def activation_dtype_bytes(self) -> float:
        """Activations stay 16-bit when weights are fp8 (W8A8 kernels read/write bf16 tensors)."""
        return max(self.dtype_bytes, 2.0)

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """KV heads held by one TP rank: split, or one replica when ``num_kv_heads < tp`` (vLLM)."""
        return max(1, self.num_kv_heads // tp)

    def layers_per_stage(self, pp: int = 1) -> int:
        """Layers of the largest pipeline stage."""
        return math.ceil(self.num_layers / pp)

    def attn_params_per_layer(self, tp: int = 1) -> int:
        """QKV and output projection weights of one layer on one TP rank."""
        q = self.num_attention_heads * self.head_dim // tp
        kv = self.kv_heads_per_rank(tp) * self.head_dim
        return self.hidden_size * (q + 2 * kv) + q * self.hidden_size

    def expert_params(self, tp: int = 1) -> int:
        """Weights of one MLP (dense) or one expert (MoE) on one TP rank."""
        width = self.moe_intermediate_size if self.is_moe else self.intermediate_size
        return (3 if self.mlp_gated else 2) * self.hidden_size * width // tp

    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    def mlp_params_per_layer(self, tp: int = 1) -> int:
        """All MLP weights of one layer on one TP rank (every expert, plus the router)."""
        if self.is_moe:
            return self.num_experts * self.expert_params(tp) + self.router_params()
        return self.expert_params(tp)

    def embedding_params(self, tp: int = 1) -> int:
        """Input embedding on one TP rank (vocab-parallel)."""
        return self.vocab_size * self.hidden_size // tp

    def lm_head_params(self, tp: int = 1) -> int:
        """Separate LM head on one TP rank (0 when tied to the embedding)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size // tp

    # ------------------------------------------------------------------ totals

    def num_params(self) -> int:
        """All parameters: embeddings, every layer (all experts), norms, LM head if untied."""
        per_layer = self.attn_params_per_layer() + self.mlp_params_per_layer() + 2 * self.hidden_size
        return (self.num_layers * per_layer + self.embedding_params() + self.lm_head_params()
                + self.hidden_size)

    def num_active_params(self) -> int:
        """Parameters one token passes through (top-k experts for MoE), embeddings included."""
        if not self.is_moe:
            return self.num_params()
        per_layer = (self.attn_params_per_layer() + self.num_experts_per_tok * self.expert_params()
                     + self.router_params() + 2 * self.hidden_size)
        return (self.num_layers * per_layer + self.embedding_params() + self.lm_head_params()
                + self.hidden_size)

    def kv_bytes_per_token(self, tp: int = 1, kv_dtype_bytes: float | None = None, pp: int = 1) -> float:
        """K and V bytes of one token on one GPU: all layers of its (largest) stage, its KV heads."""
        kv_b = self.activation_dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        return 2 * self.layers_per_stage(pp) * self.kv_heads_per_rank(tp) * self.head_dim * kv_b


def resolve_kv_dtype_bytes(kv_cache_dtype: str, model: ModelSpec) -> float:
    """vLLM's ``--kv-cache-dtype``: 'auto' follows the model's activation dtype."""
    if kv_cache_dtype == "auto":
        return model.activation_dtype_bytes
    return DTYPE_BYTES[normalize_dtype(kv_cache_dtype, "kv_cache_dtype")]


# ---------------------------------------------------------------------- config.json parsing


def _pick(cfg: dict[str, Any], keys: tuple[str, ...], source: str, default: Any = ...) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    if default is ...:
        alt = f" (or {', '.join(keys[1:])})" if len(keys) > 1 else ""
        raise CatalogError(f"{source}: missing key {keys[0]!r}{alt}")
    return default


def _int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 or value != int(value):
        raise CatalogError(f"{source}: {key} must be a positive integer, found {value!r}")
    return int(value)


def from_hf_config(cfg: dict[str, Any], name: str, dtype: str = "auto",
                   source: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict (Llama/Mistral/Qwen2/Mixtral/OPT keys).

    ``source`` (default ``name``) is the file named in error messages. Multimodal configs
    that nest the language model under ``text_config`` are read from there.
    """
    src = source or name
    if not isinstance(cfg, dict):
        raise CatalogError(f"{src}: expected a JSON object, found {type(cfg).__name__}")
    outer = cfg
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**{k: v for k, v in outer.items() if k in ("torch_dtype", "dtype")}, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", outer.get("model_type", ""))).lower()

    def num(keys: tuple[str, ...], default: Any = ...) -> int:
        return _int(_pick(cfg, keys, src, default), keys[0], src)

    layers = num(("num_hidden_layers", "n_layer", "num_layers"))
    hidden = num(("hidden_size", "d_model", "n_embd"))
    heads = num(("num_attention_heads", "n_head"))
    kv_heads = num(("num_key_value_heads",), heads)
    head_dim = num(("head_dim",), hidden // heads)
    inter = num(("intermediate_size", "ffn_dim", "n_inner"))
    vocab = num(("vocab_size",))
    # vLLM falls back to 2048 when a config gives no maximum length.
    max_pos = num(("max_position_embeddings", "max_seq_len", "seq_length", "n_positions"), 2048)
    experts = _pick(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), src, 0)
    experts = _int(experts, "num_local_experts", src) if experts else 0
    top_k = num(("num_experts_per_tok",)) if experts else 0
    moe_inter = num(("moe_intermediate_size",), inter) if experts else 0
    if heads % kv_heads:
        raise CatalogError(f"{src}: num_attention_heads ({heads}) is not a multiple of "
                           f"num_key_value_heads ({kv_heads})")
    tied = cfg.get("tie_word_embeddings", outer.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT))
    gated = "ffn_dim" not in cfg and model_type != "opt"

    if dtype == "auto":
        raw = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
        dtype = normalize_dtype(raw, f"{src}: torch_dtype")
        if dtype == "float32":  # vLLM's dtype='auto' serves fp32 checkpoints in 16 bits
            dtype = "bfloat16"
    else:
        dtype = normalize_dtype(dtype)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    return ModelSpec(
        name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=bool(tied), num_experts=experts, num_experts_per_tok=top_k,
        moe_intermediate_size=moe_inter, dtype=dtype, dtype_bytes=DTYPE_BYTES[dtype],
        max_position_embeddings=max_pos, mlp_gated=gated,
        sliding_window=int(window) if window else None,
    )


# ---------------------------------------------------------------------- presets and loading


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict[str, Any]]:
    """Preset configs by canonical name (the Hugging Face id), read once from package data."""
    out: dict[str, dict[str, Any]] = {}
    for entry in resources.files("servesim").joinpath("data", "models").iterdir():
        if entry.name.endswith(".json"):
            cfg = json.loads(entry.read_text())
            cfg["_servesim_short"] = entry.name.removesuffix(".json")
            out[cfg["_name_or_path"]] = cfg
    return out


@lru_cache(maxsize=1)
def _preset_index() -> dict[str, str]:
    """Lower-cased names a user may type -> canonical name."""
    index: dict[str, str] = {}
    for canon, cfg in _presets().items():
        names = [canon, canon.split("/")[-1], cfg["_servesim_short"], *cfg.get("_servesim_aliases", [])]
        for n in names:
            index[n.lower()] = canon
            index[n.lower().split("/")[-1]] = canon
    return index


def list_models() -> list[str]:
    """Canonical names (Hugging Face ids) of the built-in presets."""
    return sorted(_presets())


def _lookup_preset(name: str) -> str | None:
    index = _preset_index()
    key = name.strip().lower()
    for cand in (key, key.split("/")[-1]):
        if cand in index:
            return index[cand]
        for suffix in ("-instruct", "-chat", "-hf", "-it"):  # same architecture as the base model
            if cand.endswith(suffix) and cand.removesuffix(suffix) in index:
                return index[cand.removesuffix(suffix)]
    return None


def _read_config(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise CatalogError(f"{path}: no such file (expected a config.json or a directory holding one)")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CatalogError(f"{path}: cannot read JSON: {err}") from None
    if not isinstance(cfg, dict):
        raise CatalogError(f"{path}: expected a JSON object of model settings (a Hugging Face "
                           f"config.json), found a {type(cfg).__name__}")
    return cfg


def load_model(name_or_path: str, dtype: str = "auto") -> ModelSpec:
    """A preset by name (case-insensitive; 'meta-llama/Llama-3.1-8B' or 'Llama-3.1-8B'),
    or a path to a ``config.json`` or a directory holding one."""
    canon = _lookup_preset(name_or_path)
    if canon is not None:
        return from_hf_config(_presets()[canon], canon, dtype, source=f"preset {canon}")
    path = Path(name_or_path).expanduser()
    if path.exists() or name_or_path.endswith(".json"):
        cfg = _read_config(path)
        cfg_path = path / "config.json" if path.is_dir() else path
        label = cfg.get("_name_or_path") or (path.name if path.is_dir() else path.parent.name) or str(path)
        return from_hf_config(cfg, str(label), dtype, source=str(cfg_path))
    choices = sorted({*list_models(), *(c["_servesim_short"] for c in _presets().values())})
    close = difflib.get_close_matches(name_or_path, choices, n=4, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise CatalogError(f"unknown model {name_or_path!r} (not a preset and no such path){hint} "
                       f"Presets: {', '.join(list_models())}")
