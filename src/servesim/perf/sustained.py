"""Sustained clocks: compute-bound kernels slow down once the GPU holds its power limit.

The kernel tables (vLLM 0.19.0, ``perf.kernels``) time each kernel in a short burst: a few
warm-ups and six timed runs, tens of milliseconds of work. A GEMM that uses half of the
tensor cores' peak or more then draws more than the board's power limit at full clocks,
and the GPU's power controller lowers the clock once such work has run for a while. A
long prefill is such work: an 8k-token prompt on one H200 is over a second of GEMMs.

How much slower, and after how long, is measured, not assumed: AIConfigurator times the
same bf16 GEMMs (torch's ``F.linear``) once in a burst and once for at least a second
with board power sampled (its vLLM 0.22.0 "power overlays" of B200, H200 and GB200;
``tools/pack_sustained_clocks.py`` packs them into ``data/kernels/sustained_clocks.json``):

- ``ratio(util)``: sustained over burst latency against the burst's utilization (FLOP/s
  over the dense peak of the kernel's dtype), 1 up to about a third of the peak, then
  rising to 1.21 (B200), 1.22 (H200) and 1.36 (GB200) at 0.85, the kernels there drawing
  0.95-1.0 of the power limit;
- ``onset_s``: how long the GPU runs at full clocks first, fitted to the bursts that were
  long enough to be throttled themselves (40 ms on B200, 55 on H200, 25 on GB200).

``KernelPerfModel`` builds every GEMM, fused-MoE and prefill-attention curve twice: as
measured, and slowed point by point by ``ratio`` at the point's own utilization (so
memory-bound decode kernels keep their times). A step whose measured time ``t`` exceeds
``onset_s`` runs its first ``onset_s`` at full clocks and the rest at the sustained ones:
``t + (t - onset_s) / t x (t_sustained - t)``.

Simplified: each step starts at full clocks (the controller's state is not carried from one
step to the next, so back-to-back long prefills are throttled less than they are); pure
decode steps are never slowed (memory-bound, well under the onset); a kernel's utilization
against the dense peak of its own dtype stands for its power draw (the curves are bf16
GEMMs'; FP8 and FP4 tensor cores at the same share of their peak are taken to draw the
same power); GPUs without a measured pair (H100, B300, A100, L40S) run at full clocks
throughout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

SUSTAINED_FILE = "sustained_clocks.json"


@dataclass(frozen=True)
class SustainedClocks:
    """One GPU's measured slowdown of compute-bound kernels at its power limit."""

    gpu: str
    util: tuple[float, ...]
    ratio: tuple[float, ...]
    onset_s: float
    source: str

    def slowed(self, seconds: np.ndarray, flops: np.ndarray, peak: float) -> np.ndarray:
        """``seconds`` of kernels doing ``flops`` (a dtype of dense peak ``peak`` FLOP/s) at
        sustained clocks: each slowed by ``ratio`` at its own utilization (1 below the
        curve, its last ratio above)."""
        seconds = np.asarray(seconds, np.float64)
        util = np.asarray(flops, np.float64) / (seconds * peak)
        return seconds * np.interp(util, self.util, self.ratio)

    def describe(self) -> str:
        return (
            f"sustained clocks: compute-bound work past {self.onset_s * 1e3:.0f} ms of a step up to "
            f"{self.ratio[-1]:.2f}x slower ({self.source})"
        )


@cache
def _bundled() -> dict[str, SustainedClocks]:
    raw = json.loads(resources.files("servesim").joinpath("data", "kernels", SUSTAINED_FILE).read_text())
    src = (
        f"AIConfigurator's bf16 GEMMs of vLLM {raw['burst_version']} (burst) and "
        f"{raw['sustained_version']} (sustained, power sampled)"
    )
    return {
        name: SustainedClocks(name, tuple(g["util"]), tuple(g["ratio"]), float(g["onset_s"]), src)
        for name, g in raw["gpus"].items()
    }


def sustained_clocks(gpu_name: str) -> SustainedClocks | None:
    """The GPU's measured curve, None where none is measured."""
    return _bundled().get(gpu_name)
