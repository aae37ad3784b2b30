"""``servesim reproduce``: run a paper's headline experiment and print the paper's figure
beside servesim's; ``--list`` names every paper."""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from servesim.errors import ServesimError
from servesim.papers import PAPERS, get_paper
from servesim.papers.base import Outcome, Paper


def list_table() -> Table:
    t = Table(box=box.SIMPLE_HEAD, title="servesim reproduce NAME (docs/papers.md)")
    for col in ("name", "system", "published headline", "in range if", "runs"):
        t.add_column(col, overflow="fold")
    for p in PAPERS.values():
        ranges = "; ".join(f"{fmt(f.lo, f.unit)}-{fmt(f.hi, f.unit)}" for f in p.figures) or "-"
        t.add_row(p.key, p.name, p.headline, ranges, "yes" if p.runnable else "listed")
    return t


def fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return str(value)
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "":
        return f"{value:.4f}"
    return f"{value:.1f}{unit}"


def figure_rows(paper: Paper, outcome: Outcome | None) -> list[dict[str, Any]]:
    out = []
    for f in paper.figures:
        v = outcome.values.get(f.key) if outcome else None
        out.append(
            {
                "paper": paper.key,
                "figure": f.key,
                "label": f.label,
                "published": f.published,
                "range_lo": f.lo,
                "range_hi": f.hi,
                "servesim": v,
                "in_range": None if v is None else f.within(v),
            }
        )
    return out


def write(output: Path, paper: Paper, quick: bool, outcome: Outcome, wall_s: float) -> list[Path]:
    try:
        output.mkdir(parents=True, exist_ok=True)
        figures = figure_rows(paper, outcome)
        keys: list[str] = []
        for r in outcome.rows:
            keys += [k for k in r if k not in keys]
        rows_csv = output / "rows.csv"
        with open(rows_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(outcome.rows)
        figs_csv = output / "figures.csv"
        with open(figs_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(figures[0]) if figures else ["paper"])
            w.writeheader()
            w.writerows(figures)
        res = output / "reproduce.json"
        res.write_text(
            json.dumps(
                {
                    "paper": paper.key,
                    "name": paper.name,
                    "citation": paper.citation,
                    "headline": paper.headline,
                    "setup": paper.setup,
                    "here": paper.here,
                    "quick": quick,
                    "wall_s": wall_s,
                    "figures": figures,
                    "notes": outcome.notes,
                    "rows": outcome.rows,
                },
                indent=2,
                default=float,
            )
        )
        from servesim.papers.plots import write_plot

        plot = write_plot(output, paper, outcome)
    except OSError as err:
        raise ServesimError(f"{output}: cannot write: {err.strerror or err}") from None
    return [res, figs_csv, rows_csv, *plot[:1]]


def run_paper(name: str, quick: bool) -> tuple[Paper, Outcome, float]:
    paper = get_paper(name)
    if paper.run is None:
        raise ServesimError(f"{paper.name} is listed with its published figure and setup only: {paper.note}")
    t0 = time.perf_counter()
    outcome = paper.run(quick)
    return paper, outcome, time.perf_counter() - t0


def print_paper(paper: Paper, console: Console) -> None:
    console.print(f"[bold]{paper.name}[/bold]: {paper.citation}")
    console.print(f"published: {paper.headline}", markup=False)
    for k, v in paper.setup.items():
        console.print(f"  {k:<9} {v}", markup=False)
    if paper.here:
        console.print(f"servesim: {paper.here}", markup=False)


def reproduce(
    name: str | None,
    *,
    quick: bool = False,
    output: Path | None = None,
    show_list: bool = False,
    strict: bool = False,
    console: Console | None = None,
) -> int:
    """Print the list, or run one paper; returns the exit code: 0, or with ``strict`` 1 when a
    figure is out of the paper's range."""
    console = console or Console(highlight=False, soft_wrap=True)
    if show_list or name is None:
        console.print(list_table())
        return 0
    paper = get_paper(name)
    print_paper(paper, console)
    if paper.run is None:
        raise ServesimError(f"{paper.name} is listed with its published figure and setup only: {paper.note}")
    console.print(f"running{' (--quick)' if quick else ''} ...")
    paper, outcome, wall = run_paper(name, quick)
    t = Table(box=box.SIMPLE_HEAD)
    for col in ("figure", "paper", "in range if", "servesim", "in range"):
        t.add_column(col)
    for f in paper.figures:
        v = outcome.values.get(f.key)
        verdict = "-" if v is None else "yes" if f.within(v) else "no"
        t.add_row(
            f.label,
            f.published,
            f"{fmt(f.lo, f.unit)} - {fmt(f.hi, f.unit)}",
            "not run" if v is None else fmt(v, f.unit),
            verdict,
        )
    console.print(t)
    if any(f.key not in outcome.values for f in paper.figures):
        console.print("not run: figures of the full run only (drop --quick)")
    for n in outcome.notes:
        console.print(n, markup=False)
    if paper.note:
        console.print(f"note: {paper.note}", markup=False)
    console.print(f"({wall:.0f} s)")
    if output is not None:
        paths = write(output, paper, quick, outcome, wall)
        console.print(f"wrote {', '.join(str(p) for p in paths)}", markup=False)
    ok = all(f.within(outcome.values[f.key]) for f in paper.figures if f.key in outcome.values)
    return 1 if strict and not ok else 0
