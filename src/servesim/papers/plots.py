"""``servesim reproduce --output``'s plot page (with plotly installed, the report extra): each
figure's published range beside servesim's value, and the paper's plot redrawn from the run's
rows where the paper declares one (``Paper.curve``: e.g. vLLM's Fig. 12, normalized latency
against the request rate per system)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from servesim.papers.base import Curve, Outcome, Paper
from servesim.report.figures import Plot, Trace


def figures_plot(paper: Paper, outcome: Outcome) -> Plot:
    """One group of bars per figure: the published range's ends and servesim's value."""
    ran = [f for f in paper.figures if _number(outcome.values.get(f.key)) is not None]
    labels = [f"{f.label} ({f.unit.strip() or 'value'})" for f in ran]
    return Plot(
        "figures",
        f"{paper.name}: the paper's range and servesim's figure",
        "figure",
        "value",
        [
            Trace("paper's range, low", labels, [f.lo for f in ran], "bar"),
            Trace("paper's range, high", labels, [f.hi for f in ran], "bar"),
            Trace("servesim", labels, [float(outcome.values[f.key]) for f in ran], "bar"),
        ],
    )


def curve_plot(curve: Curve, rows: list[dict[str, Any]]) -> Plot | None:
    """``curve.y`` against ``curve.x`` per series, from the rows that hold both (None if none do)."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        x, y = _number(r.get(curve.x)), _number(r.get(curve.y))
        if x is None or y is None:
            continue
        name = ", ".join(str(r.get(k)) for k in curve.series if r.get(k) is not None) or curve.y
        lines.setdefault(name, []).append((x, y))
    if not lines:
        return None
    traces = []
    for name, pts in lines.items():
        pts = sorted(set(pts))
        traces.append(Trace(name, [p[0] for p in pts], [p[1] for p in pts], "line"))
    return Plot("curve", curve.title, curve.xlabel, curve.ylabel, traces, log_y=curve.log_y)


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def write_plot(output: Path, paper: Paper, outcome: Outcome) -> list[Path]:
    """``output/plot.html`` and the plotly.js beside it; [] when plotly is not installed."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return []
    from servesim.report.html import Block, plotly_js, plotly_js_name, render_page

    plots = [figures_plot(paper, outcome)]
    if paper.curve is not None:
        drawn = curve_plot(paper.curve, outcome.rows)
        if drawn is not None:
            plots.append(drawn)
    blocks = [Block("h2", f"{paper.name}: {paper.headline}"), Block("note", paper.citation)]
    if paper.here:
        blocks.append(Block("note", f"servesim: {paper.here}"))
    blocks.append(Block("plots", plots=plots))
    page, js = output / "plot.html", output / plotly_js_name()
    js.write_text(plotly_js(), encoding="utf-8")
    page.write_text(render_page(f"servesim reproduce {paper.key}", paper.citation, blocks, js.name), "utf-8")
    return [page, js]
