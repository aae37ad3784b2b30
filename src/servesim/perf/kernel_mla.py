"""MLA's prefill attention from AIConfigurator's measured MLA attention module.

vLLM's DeepSeek-V2/V3 layers (DeepSeek-V3/R1, Kimi-K2/K2.5) run a prefill as multi-head
attention over keys and values up-projected from the cached latent (``forward_mha``: head
size ``qk_nope + qk_rope`` = 192 for queries and keys, 128 for values), and around it a
dozen small kernels: the latent and query down-projection's norms, rotary, the latent's
cache write, the split and concatenation of the up-projected keys. The GQA attention tables
have no such class, so the prefill was priced by the roofline, and the small kernels not
at all (``elementwise`` holds two norms a layer).

AIConfigurator's collection has vLLM 0.19.0 tables of the whole MLA attention module of a
DeepSeek-V3 layer on B200, H200 and H100 (``data/kernels/mla_context.json``, packed by
``tools/pack_mla_module.py``): vLLM's own ``DeepseekV2MLAAttention`` timed from its input
to its output projection, by KV dtype, linear layers' dtype, heads on the rank, prompts and
prompt length. The kernel model already times the module's five projections from the GEMM
tables (``KernelLayerOps._mla_ops``, at every step's tokens), so the prefill attention of a
layer is the measured module less those projections at the same tokens: the attention and
the small kernels, measured (at least the attention's FLOPs at the GPU's peak). It is used
where the model's attention has the module's shape (DeepSeek-V3's latent, head and hidden
sizes: DeepSeek-V3/R1, Kimi-K2/K2.5) at a measured head count, KV dtype and GEMM dtype;
elsewhere the roofline stays. Simplified: the
0.19.0 tables time every vLLM version; a table point the collector did not measure (more
than 131,072 prompt tokens in one step) is the last measured length's, scaled by the
attention roofline; B300 and GB200 read B200's module tables (``kernels.sm100_folder``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from importlib import resources
from math import log
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_attention import MAX_BATCH, MAX_LENGTH, Grid, gqa_roof
from servesim.perf.kernel_curves import ext_grid, extended_axis
from servesim.perf.kernels import sm100_folder

MLA_FILE = "mla_context.json"
#: The model fields that must equal the measured module's for its table to time the model.
MODULE_FIELDS = (
    "hidden_size",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


@cache
def _tables() -> dict[str, Any]:
    return dict(json.loads(resources.files("servesim").joinpath("data", "kernels", MLA_FILE).read_text()))


def module_series(
    model: ModelSpec, gpu: GpuSpec, tp: int, kv_dtype: str, gemm_dtype: str
) -> dict[str, Any] | None:
    """The measured module series of this model's attention on one rank, or None (another
    shape, no table of this GPU, heads, KV dtype or GEMM dtype)."""
    data = _tables()
    mod = data["module"]
    if not model.is_mla or any(getattr(model, f) != mod[f] for f in MODULE_FIELDS):
        return None
    per_gpu = data["gpus"].get(sm100_folder(gpu.name))
    if per_gpu is None or model.num_attention_heads % tp:
        return None
    series = per_gpu["series"].get(f"{kv_dtype}|{gemm_dtype}|{model.num_attention_heads // tp}")
    return None if series is None else dict(series)


def mla_prefill_grid(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kvb: float,
    gemm_dtype: str,
    projections: Callable[[np.ndarray], np.ndarray],
    eff: Efficiencies,
) -> tuple[Grid, str] | None:
    """All layers' MLA prefill attention on one rank (KV bytes per element ``kvb``), as
    ``attention_grid`` returns it: the measured module less ``projections(tokens)`` (seconds
    of one layer's five projections at that many tokens), at least the attention's FLOPs at
    the GPU's peak, extended beyond the measured axes by the attention's roofline. None
    where ``module_series`` has no table."""
    m = model
    kv_dtype = "fp8" if kvb < 2 else "bfloat16"
    s = module_series(m, gpu, tp, kv_dtype, gemm_dtype)
    if s is None:
        return None
    heads = m.num_attention_heads // tp
    mha = gqa_roof("ctx", gpu, eff, kvb, m.head_dim)  # multi-head: as many KV heads as heads

    def roof(b: np.ndarray, length: np.ndarray) -> np.ndarray:
        return mha(b, length, heads, heads)

    batch, lens = np.array(s["batch"], np.float64), np.array(s["isl"], np.float64)
    lat = np.array([[np.nan if v is None else v for v in row] for row in s["latency_ms"]], np.float64)
    bb, ss = np.meshgrid(batch, lens, indexing="ij")
    # at least the attention's FLOPs (b s^2 / 2 causal pairs) at the GPU's peak: one point of
    # the packed tables is below it (H200, 128 heads, block-FP8 projections, one token, where
    # the GEMM tables exceed the module)
    peak_ms = bb * ss * ss / 2 * m.attn_flops_per_pair(tp) / gpu.flops_for("bfloat16") * 1e3
    rest = np.maximum(lat - projections((bb * ss).ravel()).reshape(bb.shape) * 1e3, peak_ms)
    for i in range(len(batch)):  # unmeasured tails (too many tokens): the roofline's growth
        ok = np.isfinite(rest[i])
        last = int(np.flatnonzero(ok)[-1])
        for j in np.flatnonzero(~ok):
            rest[i, j] = rest[i, last] * float(
                roof(batch[i : i + 1], lens[j : j + 1])[0] / roof(batch[i : i + 1], lens[last : last + 1])[0]
            )
    ext_b, ext_s = extended_axis(batch, 1.0, MAX_BATCH), extended_axis(lens, 1.0, MAX_LENGTH)
    grid = ext_grid(batch, lens, rest, ext_b, ext_s, roof) + log(1e-3) + log(m.num_layers)
    src = (
        f"table mla_context_module {sm100_folder(gpu.name)} vLLM {_tables()['vllm_version']} {kv_dtype} "
        f"KV {gemm_dtype} heads={heads}, less its projections"
    )
    return (np.log(ext_b), ext_s, grid), src
