"""What a paper's reproduction is: the paper's headline and setup as it states them, the
figures servesim must land in (the paper's own range), and the experiment that measures them.

A headline given as one figure ("2.6x", "up to 36.9x") is checked against that figure
+-25% (``around``); a headline given as a range ("1.7-2.7x") against the range. The bounds
are the paper's, never servesim's earlier output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

#: The tolerance around a headline stated as one figure.
TOLERANCE = 1.25


@dataclasses.dataclass(frozen=True, slots=True)
class Figure:
    """One headline number: its label, the paper's wording, and the range servesim must hit."""

    key: str
    label: str
    published: str
    lo: float
    hi: float
    unit: str = "x"

    def within(self, value: float) -> bool:
        return self.lo <= value <= self.hi


def around(key: str, label: str, published: str, value: float, unit: str = "x") -> Figure:
    """A headline stated as one figure: that figure +-25%."""
    return Figure(key, label, published, value / TOLERANCE, value * TOLERANCE, unit)


@dataclasses.dataclass(slots=True)
class Outcome:
    """What one run measured: a value per figure key, and the rows behind them."""

    values: dict[str, float]
    rows: list[dict[str, Any]]
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class Curve:
    """The paper's plot, redrawn from the run's rows (``--output`` with plotly installed): ``y``
    against ``x``, one line per distinct value of the ``series`` fields, over the rows that
    hold both."""

    title: str
    x: str
    y: str
    series: tuple[str, ...]
    xlabel: str
    ylabel: str
    log_y: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Paper:
    """One serving system of the literature and its headline experiment."""

    key: str
    name: str
    citation: str
    headline: str
    #: The paper's setup, as it states it: model, gpus, workload, slo, baseline, metric.
    setup: dict[str, str]
    figures: tuple[Figure, ...]
    #: servesim's run of it, in words (what is scaled down or stood in for).
    here: str = ""
    run: Callable[[bool], Outcome] | None = None
    #: Why servesim's figure is where it is (known gaps, what is not modelled).
    note: str = ""
    #: The paper's plot redrawn from the rows, where its rows hold one.
    curve: Curve | None = None

    @property
    def runnable(self) -> bool:
        return self.run is not None
