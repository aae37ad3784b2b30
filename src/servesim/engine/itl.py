"""Inter-token latency samples as the engine produces them (compiled with the engine: see
setup.py; ``metrics.records`` re-exports ``ItlSamples``).

One (gap seconds, count) pair per step covers every request that produced a token in that
step and also in the step before. The pairs are kept exactly while there are at most
``exact_max_pairs`` of them (the summary's percentiles are then exact); past that they are
moved into a quantile sketch (``metrics.sketch.Sketch``, 1% relative error), and from then
on every ``chunk`` new pairs, so memory stays bounded however long the run.
"""

from __future__ import annotations

from typing import Any

EXACT_MAX_PAIRS = 1 << 20
CHUNK = 1 << 16


class ItlSamples:
    """(gap, count) pairs; ``gap_s`` and ``count`` hold those not yet in ``sketch`` (all of
    them while ``sketch`` is None)."""

    gap_s: list[float]
    count: list[int]
    measured_from: int
    exact_max_pairs: int
    chunk: int
    sketch: Any

    def __init__(self, gap_s: list[float] | None = None, count: list[int] | None = None,
                 measured_from: int = 0, exact_max_pairs: int = EXACT_MAX_PAIRS, chunk: int = CHUNK,
                 sketch: Any = None) -> None:
        self.gap_s = [] if gap_s is None else gap_s
        self.count = [] if count is None else count
        # Benchmark workloads: the first pair of the measured run (those before it are the
        # ready check's and warm-ups', which ``vllm bench`` leaves out).
        self.measured_from = measured_from
        self.exact_max_pairs = exact_max_pairs
        self.chunk = chunk
        self.sketch = sketch  # metrics.sketch.Sketch once the pairs outgrew exact_max_pairs

    def add(self, gap_s: float, count: int) -> None:
        if count > 0:
            self.gap_s.append(gap_s)
            self.count.append(count)
            if len(self.count) > self.exact_max_pairs:
                self.spill()

    def extend(self, gaps_s: list[float], count: int) -> None:
        """One pair per gap, each covering ``count`` tokens (a run of pure-decode steps)."""
        if count > 0:
            self.gap_s.extend(gaps_s)
            self.count.extend([count] * len(gaps_s))
            if len(self.count) > self.exact_max_pairs:
                self.spill()

    @property
    def is_exact(self) -> bool:
        """Every pair is still held (no sketch)."""
        return self.sketch is None

    def spill(self) -> None:
        """Move the held pairs into the sketch (created on the first call); later pairs are
        moved every ``chunk``."""
        from servesim.metrics.sketch import Sketch

        if self.sketch is None:
            self.sketch = Sketch()
            self.exact_max_pairs = self.chunk
        if self.count:
            self.sketch.add_array(self.gap_s, self.count)
            self.gap_s.clear()
            self.count.clear()

    def sketched(self) -> Any:
        """The sketch of every pair so far (None while the pairs are exact)."""
        if self.sketch is not None:
            self.spill()
        return self.sketch

    def clear(self) -> None:
        """Forget every pair."""
        self.gap_s.clear()
        self.count.clear()
        if self.sketch is not None:
            from servesim.metrics.sketch import Sketch

            self.sketch = Sketch(self.sketch.relative_accuracy)

    def __repr__(self) -> str:
        held = f"{len(self.count)} pairs" + ("" if self.sketch is None else " and a sketch")
        return f"ItlSamples({held}, measured_from={self.measured_from})"
