"""GPU power: what a GPU draws while it runs a step, idles, or runs at a capped clock.

While a step runs, one GPU draws (as a fraction of its TDP, ``GpuSpec.max_power_w``)::

    P / TDP = active + compute * flops / (peak_flops * t) + memory * bytes / (hbm_bw * t)

capped at 1 (the board's power limit): an always-on part of a busy GPU, plus terms in its
compute and memory utilization over the step. Between steps it draws ``idle_power_w``.
Because the terms are linear in the step's FLOPs and bytes, a replica's energy follows
from its run totals (``ReplicaTotals``: ``gpu_s``, ``flops``, ``bytes`` per GPU) with no
per-step bookkeeping. The three coefficients are fitted by ``tools/fit_power.py`` to the
Splitwise measurements of Llama-2-70B and BLOOM-176B on DGX-A100 (average power over a
run as a fraction of TDP, swept over prompt size, batch size and TP) and bundled in
``data/power_model.json`` with the fit's error, held-out error included (fit on one model,
predict the other: 2.4 % of TDP). A larger batch reads the weights once for more tokens,
so energy per token falls with batch size, as in the Splitwise data.

**Clock scaling** (POLCA, Patel et al., ASPLOS'24; Splitwise, ISCA'24): capping the SM
clock to a fraction ``f`` of its maximum slows the compute-bound part of a step by ``1/f``
and leaves the memory-bound part as it is (HBM has its own clock), so a step of compute
fraction ``cf = flops / (peak * t)`` takes ``t * (cf / f + 1 - cf)``; the compute term of
the power scales as ``f**3`` per unit of work done per second (dynamic power ~ C V^2 f
with the voltage following the clock), so it draws ``compute * cu * f**2`` where ``cu`` is
the utilization measured against the full-clock peak. That is the asymmetry both papers
report: the prompt phase slows under a power cap, the token phase barely does (the
Splitwise power-capped H100 runs prefill 1.30x slower and decode 1.00x, the same ratio the
bundled ``clock`` entry records). A simplification: static power is unchanged by the clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from servesim.perf.base import BatchStats, PerfModel
from servesim.perf.capabilities import decode_step_times

POWER_MODEL_FILE = "power_model.json"


@dataclass(frozen=True, slots=True)
class PowerCoefficients:
    """Per-GPU power while a step runs, as fractions of TDP (see the module docstring)."""

    active: float
    compute: float
    memory: float
    prefill_slowdown_at_cap: float = 1.0  # Splitwise's power-capped H100, prefill time ratio

    @property
    def capped_clock(self) -> float:
        """The SM clock (fraction of max) that slows a compute-bound step as the cap did."""
        return 1.0 / self.prefill_slowdown_at_cap


@cache
def bundled_coefficients() -> PowerCoefficients:
    """The coefficients fitted to the Splitwise measurements (``tools/fit_power.py``)."""
    raw = json.loads(resources.files("servesim").joinpath("data", POWER_MODEL_FILE).read_text())
    return PowerCoefficients(raw["active"], raw["compute"], raw["memory"], raw["clock"]["prefill_slowdown"])


def step_power_frac(
    coef: PowerCoefficients, compute_util: float, mem_util: float, clock: float = 1.0
) -> float:
    """Power of one GPU over a step, as a fraction of TDP (utilizations against full-clock peaks)."""
    p = coef.active + coef.compute * compute_util * clock * clock + coef.memory * mem_util
    return p if p < 1.0 else 1.0


def busy_energy_j(
    gpu: Any,
    gpu_s: float,
    flops: float,
    bytes_: float,
    coef: PowerCoefficients | None = None,
    dtype: str = "bfloat16",
    clock: float = 1.0,
) -> float:
    """Energy of one GPU over ``gpu_s`` seconds of steps doing ``flops`` and ``bytes_`` (per GPU).

    Linear in the totals; the TDP cap is applied to the mean power over them (a step above
    the cap is rare: a full-clock prefill at 75 % MFU draws 0.99 of TDP).
    """
    if gpu_s <= 0:
        return 0.0
    coef = coef or bundled_coefficients()
    cu = flops / (gpu.flops_for(dtype) * gpu_s)
    mu = bytes_ / (gpu.mem_bw * gpu_s)
    return gpu.max_power_w * step_power_frac(coef, cu, mu, clock) * gpu_s


def replica_energy_j(
    gpu: Any,
    num_gpus: int,
    window_s: float,
    gpu_s: float,
    flops: float,
    bytes_: float,
    dtype: str = "bfloat16",
) -> float:
    """A replica's GPUs over ``window_s``: busy ``gpu_s`` priced by the model, idle the rest."""
    gpu_s = min(gpu_s, window_s)
    busy = busy_energy_j(gpu, gpu_s, flops, bytes_, dtype=dtype)
    return num_gpus * (busy + gpu.idle_power_w * (window_s - gpu_s))


class ClockedPerf:
    """A perf model whose GPU runs at ``clock`` x its maximum SM clock (``clock`` is set by
    the power capper, ``servesim.cluster.operations``); 1.0 returns the base model's times.

    A plain wrapper, not a subclass: the lazy engine calls ``batch_time`` and
    ``decode_step_times`` on whatever perf model it is given.
    """

    def __init__(self, base: PerfModel, peak_flops: float) -> None:
        self.base = base
        self.peak_flops = peak_flops
        self.clock = 1.0

    def _scale(self, t: float, flops: float) -> float:
        if self.clock >= 1.0 or t <= 0:
            return t
        cf = flops / (self.peak_flops * t)
        cf = cf if cf < 1.0 else 1.0
        return t * (cf / self.clock + 1.0 - cf)

    def batch_time(self, stats: BatchStats) -> float:
        t = self.base.batch_time(stats)
        return t if self.clock >= 1.0 else self._scale(t, self.base.batch_flops(stats))

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        t = decode_step_times(self.base, num_decode_reqs, sum_decode_context)
        if self.clock >= 1.0:
            return t
        # Decode FLOPs are affine in the context sum: two evaluations give the line.
        f0 = self.base.batch_flops(BatchStats(num_decode_reqs=num_decode_reqs))
        f1 = self.base.batch_flops(BatchStats(num_decode_reqs=num_decode_reqs, sum_decode_context=1 << 20))
        flops = f0 + (f1 - f0) / (1 << 20) * sum_decode_context
        cf = np.minimum(flops / (self.peak_flops * np.maximum(t, 1e-12)), 1.0)
        return t * (cf / self.clock + 1.0 - cf)

    def batch_flops(self, stats: BatchStats) -> float:
        return self.base.batch_flops(stats)

    def batch_bytes(self, stats: BatchStats) -> float:
        return self.base.batch_bytes(stats)
