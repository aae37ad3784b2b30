"""Inter-token latency samples as the engine produces them (compiled with the engine: see
setup.py; a run's are ``metrics.records.Result.itl``).

One (gap seconds, count) pair per step covers every request that produced a token in that
step and also in the step before. The pairs are kept exactly while there are at most
``exact_max_pairs`` of them (the summary's percentiles are then exact); past that every
pair is counted into the buckets of a quantile sketch (``metrics.sketch.Sketch``, 1%
relative error) as it comes, so memory stays bounded however long the run.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Final

EXACT_MAX_PAIRS = 1 << 20
RELATIVE_ACCURACY = 0.01  # as metrics.sketch's
# ddsketch's min_possible: smaller gaps count as zero.
TINY: Final = sys.float_info.min * (1.0 + 2.0 * RELATIVE_ACCURACY / (1.0 - RELATIVE_ACCURACY))


class ItlSamples:
    """(gap, count) pairs; ``gap_s`` and ``count`` hold all of them while ``is_exact``.

    Past ``exact_max_pairs`` pairs every pair is counted straight into the buckets of a
    DDSketch (``metrics.sketch``: bucket ``ceil(ln(gap) * multiplier)``), here, in the
    engine's compiled code, without holding it; ``sketched()`` hands the buckets to a
    ``metrics.sketch.Sketch``."""

    gap_s: list[float]
    count: list[int]
    measured_from: int
    exact_max_pairs: int
    is_exact: bool
    relative_accuracy: float
    _mult: float
    _cur_key: int
    _cur_w: float
    _lo: float
    _hi: float
    _bins: dict[int, float]  # bucket key -> weight, positive gaps
    _neg_bins: dict[int, float]  # negative gaps (none expected), by the key of -gap
    _zeros: float
    _total: float
    _sum: float
    _sum_sq: float
    _min: float
    _max: float

    def __init__(
        self,
        gap_s: list[float] | None = None,
        count: list[int] | None = None,
        measured_from: int = 0,
        exact_max_pairs: int = EXACT_MAX_PAIRS,
        relative_accuracy: float = RELATIVE_ACCURACY,
    ) -> None:
        self.gap_s = [] if gap_s is None else gap_s
        self.count = [] if count is None else count
        # Benchmark workloads: the first pair of the measured run (those before it are the
        # ready check's and warm-ups', which ``vllm bench`` leaves out).
        self.measured_from = measured_from
        self.exact_max_pairs = exact_max_pairs
        self.is_exact = True
        self.relative_accuracy = relative_accuracy
        # ddsketch's LogarithmicMapping: key(x) = ceil(log_gamma(x)) = ceil(ln(x) / ln(gamma))
        # (metrics.sketch.log_multiplier; math.log is compiled inline, log2 would not be).
        self._mult = 1.0 / math.log1p(2.0 * relative_accuracy / (1.0 - relative_accuracy))
        self._reset_bins()

    def _reset_bins(self) -> None:
        self._cur_key = 0  # the bucket being filled, its weight and the gaps seen in it
        self._cur_w = 0.0
        self._lo = math.inf
        self._hi = -math.inf
        self._bins = {}
        self._neg_bins = {}
        self._zeros = 0.0
        self._total = 0.0
        self._sum = 0.0
        self._sum_sq = 0.0
        self._min = math.inf
        self._max = -math.inf

    def add(self, gap_s: float, count: int) -> None:
        if count > 0:
            if not self.is_exact:
                self._bin(gap_s, float(count))
                return
            self.gap_s.append(gap_s)
            self.count.append(count)
            if len(self.count) > self.exact_max_pairs:
                self.spill()

    def extend(self, gaps_s: list[float], count: int) -> None:
        """One pair per gap, each covering ``count`` tokens (a run of pure-decode steps)."""
        if count > 0:
            if not self.is_exact:
                self._bin_all(gaps_s, float(count))
                return
            self.gap_s.extend(gaps_s)
            self.count.extend([count] * len(gaps_s))
            if len(self.count) > self.exact_max_pairs:
                self.spill()

    def _bin(self, gap: float, w: float) -> None:
        # Consecutive gaps mostly fall in one bucket: the key is a monotone function of the
        # gap, so a gap inside the current key's interval has that key, without the
        # logarithm. The interval is the bucket's (gamma^(k-1), gamma^k] narrowed by a
        # relative 1e-9 on each side, far beyond the rounding of ln(gap) * multiplier, and
        # widened to the gaps the logarithm put in it: a gap near a boundary takes the
        # logarithm, as every gap did before, so the keys are the same.
        if self._lo <= gap <= self._hi:
            self._cur_w += w
        else:
            self._new_bucket(gap, w)
        self._total += w
        gw = gap * w
        self._sum += gw
        self._sum_sq += gw * gap
        if gap < self._min:
            self._min = gap
        if gap > self._max:
            self._max = gap

    def _bin_all(self, gaps: list[float], w: float) -> None:
        """``_bin(gap, w)`` for each of ``gaps`` in order, the sums kept in locals (compiled,
        C doubles) and written back once: the same additions in the same order."""
        lo, hi, cur_w = self._lo, self._hi, self._cur_w
        total, s, sq, mn, mx = self._total, self._sum, self._sum_sq, self._min, self._max
        for gap in gaps:
            if lo <= gap <= hi:
                cur_w += w
            else:
                self._cur_w = cur_w
                self._new_bucket(gap, w)
                lo, hi, cur_w = self._lo, self._hi, self._cur_w
            total += w
            gw = gap * w
            s += gw
            sq += gw * gap
            if gap < mn:
                mn = gap
            if gap > mx:
                mx = gap
        self._cur_w = cur_w
        self._total, self._sum, self._sum_sq, self._min, self._max = total, s, sq, mn, mx

    def _new_bucket(self, gap: float, w: float) -> None:
        if gap > TINY:
            k = int(math.ceil(math.log(gap) * self._mult))
            if k == self._cur_key and self._cur_w > 0.0:
                self._cur_w += w
                if gap < self._lo:
                    self._lo = gap
                if gap > self._hi:
                    self._hi = gap
                return
            self._flush_bucket()
            lo = math.exp((k - 1) / self._mult) * (1.0 + 1e-9)
            hi = math.exp(k / self._mult) * (1.0 - 1e-9)
            self._cur_key, self._cur_w = k, w
            self._lo = lo if lo < gap else gap
            self._hi = hi if hi > gap else gap
        elif gap < -TINY:
            k = int(math.ceil(math.log(-gap) * self._mult))
            self._neg_bins[k] = self._neg_bins.get(k, 0.0) + w
        else:
            self._zeros += w

    def _flush_bucket(self) -> None:
        if self._cur_w > 0.0:
            self._bins[self._cur_key] = self._bins.get(self._cur_key, 0.0) + self._cur_w
            self._cur_w = 0.0

    def spill(self) -> None:
        """Count the held pairs into the buckets and hold no more from now on."""
        gaps, counts = self.gap_s, self.count
        for i in range(len(counts)):
            if counts[i] > 0:
                self._bin(gaps[i], float(counts[i]))
        gaps.clear()
        counts.clear()
        self.is_exact = False

    def sketched(self) -> Any:
        """A ``metrics.sketch.Sketch`` of every pair so far (None while the pairs are exact)."""
        if self.is_exact:
            return None
        from servesim.metrics.sketch import Sketch

        self._flush_bucket()
        self._lo, self._hi = math.inf, -math.inf
        sk = Sketch(self.relative_accuracy)
        sk.add_buckets(
            self._bins,
            self._neg_bins,
            self._zeros,
            self._total,
            self._sum,
            self._sum_sq,
            self._min,
            self._max,
        )
        return sk

    def clear(self) -> None:
        """Forget every pair."""
        self.gap_s.clear()
        self.count.clear()
        self._reset_bins()

    def __repr__(self) -> str:
        held = f"{len(self.count)} pairs" if self.is_exact else f"{self._total:.0f} tokens in a sketch"
        return f"ItlSamples({held}, measured_from={self.measured_from})"
