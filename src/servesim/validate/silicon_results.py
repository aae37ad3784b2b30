"""The silicon suite's results (``validate/silicon.py`` builds and runs the cases): one
measured run's case, per group and over all runs the median and P90 |error| of mean TTFT
and TPOT, and the report ``servesim validate --suite silicon --output DIR`` writes
(``silicon_runs.csv``, ``silicon_groups.json``, ``silicon_groups.md``)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def _num(text: str, default: float = 0.0) -> float:
    return float(text) if text.strip() else default


@dataclass
class SiliconCase:
    """One row: its scenario (None when skipped, with ``skip`` saying why) and its group."""

    row: dict[str, str]
    scenario: dict[str, Any] | None
    skip: str = ""
    notes: list[str] = field(default_factory=list)
    group: str = ""
    nvfp4: str = ""  # preset whose NVFP4 variant the scenario needs (its config is written at run time)
    predicted_ttft_ms: float = math.nan
    predicted_tpot_ms: float = math.nan
    fallbacks: tuple[str, ...] = ()
    regime: str = ""  # the step-time regime of its prediction (metrics.intervals.step_regime)

    @property
    def measured_ttft_ms(self) -> float:
        return _num(self.row["silicon_ttft_ms"], math.nan)

    @property
    def measured_tpot_ms(self) -> float:
        return _num(self.row["silicon_tpot_ms"], math.nan)

    @property
    def ttft_err_pct(self) -> float:
        return (self.predicted_ttft_ms / self.measured_ttft_ms - 1) * 100

    @property
    def tpot_err_pct(self) -> float:
        return (self.predicted_tpot_ms / self.measured_tpot_ms - 1) * 100


def abs_err_stats(errors_pct: np.ndarray) -> dict[str, float]:
    """n, median and P90 of |error| and the median signed error (%)."""
    e = np.asarray(errors_pct, float)
    e = e[np.isfinite(e)]
    if not len(e):
        return {"n": 0, "median_abs": math.nan, "p90_abs": math.nan, "median": math.nan}
    a = np.abs(e)
    return {
        "n": int(len(e)),
        "median_abs": float(np.median(a)),
        "p90_abs": float(np.percentile(a, 90)),
        "median": float(np.median(e)),
    }


def group_table(cases: list[SiliconCase]) -> list[dict[str, Any]]:
    """One row per group (sorted) and a last one, "all runs": TTFT and TPOT statistics."""
    run = [c for c in cases if not c.skip]
    groups: dict[str, list[SiliconCase]] = {}
    for c in run:
        groups.setdefault(c.group, []).append(c)
    out = []
    for label, cs in [*sorted(groups.items()), ("all runs", run)]:
        row: dict[str, Any] = {"group": label, "n": len(cs)}
        for metric in ("ttft", "tpot"):
            s = abs_err_stats(np.array([getattr(c, f"{metric}_err_pct") for c in cs]))
            row.update({f"{metric}_{k}": v for k, v in s.items() if k != "n"})
        notes = sorted({n for c in cs for n in c.notes if "kernel tables" in n})
        row["note"] = "; ".join(notes)
        out.append(row)
    return out


def skipped_by_reason(cases: list[SiliconCase]) -> dict[str, int]:
    """How many rows each skip reason covers (servesim's refusals by their first words)."""
    out: dict[str, int] = {}
    for c in cases:
        if c.skip:
            out[c.skip] = out.get(c.skip, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


#: The columns of ``silicon_runs.csv``.
RUN_COLUMNS = (
    "id",
    "group",
    "model_path",
    "system",
    "precision",
    "backend_version",
    "tp",
    "ep",
    "isl",
    "osl",
    "concurrency",
    "measured_ttft_ms",
    "predicted_ttft_ms",
    "ttft_err_pct",
    "measured_tpot_ms",
    "predicted_tpot_ms",
    "tpot_err_pct",
    "kernel_version",
    "roofline_fallbacks",
    "notes",
    "skipped",
)


def write_report(cases: list[SiliconCase], folder: Path) -> list[Path]:
    """``silicon_runs.csv`` (one row per measured run, skipped ones with their reason),
    ``silicon_groups.json`` and ``silicon_groups.md`` (the group table) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = folder / "silicon_runs.csv"
    with runs.open("w", newline="") as out:
        w = csv.writer(out, lineterminator="\n")
        w.writerow(list(RUN_COLUMNS))
        for c in cases:
            w.writerow(_run_row(c))
    table = group_table(cases)
    js = folder / "silicon_groups.json"
    js.write_text(
        json.dumps(
            {
                "groups": table,
                "skipped": skipped_by_reason(cases),
                "rows": len(cases),
                "run": sum(not c.skip for c in cases),
            },
            indent=1,
        )
    )
    md = folder / "silicon_groups.md"
    md.write_text(markdown_table(table) + "\n")
    return [runs, js, md]


def _run_row(c: SiliconCase) -> list[Any]:
    """One case's ``silicon_runs.csv`` row (``RUN_COLUMNS``); a skipped one has no predictions."""
    r, sc = c.row, c.scenario or {}
    ok = not c.skip

    def f(x: float) -> str:
        return f"{x:.4g}" if ok and math.isfinite(x) else ""

    return [
        r["id"],
        c.group,
        r["model_path"],
        r["system"],
        r["precision"],
        r["backend_version"],
        r["tp_size"],
        r["moe_ep_size"],
        r["isl"],
        r["osl"],
        r["batch_size"],
        r["silicon_ttft_ms"],
        f(c.predicted_ttft_ms),
        f(c.ttft_err_pct) if ok else "",
        r["silicon_tpot_ms"],
        f(c.predicted_tpot_ms),
        f(c.tpot_err_pct) if ok else "",
        (sc.get("hardware") or {}).get("kernel_version") or "",
        " ".join(c.fallbacks),
        "; ".join(c.notes),
        c.skip,
    ]


def markdown_table(table: list[dict[str, Any]]) -> str:
    lines = [
        "| group | runs | TTFT median abs err | P90 | median err | TPOT median abs err | P90 | median err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in table:
        lines.append(
            f"| {g['group']} | {g['n']} | {g['ttft_median_abs']:.1f}% | {g['ttft_p90_abs']:.1f}% | "
            f"{g['ttft_median']:+.1f}% | {g['tpot_median_abs']:.1f}% | {g['tpot_p90_abs']:.1f}% | "
            f"{g['tpot_median']:+.1f}% |"
        )
    return "\n".join(lines)
