"""Performance models (time of one engine iteration) and the memory plan."""

from servesim.perf.base import BatchStats, ConstantPerfModel, PerfModel
from servesim.perf.memory import MemoryPlan, plan_memory
from servesim.perf.roofline import Efficiencies, RooflinePerfModel, build_perf_model

__all__ = [
    "BatchStats",
    "ConstantPerfModel",
    "Efficiencies",
    "MemoryPlan",
    "PerfModel",
    "RooflinePerfModel",
    "build_perf_model",
    "plan_memory",
]
