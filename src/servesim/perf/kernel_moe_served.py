"""The fused-MoE tables of the kernels vLLM serves where the packed tables time another
(``SERVED_FILE``: FlashInfer's TRTLLM-gen MXFP4 and block-FP8 MoEs of Blackwell, Marlin's
int4 MoE), carried to the model's shape and sharding (``served_curve``); ``perf.kernel_moe``
chooses when they time a layer.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from importlib import resources
from math import log
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import LogCurve
from servesim.perf.kernels import sm100_folder
from servesim.perf.moe_shapes import (
    NO_PAD,
    moe_roofline,
    padded_experts,
    rescaled,
    shape_distance,
    table_curve,
)

#: Package data (``tools/pack_served_moe.py``): fused-MoE tables of kernels vLLM serves where
#: the packed tables time another, each row naming its kernel (AIConfigurator's vLLM 0.24.0
#: MoE table of B200, at the packed tables' source commit): the two TRTLLM-gen MXFP4 MoEs and
#: Marlin's int4 MoE (``MARLIN_SERVED``).
SERVED_FILE = "served_moe.json"


#: The math of each served kernel, the peak of its roofline (16-bit or FP8 tensor cores).
SERVED_MATH = {
    "flashinfer_trtllm_mxfp4_bf16": "w4a16_mxfp4",
    "flashinfer_trtllm_mxfp4_mxfp8": "fp8",
    "marlin_int4": "int4_wo",
    "flashinfer_trtllm_fp8_block": "fp8",
}


#: vLLM's Marlin MoE of int4 experts (``CompressedTensorsWNA16MarlinMoEMethod``,
#: ``fused_marlin_moe``) as the served table names it: B200's only Marlin measurement (its
#: ``int4_wo`` tables of vLLM 0.19.0 time Triton's W4A16 ``fused_experts``, ``marlin_curve``).
MARLIN_SERVED = "marlin_int4"


@cache
def _served() -> dict[tuple[str, str], dict[str, Any]]:
    raw = json.loads(resources.files("servesim").joinpath("data", "kernels", SERVED_FILE).read_text())
    return {(t["gpu"], t["kernel"]): t for t in raw["tables"]}


def served_curve(
    model: ModelSpec,
    gpu: GpuSpec,
    kernel: str,
    moe_tp: int,
    ep: int,
    eff: Efficiencies,
    pad: tuple[int, int] = NO_PAD,
) -> tuple[LogCurve, str] | None:
    """One MoE layer timed from the served kernel's own table (``SERVED_FILE``): the series
    of the shape nearest the model's (``shape_distance``) and, in it, the nearest moe_tp at
    this EP size, carried to the model's shape and sharding by the roofline ratio of the
    kernel's math (``SERVED_MATH``) with its fixed latency kept (``rescaled``), as
    ``marlin_curve`` carries Marlin's. Both rooflines are of the shapes the kernel computes
    on, padded to ``pad`` (``padded_experts``, ``mxfp4_pad``): the tables name the
    checkpoint's shape, and vLLM pads inside the layer they time. None where the GPU's
    tables have no such series.

    The tables are vLLM 0.24.0's measurements of the kernels; runs of earlier versions are
    timed from them too (the TRTLLM-gen MXFP4 MoE has been vLLM's SM100 kernel since 0.10.2,
    with older FlashInfer builds: a simplification)."""
    table = _served().get((sm100_folder(gpu.name), kernel))
    if table is None:
        return None
    series = [s for s in table["series"] if s["moe_ep"] == ep]
    if not series:
        return None
    own = (model.hidden_size, model.moe_intermediate_size, model.num_experts_per_tok, model.num_experts)
    best = min(
        series,
        key=lambda s: (shape_distance(own, tuple(s["shape"])), abs(log(s["moe_tp"] / moe_tp)), s["moe_tp"]),
    )
    (h, i, k, e), t_tp = best["shape"], best["moe_tp"]
    math = SERVED_MATH[kernel]
    roof = moe_roofline(padded_experts(model, moe_tp, pad), gpu, eff, moe_tp, ep, math)
    tokens, lat = np.array(best["tokens"], dtype=float), np.array(best["latency_ms"], dtype=float)
    where = (
        f"table moe {kernel} {h}x{i} top-{k} of {e} experts tp={t_tp} ep={ep} of vLLM {table['vllm_version']}"
    )
    same = (h, i, k, e) == own
    if same and t_tp == moe_tp:
        return table_curve(tokens, lat, roof), where
    proxy = replace(model, hidden_size=h, moe_intermediate_size=i, num_experts_per_tok=k, num_experts=e)
    ref = moe_roofline(padded_experts(proxy, t_tp, pad), gpu, eff, t_tp, ep, math)
    to = [*(() if same else ("this shape",)), *(() if t_tp == moe_tp else (f"tp={moe_tp}",))]
    return (
        table_curve(tokens, rescaled(tokens, lat, roof, ref), roof),
        f"{where} (roofline-scaled to {', '.join(to)})",
    )
