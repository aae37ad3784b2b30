"""Which step-time model answers a run, and on what data it stands (the report header).

``describe_perf_model(perf, gpu_name, profile)`` returns a JSON-ready dict::

    {"kind": "roofline" | "profile" | "kernel_db" | <class name>,
     "label": one line for the console,
     "source": what it was built from (spec sheet, a profile's file and fit, a database),
     "calibrated": bool, "gpu": the GPU it times,
     "warnings": ["a profile fitted on A100-80GB used on H100-SXM", ...]}

A perf model may describe itself: when it has a ``describe()`` method returning such a
dict (a kernel database names its GPU and engine version there), that answer is used
and the profile's facts are added to it; the models of this package are described here,
so that their modules stay the timing alone.

The wrappers and models a plain run does not build (policy costs, LoRA, profiled operators)
are checked for only where their module is imported: an instance of a class exists only
once its module is, so describing a run never imports them.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from servesim.perf.base import PerfModel
from servesim.perf.capabilities import RooflineFallbacks, SelfDescribing
from servesim.perf.kernel_model import KernelPerfModel
from servesim.perf.pipelined import PipelinedPerfModel
from servesim.perf.roofline import RooflinePerfModel

if TYPE_CHECKING:
    from servesim.perf.profiled import HardwareProfile, ProfiledPerfModel


def _loaded(module: str) -> bool:
    """Whether ``servesim.perf.<module>`` is imported (else none of its models exists)."""
    return f"servesim.perf.{module}" in sys.modules


def _unwrap(perf: PerfModel) -> tuple[PerfModel, list[str]]:
    """The model under the wrappers that add costs on top (policy costs, micro-batches, sparse attention)."""
    notes = []
    while True:
        if _loaded("policy_costs"):
            from servesim.perf.policy_costs import PolicyCostModel

            if isinstance(perf, PolicyCostModel):
                notes.append("plus swap copies and draft-model steps of the engine policy")
                perf = perf.base
                continue
        if _loaded("lora"):
            from servesim.perf.lora import LoraCostModel

            if isinstance(perf, LoraCostModel):
                notes.append("plus the LoRA shrink/expand kernels and adapter loads (engine.lora)")
                perf = perf.base
                continue
        if _loaded("sparse_attention"):
            from servesim.perf.sparse_attention import SparseAttentionPerfModel

            if isinstance(perf, SparseAttentionPerfModel):
                notes.append(perf.note())
                perf = perf.base
                continue
        if isinstance(perf, PipelinedPerfModel):
            notes.append(f"split into {perf.num_microbatches} pipeline micro-batches")
            perf = perf.inner
        else:
            return perf, notes


def _as_profiled(perf: PerfModel) -> ProfiledPerfModel | None:
    """``perf`` when it is a ``perf.profiled.ProfiledPerfModel``, else None."""
    if not _loaded("profiled"):
        return None
    from servesim.perf.profiled import ProfiledPerfModel

    return perf if isinstance(perf, ProfiledPerfModel) else None


def _own_description(perf: Any) -> dict[str, Any] | None:
    """``perf.describe()`` when it returns a dict (a model describing itself), else None."""
    out = perf.describe() if isinstance(perf, SelfDescribing) else None
    return dict(out) if isinstance(out, dict) else None


def describe_perf_model(
    perf: PerfModel, gpu_name: str, profile: HardwareProfile | None = None
) -> dict[str, Any]:
    """The step-time model of a run (see the module docstring)."""
    core, notes = _unwrap(perf)
    name = type(core).__name__
    d: dict[str, Any]
    if isinstance(core, KernelPerfModel):
        fallbacks = list(core.fallbacks) if isinstance(core, RooflineFallbacks) else []
        version = core.version or "none"
        d = {
            "kind": "kernel_db",
            "label": f"kernel database ({core.gpu.name}, vLLM {version})"
            + (f"; roofline for {', '.join(fallbacks)}" if fallbacks else ""),
            "source": f"measured kernels of vLLM {version} on {core.gpu.name}",
            "engine_version": version,
            "roofline_operators": fallbacks,
        }
        if isinstance(core, SelfDescribing):
            d["detail"] = str(core.describe())  # each operator's source, one a line
        if core.db is None:
            d["warnings"] = [f"no kernel tables for {core.gpu.name}: every operator is the roofline's"]
    elif isinstance(own := _own_description(core), dict):
        d = own
    elif (profiled := _as_profiled(core)) is not None:
        t = profiled.table
        d = {
            "kind": "profile",
            "label": f"profiled operators ({t.model} on {t.gpu}, TP {t.tp})",
            "source": t.source or "operator tables of the hardware profile",
            "table_gpu": t.gpu,
        }
    elif isinstance(core, RooflinePerfModel):
        d = {
            "kind": "roofline",
            "label": "roofline (uncalibrated: spec-sheet peaks x default efficiencies)",
            "source": "catalog spec sheet",
        }
    else:
        d = {"kind": name, "label": name, "source": ""}
    d.setdefault("gpu", gpu_name)
    d.setdefault("warnings", [])
    d["calibrated"] = profile is not None or d["kind"] not in ("roofline",)
    if notes:
        d["notes"] = notes
    if profile is not None:
        fitted_on = profile.fitted_on
        d["profile"] = {
            "name": profile.name,
            "fitted_on": fitted_on,
            "fit": {k: v for k, v in (profile.fit or {}).items() if isinstance(v, (str, int, float))},
        }
        if d["kind"] == "roofline":
            d["label"] = f"roofline calibrated by profile {profile.name!r} (fitted on {fitted_on or '?'})"
            d["source"] = f"profile {profile.name!r}"
        if fitted_on and fitted_on.lower() != gpu_name.lower():
            d["warnings"].append(
                f"profile {profile.name!r} was fitted on {fitted_on} and is used on "
                f"{gpu_name}: "
                "its efficiencies are carried over to another GPU's peaks"
            )
    if d["kind"] == "profile" and d.get("table_gpu") and d["table_gpu"] != gpu_name:
        d["warnings"].append(f"operator tables measured on {d['table_gpu']} time {gpu_name}")
    return d
