"""What a validation row must meet: a goal and the reason for it, and, where servesim is
known to miss that goal, the reason it does.

A limit is never "the error the row has today" (that only catches regressions, and calls a
200% error a pass). Each predicted row has a ``Goal``: the accuracy its prediction needs and
why. A goal servesim is known to miss carries ``known_bad``, the reason; such rows are
reported with their measured error, marked "known bad", and do not fail ``servesim
validate``. A known-bad mark that none of its rows needs any more is stale and a test fails
on it (tests/test_validate.py), so that fixing a model also tightens what is checked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Goal:
    """A bound on a row's mean absolute error (%), why that bound, and why it is missed, if it is."""

    limit_pct: float
    why: str
    known_bad: str = ""

    def missed(self, reason: str) -> Goal:
        """The same goal, marked as known to be missed for ``reason``."""
        return Goal(self.limit_pct, self.why, reason)


#: Step times (operators, whole steps): the accuracy a capacity plan needs of them.
STEP_TIME = Goal(
    10.0,
    "a simulated capacity is no better than its step times: the fidelity target for a step-time model is 10%",
)
#: End-to-end latencies (mean and P90 TTFT, TPOT, E2E) of a calibrated engine.
LATENCY = Goal(
    10.0,
    "the target for a calibrated engine's latency predictions: mean and P90 TTFT, TPOT and E2E within 10%",
)
