"""The spread of a capacity search's answer over the workload's seeds (``planner.capacity``,
"Uncertainty"): the answers at ``k`` seeds give a 95% prediction interval for the answer at
a new seed, ``mean +- t(0.975, k-1) s sqrt(1 + 1/k)`` (Student's t; s the answers' sample
standard deviation)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Student's t quantile at 0.975 for 1..30 degrees of freedom (any statistics table).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
MAX_SEEDS = len(_T975) + 1


@dataclass(slots=True)
class SeedSpread:
    """The capacity found at several seeds of one workload: a prediction interval for the
    answer at another seed (``planner.capacity``'s docstring, "Uncertainty")."""

    num_requests: int  # requests a run simulates (at the first seed)
    seeds: list[int]
    answers: list[float]  # capacity at each seed, in the knob's unit
    varies: bool  # False: the seed does not change the workload (a trace), so neither the answer
    num_probes: int = 0  # probes the other seeds' searches ran

    @property
    def mean(self) -> float:
        return sum(self.answers) / len(self.answers)

    @property
    def std(self) -> float:
        k, m = len(self.answers), self.mean
        return math.sqrt(sum((a - m) ** 2 for a in self.answers) / (k - 1)) if k > 1 else 0.0

    @property
    def half_width(self) -> float | None:
        """95% prediction half-width of the answer at a new seed (None: fewer than 2 seeds)."""
        k = len(self.answers)
        if k < 2:
            return None if self.varies else 0.0
        return _T975[k - 2] * self.std * math.sqrt(1.0 + 1.0 / k)

    @property
    def interval(self) -> tuple[float, float] | None:
        h = self.half_width
        return None if h is None else (max(0.0, self.mean - h), self.mean + h)

    @property
    def relative_half_width(self) -> float | None:
        h = self.half_width
        return None if h is None or self.mean <= 0 else h / self.mean

    def is_within(self, width: float | None) -> bool:
        """The answer is stable to ``width`` (relative half-width), or the seed changes nothing."""
        rel = self.relative_half_width
        return not self.varies or (width is not None and rel is not None and rel <= width)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "capacity searched at each seed; 95% prediction interval of the answer at "
            "another seed: mean +- t(0.975, k-1) * std * sqrt(1 + 1/k)",
            "seed_varies_workload": self.varies,
            "num_requests": self.num_requests,
            "seeds": self.seeds,
            "answers": self.answers,
            "mean": self.mean,
            "std": self.std,
            "interval": None if self.interval is None else list(self.interval),
            "relative_half_width": self.relative_half_width,
            "num_probes": self.num_probes,
        }
