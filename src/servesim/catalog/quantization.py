"""Quantized checkpoints: bytes per weight of each part of the network, from the config.

A checkpoint says how it is quantized in ``config.json``'s ``quantization_config`` or, for
NVIDIA ModelOpt exports, in ``hf_quant_config.json`` beside it (whose ``kv_cache_quant_algo``
FP8 also makes vLLM's ``kv_cache_dtype`` 'auto' an fp8 KV cache). What serving cost depends
on is how many bytes a parameter of each part takes and which tensor-core math runs it:

================  ==========================================  ===================  ==========
scheme            what is quantized                           bytes per parameter  math
================  ==========================================  ===================  ==========
fp8 (block or     every linear layer but the router and the  1 (one fp32 scale    fp8
per-tensor)       LM head                                     per 128x128 block)
mxfp4 (gpt-oss)   routed experts only (vLLM quantizes only    4.25 / 8: e2m1 and   bf16
                  its fused MoE layers with it)               an e8m0 scale per 32
compressed-       the linear layers its ``targets`` name and  num_bits / 8 + scale  bf16 (W4A16)
tensors           ``ignore`` does not (Kimi-K2.5: experts     per group (bf16; fp8  or fp8
                  only, int4 in groups of 32)                 for 4-bit floats)
modelopt FP8      every linear layer but ``exclude_modules``  1                    fp8
modelopt NVFP4    same                                        4.5 / 8: e2m1 and an  fp8 (fp4 where
                                                              fp8 scale per 16      the GPU has it)
================  ==========================================  ===================  ==========

Embeddings, norms and routers stay 16-bit. Scales of 128x128 fp8 blocks (0.02%) are not
counted. Which parts a compressed-tensors or ModelOpt exclusion list leaves unquantized is
decided on representative module names of each part (``_PART_NAMES``), not per layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from servesim.errors import CatalogError

#: Representative module names of each part, as Hugging Face checkpoints name them.
_PART_NAMES = {
    "attention": ("model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.o_proj"),
    "dense": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"),
    "shared": ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_expert.gate_proj"),
    # and of a layer past the dense ones: nvidia/GLM-5.1-NVFP4 leaves all of layer 1 unquantized
    "experts": (
        "model.layers.1.mlp.experts.0.gate_proj",
        "model.layers.1.block_sparse_moe.experts.0.w1",
        "model.layers.10.mlp.experts.0.gate_proj",
    ),
}

MXFP4_BYTES = 4.25 / 8  # 4-bit e2m1 values, one 8-bit e8m0 scale per 32
NVFP4_BYTES = 4.5 / 8  # 4-bit e2m1 values, one fp8 e4m3 scale per 16


@dataclass(frozen=True, slots=True)
class Quantization:
    """Weight bytes of a checkpoint: ``dtype``/``dtype_bytes`` for attention, dense MLPs and
    shared experts, ``expert_dtype_bytes`` for routed experts (0: the same); ``method`` names it."""

    dtype: str
    dtype_bytes: float
    expert_dtype_bytes: float
    method: str
    kv_cache_dtype: str = ""


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    return (
        fnmatch(name, pattern)
        or fnmatch(name, pattern + ".*")
        or name.endswith("." + pattern)
        or f".{pattern}." in f".{name}."
    )


def _is_excluded(part: str, patterns: list[str]) -> bool:
    """Whether the exclusion list leaves ``part`` unquantized (all its representative names)."""
    return all(any(_matches(n, p) for p in patterns) for n in _PART_NAMES[part])


def _compressed_tensors(qc: dict[str, Any], source: str) -> tuple[float, str, str, list[str]]:
    """(bytes per parameter, dtype name, label, targets) of a compressed-tensors config's
    first weight group."""
    groups = qc.get("config_groups") or {}
    if not groups:
        raise CatalogError(f"{source}: quantization_config has no config_groups")
    group = next(iter(groups.values()))
    w = group.get("weights") or {}
    bits = w.get("num_bits")
    if not isinstance(bits, int) or bits <= 0:
        raise CatalogError(
            f"{source}: quantization_config weights.num_bits must be a positive integer, found {bits!r}"
        )
    is_float = w.get("type") == "float"
    size = (
        w.get("group_size") if w.get("strategy", "group" if w.get("group_size") else "") == "group" else None
    )
    scale_bytes = 1.0 if (is_float and bits == 4) else 2.0  # fp4 groups: fp8 scales; int groups: bf16
    per_param = bits / 8 + (scale_bytes / size if size else 0.0)
    acts = group.get("input_activations") or {}
    w8a8 = is_float and bits == 8 and (acts.get("num_bits") or 16) <= 8
    dtype = "fp8" if w8a8 else ("nvfp4" if is_float and bits == 4 else f"int{bits}")
    label = f"{'fp' if is_float else 'int'}{bits}" + (f" (groups of {size})" if size else "")
    return per_param, dtype, label, list(group.get("targets") or ["Linear"])


def parse_quantization(
    cfg: dict[str, Any], hf_quant: dict[str, Any] | None, base_dtype: str, source: str
) -> Quantization | None:
    """The checkpoint's quantization, or None for an unquantized one.

    ``cfg`` is the (text) config, ``hf_quant`` the content of ``hf_quant_config.json`` (or
    None), ``base_dtype`` the dtype of what stays unquantized.
    """
    qc = cfg.get("quantization_config")
    if hf_quant is not None:
        qc = {**hf_quant.get("quantization", hf_quant), "quant_method": "modelopt"}
    if not isinstance(qc, dict) or not qc:
        return None
    method = str(qc.get("quant_method") or ("modelopt" if qc.get("quant_algo") else "")).lower()
    if method == "fp8":
        block = qc.get("weight_block_size")
        kind = f"block {'x'.join(map(str, block))}" if block else "per-tensor"
        return Quantization("fp8", 1.0, 0.0, f"fp8 ({kind})")
    if method == "mxfp4":
        return Quantization(base_dtype, 2.0, MXFP4_BYTES, "mxfp4 experts")
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        if algo not in ("FP8", "NVFP4"):
            raise CatalogError(
                f"{source}: ModelOpt quant_algo {qc.get('quant_algo')!r} is not supported; "
                f"expected FP8 or NVFP4"
            )
        per_param = 1.0 if algo == "FP8" else NVFP4_BYTES
        dtype = "fp8" if algo == "FP8" else "nvfp4"
        # hf_quant_config.json names exclusions exclude_modules; a config.json's own ModelOpt
        # block (nvidia/Kimi-K2.5-NVFP4) names them ignore, prefixed by the text model's
        # ``language_model.``.
        excluded = [
            str(p).removeprefix("language_model.")
            for p in (qc.get("exclude_modules") or qc.get("ignore") or [])
        ]
        q = _by_part(dtype, per_param, base_dtype, excluded, ["Linear"], f"modelopt {algo}", source)
        # vLLM's kv_cache_dtype 'auto' takes the checkpoint's KV quantization (FP8):
        # kv_cache_quant_algo, or in a config.json's block an 8-bit float kv_cache_scheme.
        scheme = qc.get("kv_cache_scheme") or {}
        fp8_kv = str(qc.get("kv_cache_quant_algo") or "").upper() == "FP8" or (
            isinstance(scheme, dict) and scheme.get("num_bits") == 8 and scheme.get("type") == "float"
        )
        kv = "fp8" if fp8_kv else ""
        return Quantization(q.dtype, q.dtype_bytes, q.expert_dtype_bytes, q.method, kv)
    if method == "compressed-tensors":
        per_param, dtype, label, targets = _compressed_tensors(qc, source)
        return _by_part(
            dtype,
            per_param,
            base_dtype,
            list(qc.get("ignore") or []),
            targets,
            f"compressed-tensors {label}",
            source,
        )
    raise CatalogError(
        f"{source}: quantization method {method!r} is not supported; expected fp8, mxfp4, "
        f"compressed-tensors or modelopt (hf_quant_config.json)"
    )


def _by_part(
    dtype: str,
    per_param: float,
    base_dtype: str,
    excluded: list[str],
    targets: list[str],
    method: str,
    source: str,
) -> Quantization:
    """Attention/dense quantized or not, experts quantized or not, from the exclusion list."""

    def quantized(part: str) -> bool:
        targeted = "Linear" in targets or any(_matches(n, t) for t in targets for n in _PART_NAMES[part])
        return targeted and not _is_excluded(part, excluded)

    rest = quantized("attention") and quantized("dense")
    experts = quantized("experts")
    if rest:
        return Quantization(dtype, per_param, 0.0 if experts else 2.0, method)
    if experts:
        return Quantization(base_dtype, 2.0, per_param, f"{method} experts")
    raise CatalogError(f"{source}: the quantization config leaves attention, MLPs and experts unquantized")
