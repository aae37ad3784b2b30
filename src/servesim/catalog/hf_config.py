"""Reading a Hugging Face ``config.json`` into a ``ModelSpec``, and the bundled presets.

Presets live in ``servesim/data/models/*.json`` as subsets of the public config files and
go through the same parser (``from_hf_config``) as a user's own ``config.json``; the
architecture facts and what is counted are ``catalog.models``'.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from servesim.catalog.architectures import MOE_TYPES, check_architecture
from servesim.catalog.hybrid import check_unquantized, parse_gated_deltanet
from servesim.catalog.llama4 import llama4_layout
from servesim.catalog.models import _TIED_BY_DEFAULT, DTYPE_BYTES, ModelSpec, normalize_dtype
from servesim.catalog.quantization import parse_quantization
from servesim.catalog.sparse_attention import sparse_attention_fields
from servesim.errors import CatalogError

#: Architectures whose MoE router vLLM runs in fp32 (``ModelSpec.router_fp32``): MiniMax-M2's
#: ``MiniMaxM2MoE`` builds its gate with fp32 weights and casts the hidden states to fp32.
_FP32_ROUTER = {"minimax_m2"}


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


def _layer_count(cfg: dict[str, Any], key: str, default: int, src: str) -> int:
    """An optional non-negative integer of the MoE layout (a per-layer list is not read)."""
    value = cfg.get(key)
    if value is None or value == 0:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CatalogError(f"{src}: {key} must be a non-negative integer, found {value!r}")
    return value


def _num_dense_layers(cfg: dict[str, Any], layers: int, src: str) -> int:
    """Layers of an MoE config with a dense MLP: DeepSeek's ``first_k_dense_replace`` and
    ``moe_layer_freq`` (layer i has experts when i >= k and i % freq == 0), Qwen-MoE's
    ``mlp_only_layers`` and ``decoder_sparse_step`` (experts when (i + 1) % step == 0)."""
    first_k = _layer_count(cfg, "first_k_dense_replace", 0, src)
    freq = _layer_count(cfg, "moe_layer_freq", 1, src)
    only = set(cfg.get("mlp_only_layers") or [])
    step = _layer_count(cfg, "decoder_sparse_step", 1, src)
    moe = sum(
        1 for i in range(layers) if i >= first_k and i % freq == 0 and i not in only and (i + 1) % step == 0
    )
    return layers - moe


def _mla(cfg: dict[str, Any], src: str) -> dict[str, int]:
    """MLA's dimensions (DeepSeek-V2/V3 keys), or {} for ordinary attention."""
    if not cfg.get("kv_lora_rank"):
        return {}
    keys = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    out = {k: _int(_pick(cfg, (k,), src), k, src) for k in keys}
    out["q_lora_rank"] = _int(cfg["q_lora_rank"], "q_lora_rank", src) if cfg.get("q_lora_rank") else 0
    return out


_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")


def _experts(cfg: dict[str, Any], model_type: str, src: str) -> tuple[int, int]:
    """(routed experts, experts per token); (0, 0) for a dense model. A mixture-of-experts
    family must give both, and top-k may not exceed the experts (vLLM's router would fail)."""
    given = next((k for k in _EXPERT_KEYS if cfg.get(k) is not None), None)
    if given is None or cfg[given] == 0:
        if model_type in MOE_TYPES:
            found = f"{given} is 0" if given else f"no {' / '.join(_EXPERT_KEYS)} is given"
            raise CatalogError(
                f"{src}: model_type {model_type!r} is a mixture of experts but {found}; "
                f"it needs a positive expert count and num_experts_per_tok"
            )
        top = next((k for k in _TOP_K_KEYS if cfg.get(k)), None)
        if top is not None and given is not None:
            raise CatalogError(
                f"{src}: {top} is {cfg[top]!r} but {given} is 0; a mixture of experts "
                f"needs at least one expert"
            )
        return 0, 0
    experts = _int(cfg[given], given, src)
    top_key = next((k for k in _TOP_K_KEYS if cfg.get(k) is not None), _TOP_K_KEYS[0])
    top_k = _int(_pick(cfg, _TOP_K_KEYS, src), top_key, src)
    if top_k > experts:
        raise CatalogError(
            f"{src}: {top_key} ({top_k}) exceeds {given} ({experts}); a token is routed "
            f"to at most every expert"
        )
    return experts, top_k


def from_hf_config(
    cfg: dict[str, Any],
    name: str,
    dtype: str = "auto",
    source: str | None = None,
    hf_quant_config: dict[str, Any] | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict (Llama/Mistral/Qwen2/Qwen3/Mixtral/OPT,
    Qwen3-MoE, DeepSeek-V3/Kimi-K2 (MLA), gpt-oss, MiniMax-M2 and Llama 4 keys).

    ``source`` (default ``name``) is the file named in error messages. Multimodal configs
    that nest the language model under ``text_config`` are read from there.
    ``hf_quant_config`` is a ModelOpt ``hf_quant_config.json``; with ``dtype`` 'auto' the
    checkpoint's quantization sets the weight bytes, another ``dtype`` replaces it.
    """
    src = source or name
    cfg, outer = _language_config(cfg, src)
    model_type = check_architecture(cfg, outer, src) or str(outer.get("model_type", "")).lower()

    def num(keys: tuple[str, ...], default: Any = ...) -> int:
        return _int(_pick(cfg, keys, src, default), keys[0], src)

    layers = num(("num_hidden_layers", "n_layer", "num_layers"))
    hidden = num(("hidden_size", "d_model", "n_embd"))
    heads = num(("num_attention_heads", "n_head"))
    kv_heads = num(("num_key_value_heads",), heads)
    mla = _mla(cfg, src)
    head_dim = (
        mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"] if mla else num(("head_dim",), hidden // heads)
    )
    # Qwen3.5-MoE gives no dense width (every layer has experts): the experts'.
    inter = num(("intermediate_size", "ffn_dim", "n_inner"), cfg.get("moe_intermediate_size") or ...)
    vocab = num(("vocab_size",))
    # vLLM falls back to 2048 when a config gives no maximum length.
    max_pos = num(("max_position_embeddings", "max_seq_len", "seq_length", "n_positions"), 2048)
    moe = _moe(cfg, model_type, layers, inter, src)
    if heads % kv_heads:
        raise CatalogError(
            f"{src}: num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})"
        )
    tied = cfg.get("tie_word_embeddings", outer.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT))
    prec = _precision(cfg, dtype, hf_quant_config, src)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    layer_types = cfg.get("layer_types") or []
    sliding_layers = sum(1 for t in layer_types if t == "sliding_attention") if window else 0
    fields = llama4_layout(cfg, layers, src) if model_type == "llama4_text" else {}
    linear = parse_gated_deltanet(cfg, layer_types, src)
    check_unquantized(linear, prec.quant_method, src)
    spec = ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=bool(tied),
        num_experts=moe.num_experts,
        num_experts_per_tok=moe.num_experts_per_tok,
        moe_intermediate_size=moe.moe_intermediate_size,
        dtype=prec.dtype,
        dtype_bytes=prec.dtype_bytes,
        max_position_embeddings=max_pos,
        mlp_gated="ffn_dim" not in cfg and model_type != "opt",
        sliding_window=int(window) if window else None,
        shared_expert_intermediate_size=moe.shared_expert_intermediate_size,
        num_dense_layers=moe.num_dense_layers,
        num_sliding_layers=sliding_layers,
        expert_dtype_bytes=prec.expert_dtype_bytes,
        quant_method=prec.quant_method,
        kv_cache_dtype=prec.kv_cache_dtype,
        qk_norm_allreduce=bool(cfg.get("use_qk_norm")) and cfg.get("qk_norm_type") == "per_layer",
        router_fp32=model_type in _FP32_ROUTER,
        linear_attention=linear,
        attn_output_gate=bool(cfg.get("attn_output_gate")),
        **mla,
        **sparse_attention_fields(cfg, src),
    )
    return replace(spec, **fields) if fields else spec


def _language_config(cfg: dict[str, Any], src: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the language model's config, the whole file's): a multimodal config's ``text_config``
    with the file's dtype and quantization, else the config itself."""
    if not isinstance(cfg, dict):
        raise CatalogError(f"{src}: expected a JSON object, found {type(cfg).__name__}")
    outer = cfg
    if isinstance(cfg.get("text_config"), dict):
        cfg = {
            **{k: v for k, v in outer.items() if k in ("torch_dtype", "dtype", "quantization_config")},
            **cfg["text_config"],
        }
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("quantization"), dict):
        raise CatalogError(
            f"{src}: this is a ModelOpt hf_quant_config.json, not a model's config.json; "
            f"give the config.json beside it"
        )
    return cfg, outer


class _Moe(NamedTuple):
    """A model's mixture-of-experts sizes (all 0 for a dense model)."""

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    num_dense_layers: int


def _moe(cfg: dict[str, Any], model_type: str, layers: int, inter: int, src: str) -> _Moe:
    experts, top_k = _experts(cfg, model_type, src)
    moe_inter = (
        _int(_pick(cfg, ("moe_intermediate_size",), src, inter), "moe_intermediate_size", src)
        if experts
        else 0
    )
    if experts and cfg.get("n_shared_experts"):
        shared = _int(cfg["n_shared_experts"], "n_shared_experts", src) * moe_inter
    else:
        shared = int(cfg.get("shared_expert_intermediate_size") or 0) if experts else 0
    dense_layers = _num_dense_layers(cfg, layers, src) if experts else 0
    return _Moe(experts, top_k, moe_inter, shared, dense_layers)


class _Precision(NamedTuple):
    """The weights' dtype and bytes, the experts' bytes (0: the weights'), the quantization
    method and the KV cache dtype a checkpoint sets ('': none)."""

    dtype: str
    dtype_bytes: float
    expert_dtype_bytes: float
    quant_method: str
    kv_cache_dtype: str


def _precision(
    cfg: dict[str, Any], dtype: str, hf_quant_config: dict[str, Any] | None, src: str
) -> _Precision:
    """With ``dtype`` 'auto', the checkpoint's dtype and quantization; else ``dtype`` alone."""
    if dtype != "auto":
        dtype = normalize_dtype(dtype)
        return _Precision(dtype, DTYPE_BYTES[dtype], 0.0, "", "")
    raw = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    dtype = normalize_dtype(raw, f"{src}: torch_dtype")
    if dtype == "float32":  # vLLM's dtype='auto' serves fp32 checkpoints in 16 bits
        dtype = "bfloat16"
    quant = parse_quantization(cfg, hf_quant_config, dtype, src)
    if quant is None:
        return _Precision(dtype, DTYPE_BYTES[dtype], 0.0, "", "")
    return _Precision(
        quant.dtype, quant.dtype_bytes, quant.expert_dtype_bytes, quant.method, quant.kv_cache_dtype
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
        raise CatalogError(
            f"{path}: expected a JSON object of model settings (a Hugging Face "
            f"config.json), found a {type(cfg).__name__}"
        )
    return cfg


#: A copied config named for its Hugging Face repository, ``<org>--<name>_config.json`` (the
#: hub cache's ``--`` for the ``/`` a repository id cannot otherwise hold in a file name).
_COPIED_SUFFIX = "_config.json"


def _label(cfg: dict[str, Any], path: Path) -> str:
    """The model's name, as `vllm serve` would be given it: the repository id a copied
    config's file name spells (``Qwen--Qwen3-8B_config.json``: ``Qwen/Qwen3-8B``), else the
    config's ``_name_or_path`` where it is a repository id (not the path of the machine that
    saved it), else the folder holding ``config.json``."""
    name = path.name
    if path.is_file() and name.endswith(_COPIED_SUFFIX) and "--" in name:
        return name[: -len(_COPIED_SUFFIX)].replace("--", "/", 1)
    saved = str(cfg.get("_name_or_path") or "")
    if saved and not saved.startswith(("/", ".", "~")) and "\\" not in saved and saved.count("/") <= 1:
        return saved
    return (path.name if path.is_dir() else path.parent.name) or str(path)


def _quant_sidecar(cfg_path: Path) -> Path | None:
    """ModelOpt's ``hf_quant_config.json`` beside ``config.json``, or for a copied
    ``<stem>_config.json`` its ``<stem>_hf_quant_config.json``."""
    if cfg_path.name.endswith(_COPIED_SUFFIX) and cfg_path.name != "config.json":
        own = cfg_path.with_name(cfg_path.name[: -len(_COPIED_SUFFIX)] + "_hf_quant_config.json")
        if own.is_file():
            return own
    beside = cfg_path.parent / "hf_quant_config.json"
    return beside if beside.is_file() else None


def load_model(name_or_path: str, dtype: str = "auto") -> ModelSpec:
    """A preset by name (case-insensitive; 'meta-llama/Llama-3.1-8B' or 'Llama-3.1-8B'),
    or a path to a ``config.json`` or a directory holding one. A local model wins over a
    preset of the same name (a fine-tune saved as ``Llama-3.1-8B-Instruct/``), as a local
    folder does for `vllm serve`."""
    path = Path(name_or_path).expanduser()
    local = path.is_file() or (path / "config.json").is_file()  # a local model wins, as in `vllm serve`
    canon = None if local else _lookup_preset(name_or_path)
    if canon is not None:
        cfg = _presets()[canon]
        return from_hf_config(
            cfg, canon, dtype, source=f"preset {canon}", hf_quant_config=cfg.get("_servesim_hf_quant_config")
        )
    if path.exists() or name_or_path.endswith(".json"):
        cfg = _read_config(path)
        cfg_path = path / "config.json" if path.is_dir() else path
        quant_path = _quant_sidecar(cfg_path)
        quant = _read_config(quant_path) if quant_path is not None else None
        return from_hf_config(cfg, _label(cfg, path), dtype, source=str(cfg_path), hf_quant_config=quant)
    choices = sorted({*list_models(), *(c["_servesim_short"] for c in _presets().values())})
    close = difflib.get_close_matches(name_or_path, choices, n=4, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise CatalogError(
        f"unknown model {name_or_path!r} (not a preset and no such path){hint} "
        f"Presets: {', '.join(list_models())}"
    )
