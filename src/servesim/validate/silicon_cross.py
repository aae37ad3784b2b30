"""The silicon suite held out by group: ``servesim validate --suite silicon --cross-group``.

What servesim learns or chooses from the measured runs (``validate/silicon.py``), found by
reading what the suite and the step-time model depend on:

- the host floor of steps without CUDA graphs (``perf.kernel_model.EAGER_HOST_S_PER_LAYER``,
  0.8 ms a reference layer), the one number fitted on these latencies (on Llama-3.1-70B's
  runs). Here it is fitted again for every (model, GPU) group on the *other* groups' runs
  (``FLOOR_GRID_S``: the value whose predictions have the smallest median |log error| of
  mean TTFT plus that of mean TPOT), and the group is predicted with it;
- the known-bad marks (``silicon_marks.SILICON_KNOWN_BAD``), written per group from the
  group's own errors: they change no prediction, and the held-out rows are judged without
  them;
- **rows without a vLLM version run at the newest tables** (``silicon_cases.PASS_ENGINE_VERSION``
  passes none): a switch that serves one group, chosen over the version their workflow's
  image ran on Llama-3.1-70B's own errors (docs/fidelity.md, "Tried and not adopted"), and
  no other group carries the evidence to choose it again. Held out, such a row runs as the
  vLLM its workflow's image ran where that is known (``WORKFLOW_IMAGE``: the a-priori
  choice), else at the newest tables as in sample (nightlies, unknown images);
- everything else is the row's (parallel layout, vLLM version), its launch script's, vLLM's
  defaults or the kernel tables' (measured on kernels, not on these runs). The time a run of
  the Kimi gap-analysis sheet is taken to have run at (``silicon_cases._undated_time``) is read
  from the other rows of its launch script, which are of its own group: a setting of how
  the run was launched (its script's version), not a latency, so it is kept.

Each group's held-out medians are printed beside the in-sample ones (the shipped floor), and
over all runs the ratio held-out / in-sample, whose goal is at most 1.25.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.validate.common import Check
from servesim.validate.limits import Goal
from servesim.validate.silicon_results import SiliconCase, abs_err_stats

#: measured= day -> the vLLM of InferenceMAX's workflow image that day, for rows without a
#: version (the Llama-3.1-70B runs of 2025-10-29: the workflow template's
#: ``vllm/vllm-openai:v0.10.2``, docs/fidelity.md section 5).
WORKFLOW_IMAGE = {"2025-10-29": "0.10.2"}
#: Host floors (seconds a reference layer) among which each held-out fit chooses.
FLOOR_GRID_S = (0.6e-3, 0.7e-3, 0.8e-3, 0.9e-3, 1.0e-3)
RATIO_GOAL = 1.25
RATIO = Goal(
    (RATIO_GOAL - 1) * 100,
    "held-out median |error| at most 1.25x the in-sample one, over all runs "
    "(the error column shows (ratio - 1) in %)",
)


@contextmanager
def host_floor(seconds: float) -> Iterator[None]:
    """Step-time models built inside take this host floor per reference layer."""
    from servesim.perf import kernel_model

    old = kernel_model.EAGER_HOST_S_PER_LAYER
    kernel_model.EAGER_HOST_S_PER_LAYER = seconds
    try:
        yield
    finally:
        kernel_model.EAGER_HOST_S_PER_LAYER = old


def fit_loss(cases: list[SiliconCase]) -> float:
    """Median |log(predicted / measured)| of mean TTFT plus that of mean TPOT."""
    run = [c for c in cases if not c.skip]
    if not run:
        return math.inf
    out = 0.0
    for m in ("ttft", "tpot"):
        r = np.array(
            [math.log(getattr(c, f"predicted_{m}_ms") / getattr(c, f"measured_{m}_ms")) for c in run]
        )
        out += float(np.median(np.abs(r[np.isfinite(r)])))
    return out


@dataclass
class CrossGroup:
    """In-sample cases (the shipped floor), held-out cases and each group's refitted floor."""

    in_sample: list[SiliconCase]
    held_out: list[SiliconCase]
    floors: dict[str, float]
    all_rows_floor: float


def _predictions_by_floor(rows: list[dict[str, str]], shipped: float) -> dict[float, list[SiliconCase]]:
    """Every row's case at every floor of the grid (the shipped one included). Rows whose
    predictions are the same at the grid's two ends do not depend on the floor and are
    simulated there only."""
    from servesim.validate.silicon import run_cases

    grid = sorted({*FLOOR_GRID_S, shipped})
    out: dict[float, list[SiliconCase]] = {}
    for v in (grid[0], grid[-1]):
        with host_floor(v):
            out[v] = run_cases(rows)
    lo, hi = out[grid[0]], out[grid[-1]]
    moved = [
        i
        for i, (a, b) in enumerate(zip(lo, hi))
        if not a.skip
        and (a.predicted_ttft_ms != b.predicted_ttft_ms or a.predicted_tpot_ms != b.predicted_tpot_ms)
    ]
    for v in grid[1:-1]:
        with host_floor(v):
            sub = run_cases([rows[i] for i in moved])
        cases = list(lo)
        for i, c in zip(moved, sub):
            cases[i] = c
        out[v] = cases
    return out


def cross_group(rows: list[dict[str, str]]) -> CrossGroup:
    """Each group predicted with the floor fitted on the other groups' runs."""
    from servesim.perf.kernel_model import EAGER_HOST_S_PER_LAYER as shipped

    by_floor = _predictions_by_floor(rows, shipped)
    in_sample = by_floor[shipped]
    groups = sorted({c.group for c in in_sample if not c.skip})
    held = list(in_sample)
    floors = {}
    for g in groups:
        loss = {v: fit_loss([c for c in cs if c.group != g]) for v, cs in by_floor.items()}
        v = min(loss, key=lambda k: (loss[k], abs(k - shipped)))
        floors[g] = v
        for i, c in enumerate(by_floor[v]):
            if c.group == g:
                held[i] = c
    _workflow_versions(rows, held, floors)
    everything = {v: fit_loss(cs) for v, cs in by_floor.items()}
    best = min(everything, key=lambda k: (everything[k], abs(k - shipped)))
    return CrossGroup(in_sample, held, floors, best)


def image_version(row: dict[str, str]) -> str | None:
    """The vLLM a row without a version ran, from its workflow's image (None: unknown)."""
    from servesim.validate.bench_harness import measured_at

    if row["backend_version"]:
        return None
    return WORKFLOW_IMAGE.get((measured_at(row["silicon_data_source"]) or "")[:10])


def _workflow_versions(rows: list[dict[str, str]], held: list[SiliconCase], floors: dict[str, float]) -> None:
    """Re-run, in ``held``, the rows without a version whose workflow image is known, as
    that vLLM version (its engine defaults, the nearest kernel tables), at their group's floor."""
    from servesim.validate.silicon import simulate_case
    from servesim.validate.silicon_cases import MODELS, kernel_version_for, nvfp4_configs, row_case

    todo = [i for i, r in enumerate(rows) if image_version(r) and not held[i].skip]
    if not todo:
        return
    with nvfp4_configs({p for (p, nv, _) in MODELS.values() if nv}) as tmp:
        for i in todo:
            c = row_case(rows[i], tmp)
            v = image_version(rows[i])
            if c.scenario is None or v is None:
                continue
            c.scenario["engine"]["version"] = v
            c.scenario["hardware"]["kernel_version"] = kernel_version_for(c.scenario["hardware"]["gpu"], v)
            c.notes.append(f"held out as vLLM {v}, its workflow's image")
            with host_floor(floors[c.group]):
                simulate_case(c)
            held[i] = c


def _err(cases: list[SiliconCase], metric: str, group: str | None = None) -> np.ndarray:
    e = np.array(
        [getattr(c, f"{metric}_err_pct") for c in cases if not c.skip and (group is None or c.group == group)]
    )
    return e[np.isfinite(e)]


def cross_table(cg: CrossGroup) -> list[dict[str, Any]]:
    """Per group and over all runs: runs, refitted floor, in-sample and held-out median
    |error| of mean TTFT and TPOT, and their ratio."""
    groups = sorted(cg.floors)
    out = []
    for g in [*groups, None]:
        row: dict[str, Any] = {
            "group": g or "all runs",
            "n": int(len(_err(cg.in_sample, "ttft", g))),
            "floor_ms": round(cg.floors[g] * 1e3, 3) if g else None,
        }
        for m in ("ttft", "tpot"):
            a = abs_err_stats(_err(cg.in_sample, m, g))["median_abs"]
            b = abs_err_stats(_err(cg.held_out, m, g))["median_abs"]
            row.update({f"{m}_in_sample": a, f"{m}_held_out": b, f"{m}_ratio": b / a if a else math.nan})
        out.append(row)
    return out


def cross_checks(cg: CrossGroup) -> list[Check]:
    """Held-out rows (a reference per group, no known-bad marks) and the ratio goal over all runs."""
    from servesim.validate.silicon import MedianCheck

    out: list[Check] = []
    table = cross_table(cg)
    for row in table:
        g = None if row["group"] == "all runs" else row["group"]
        for m in ("ttft", "tpot"):
            note = f"held out; in-sample {row[f'{m}_in_sample']:.1f}%"
            if g:
                note += f"; floor refitted without it: {row['floor_ms']:g} ms"
            out.append(
                MedianCheck.against(
                    "silicon cross-group",
                    row["group"],
                    f"mean {m.upper()}",
                    _err(cg.held_out, m, g),
                    None,
                    note=note,
                )
            )
    total = table[-1]
    for m in ("ttft", "tpot"):
        r = total[f"{m}_ratio"]
        out.append(
            Check.against(
                "silicon cross-group",
                "all runs",
                f"{m.upper()} held-out / in-sample",
                np.array([(r - 1) * 100]),
                RATIO,
                note=f"ratio {r:.2f} ({total[f'{m}_held_out']:.1f}% / {total[f'{m}_in_sample']:.1f}%)",
            )
        )
    return out


def residuals(cases: list[SiliconCase]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """group -> step-time regime -> {"ttft": [...], "tpot": [...]}: log(measured / predicted)."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for c in cases:
        if c.skip:
            continue
        r = out.setdefault(c.group, {}).setdefault(c.regime or "kernel_grid", {"ttft": [], "tpot": []})
        for m in ("ttft", "tpot"):
            x = math.log(getattr(c, f"measured_{m}_ms") / getattr(c, f"predicted_{m}_ms"))
            if math.isfinite(x):
                r[m].append(round(x, 4))
    return out


def write_cross_report(cg: CrossGroup, folder: Path) -> list[Path]:
    """``silicon_cross_group.json`` (the table, floors, residuals) and ``.md`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    table = cross_table(cg)
    js = folder / "silicon_cross_group.json"
    js.write_text(
        json.dumps(
            {
                "groups": table,
                "floors_ms": {g: v * 1e3 for g, v in cg.floors.items()},
                "all_rows_floor_ms": cg.all_rows_floor * 1e3,
                "residuals": residuals(cg.held_out),
            },
            indent=1,
        )
    )
    md = folder / "silicon_cross_group.md"
    lines = [
        "| group | runs | floor (ms) | TTFT in-sample | held out | ratio "
        "| TPOT in-sample | held out | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        fl = "-" if r["floor_ms"] is None else f"{r['floor_ms']:g}"
        lines.append(
            f"| {r['group']} | {r['n']} | {fl} | {r['ttft_in_sample']:.1f}% "
            f"| {r['ttft_held_out']:.1f}% "
            f"| {r['ttft_ratio']:.2f} | {r['tpot_in_sample']:.1f}% | {r['tpot_held_out']:.1f}% "
            f"| {r['tpot_ratio']:.2f} |"
        )
    md.write_text("\n".join(lines) + "\n")
    return [js, md]


def validate_silicon(
    data_dir: Path | None = None,
    output: Path | None = None,
    skipped: list[str] | None = None,
    cross_group: bool = False,
) -> list[Check]:
    """The suite: ``data_dir/measurements/aiconfigurator/silicon_vllm.csv`` where present,
    else the bundled copy; writes the report files into ``output`` when given; appends one
    note per skip reason to ``skipped``. ``cross_group``: also each (model, GPU) group
    predicted with what the suite learns from the runs derived without it
    (the held-out rows come first). It lives here, above ``validate.silicon``, whose cases
    both paths run."""
    from servesim.validate.silicon import checks_of, read_silicon, run_cases
    from servesim.validate.silicon_results import skipped_by_reason, write_report

    path = None if data_dir is None else data_dir / "measurements" / "aiconfigurator" / "silicon_vllm.csv"
    rows = read_silicon(path if path is not None and path.is_file() else None)
    held: list[Check] = []
    if cross_group:
        cg = _cross_group(rows)
        cases = cg.in_sample
        held = cross_checks(cg)
        if output is not None:
            write_cross_report(cg, output)
    else:
        cases = run_cases(rows)
    if skipped is not None:
        for reason, n in skipped_by_reason(cases).items():
            skipped.append(f"silicon: {n} row{'s' * (n > 1)}: {reason}")
    if output is not None:
        write_report(cases, output)
    return held + checks_of(cases)


_cross_group = cross_group
