"""A fused-MoE layer of a shape no table measured, timed from the measured shape nearest it.

The kernel tables measure vLLM's fused-MoE op at a few shapes (hidden size x expert width,
top-k, expert count: those of the models their collector knew). A model of another shape
(Llama 4's 5120 x 8192, top-1 of 16 or 128 experts; any new MoE) was timed by the layer's
roofline (``moe_shapes.moe_roofline``). ``nearest_shape_curve`` instead takes the table of
the same dtype and expert parallelism whose shape is nearest (``shape_distance``: the log
ratios of one expert's weights, the top-k and the expert count, summed), at the nearest
``moe_tp`` measured, and carries it to the model's shape and sharding by the roofline ratio
with its fixed latency kept (``rescaled``), as the Marlin and served tables are carried.

Why, held out by shape: each measured table (H100, H200, B200 and A100, every vLLM version
packed, bf16 and fp8: 670 tables of a (shape, moe_tp, ep)) predicted from its nearest other
shape at the same moe_tp and ep is off by a median of the per-table median |log error| of
0.095 (P90 0.38); the roofline by 0.495 (P90 1.62); the carry is the closer in 629 of the
670 (``tests/test_moe_nearest.py`` repeats this on H100's tables). Simplified: the kernel's
efficiency is taken to be the same at both shapes, away from where the table measured it.
"""

from __future__ import annotations

from dataclasses import replace

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import LogCurve, RoofFn
from servesim.perf.kernels import DTYPES, KernelDatabase
from servesim.perf.moe_shapes import moe_roofline, rescaled, shape_distance, table_curve


def nearest_shape_curve(
    db: KernelDatabase,
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    dtype: str,
    roof: RoofFn,
) -> tuple[LogCurve, str] | None:
    """The fused MoE of ``model`` carried from the table of ``db`` (measured on ``gpu``) of
    the nearest other shape of ``dtype`` and ``ep`` (module docstring); None where ``db``
    measures no other shape of them. ``roof`` is the model's own roofline."""
    a = db.arrays
    if "moe.keys" not in a or dtype not in DTYPES:
        return None
    keys, code = a["moe.keys"], DTYPES.index(dtype)
    own = (model.hidden_size, model.moe_intermediate_size, model.num_experts_per_tok, model.num_experts)
    shapes = {(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in keys if r[6] == code and r[5] == ep}
    for h, i, k, e in sorted(shapes - {own}, key=lambda s: (shape_distance(own, s), s)):
        hit = db.moe_nearest(h, i, k, e, moe_tp, ep, dtype)
        if hit is None:
            continue
        tokens, lat, t_tp = hit
        proxy = replace(model, hidden_size=h, moe_intermediate_size=i, num_experts_per_tok=k, num_experts=e)
        ref = moe_roofline(proxy, gpu, eff, t_tp, ep, dtype)
        return (
            table_curve(tokens, rescaled(tokens, lat, roof, ref), roof),
            f"table moe {dtype} {h}x{i} top-{k} of {e} experts tp={t_tp} ep={ep}, the nearest "
            f"measured shape (roofline-scaled to this shape{'' if t_tp == moe_tp else f', tp={moe_tp}'})",
        )
    return None
