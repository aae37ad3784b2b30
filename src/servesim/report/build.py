"""``write_report`` (one output folder) and ``write_comparison`` (several runs side by side).

HTML goes to one page, written atomically (a temporary name, then a rename), with the
installed plotly.js beside it (``plotly-VERSION.min.js``, written once per folder and shared
by every page there) or, ``self_contained``, inside it; PNG/SVG go to a folder, one file per
plot.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeGuard

from servesim.errors import ServesimError
from servesim.metrics.progress import progress_bar
from servesim.report import figures, tables
from servesim.report.figures import Plot
from servesim.report.html import Block, plotly_js, plotly_js_name, render_page
from servesim.report.rundir import RunDir, open_run_dir

Format = Literal["html", "png", "svg"]
FORMATS = ("html", "png", "svg")


def _run_blocks(run: RunDir, plots: list[Plot]) -> list[Block]:
    cdfs = [p for p in plots if p.id.startswith("cdf_")]
    series = [p for p in plots if p.id not in {q.id for q in cdfs} and p.id != "utilization"]
    blocks = [
        Block("h2", "Summary"),
        Block("table", rows=[list(r) for r in tables.run_rows(run.summary)], key_column=True),
        Block("h2", "Latency distributions"),
        Block(
            "note",
            "Finished requests; ITL rebuilt from the step records (one gap per token). "
            "Drag to zoom, double-click to reset.",
        ),
        Block("plots", plots=cdfs),
        Block("h2", "Over time"),
        Block("plots", plots=series),
    ]
    pools = tables.pool_rows(run.summary)
    util = [p for p in plots if p.id == "utilization"]
    if pools or util:
        blocks.append(Block("h2", "Pools and replicas"))
        if pools:
            blocks.append(Block("table", header=pools[0], rows=pools[1]))
        blocks.append(Block("plots", plots=util))
    models = tables.model_rows(run.summary)
    if models is not None:
        limits = next(iter(run.summary["models"]["per_model"].values())).get("slo_limits") or {}
        slo = (
            ", ".join(f"{k.removesuffix('_s').upper()} <= {tables.cell(v)} s" for k, v in limits.items())
            or "none"
        )
        blocks += [
            Block("h2", "Models"),
            Block(
                "note",
                "One row per served model: latency over its finished requests; SLO attainment "
                f"({slo}) over all its requests, rejected and unfinished ones missing; goodput "
                "its requests a second that met every SLO.",
            ),
            Block("table", header=models[0], rows=models[1]),
        ]
    tenants = tables.tenant_rows(run.summary)
    if tenants is not None:
        line, header, rows = tenants
        blocks += [Block("h2", "Tenants"), Block("note", line), Block("table", header=header, rows=rows)]
    notices = run.summary.get("notices") or []
    if notices:
        blocks += [
            Block("h2", "Notices (changes made to the input)"),
            Block(
                "table",
                rows=[[str(n.get("kind", n.get("code", ""))), str(n.get("message", n))] for n in notices],
            ),
        ]
    return blocks


def _plan_blocks(run: RunDir, plots: list[Plot]) -> list[Block]:
    blocks = [Block("h2", "Candidates, ranked")]
    cols = run.tables.get("candidates")
    if cols:
        header, rows, n = tables.candidate_rows(cols)
        if n > len(rows):
            blocks.append(Block("note", f"the first {len(rows)} of {n:,} candidates"))
        blocks.append(Block("table", header=header, rows=rows))
    else:
        blocks.append(Block("note", "no candidates table in this folder"))
    blocks.append(Block("h2", "Pareto fronts"))
    if not plots:
        return blocks + [
            Block(
                "note",
                "nothing to draw: no simulated candidate with a cost per hour (usd_per_hour) and an outcome",
            )
        ]
    return blocks + [
        Block(
            "note",
            "Each outcome against $/hour, one marker per simulated candidate; the "
            "dashed line is pareto.json's front for that outcome.",
        ),
        Block("plots", plots=plots),
    ]


def _capacity_blocks(run: RunDir, plots: list[Plot]) -> list[Block]:
    doc = run.documents.get("capacity") or {}
    result = doc.get("result") or {}
    rows = [[k.replace("_", " "), tables.cell(v)] for k, v in result.items()]
    spread = doc.get("uncertainty") or {}  # the answer at other seeds (planner.spread.SeedSpread)
    for key in ("seeds", "answers", "interval", "relative_half_width", "stable_width", "stable"):
        if key in spread:
            rows.append([f"uncertainty: {key.replace('_', ' ')}", tables.cell(spread[key])])
    blocks = [
        Block("h2", "Capacity"),
        Block("table", rows=rows, key_column=True),
        Block("h2", "Probes"),
        Block("plots", plots=plots),
    ]
    probes = run.tables.get("probes")
    if probes:
        names: list[str] = [
            c
            for c in (
                "rate_rps",
                "meets",
                "margin",
                "cut_short",
                "attainment",
                "ttft_p99_s",
                "tpot_p99_s",
                "goodput_rps",
            )
            if c in probes
        ]
        blocks.append(
            Block(
                "table",
                header=names,
                rows=[[tables.cell(probes[c][i]) for c in names] for i in range(len(probes[names[0]]))],
            )
        )
    return blocks


def _validate_blocks(run: RunDir, plots: list[Plot]) -> list[Block]:
    blocks = [Block("h2", "Predicted against measured"), Block("plots", plots=plots)]
    groups = tables.group_rows(run.documents.get("groups"))
    if groups:
        blocks += [
            Block("h2", "Errors per group (silicon_groups.json)"),
            Block("table", header=groups[0], rows=groups[1]),
        ]
    return blocks


BLOCKS: dict[str, Callable[[RunDir, list[Plot]], list[Block]]] = {
    "run": _run_blocks,
    "plan": _plan_blocks,
    "capacity": _capacity_blocks,
    "validate": _validate_blocks,
}
TITLES = {
    "run": "servesim run",
    "plan": "servesim plan",
    "capacity": "servesim capacity",
    "validate": "servesim validation",
}


def _write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_plotly_js(folder: Path) -> Path:
    """``folder/plotly-VERSION.min.js`` (left as it is when it already holds that text)."""
    path = folder / plotly_js_name()
    js = plotly_js()
    try:
        same = (
            path.is_file()
            and path.stat().st_size == len(js.encode("utf-8"))
            and path.read_text(encoding="utf-8") == js
        )
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        _write_text_atomic(path, js)
    return path


def _save(
    title: str,
    subtitle: str,
    blocks: list[Block],
    plots: list[Plot],
    out: Path,
    fmt: str,
    tick: Callable[[int], None] | None,
    self_contained: bool = False,
) -> list[Path]:
    try:
        if fmt == "html":
            if self_contained:
                _write_text_atomic(out, render_page(title, subtitle, blocks))
                return [out]
            js = _write_plotly_js(out.parent)
            _write_text_atomic(out, render_page(title, subtitle, blocks, js.name))
            return [out, js]
        from servesim.report.static import save_plot

        if not plots:
            raise ServesimError(
                f"{subtitle}: nothing to draw as {fmt.upper()} (the folder holds no data "
                "for any plot); --format html writes its tables"
            )
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for k, plot in enumerate(plots):
            paths.append(out / f"{plot.id}.{fmt}")
            save_plot(plot, paths[-1])
            if tick:
                tick(k + 1)
        return paths
    except OSError as err:
        raise ServesimError(f"{out}: cannot write the report: {err.strerror or err}") from None


def paths_line(paths: list[Path]) -> str:
    """'wrote a, b' (or 'wrote N files in DIR' for a folder of images)."""
    if len(paths) <= 3:
        return "wrote " + ", ".join(str(p) for p in paths)
    return f"wrote {len(paths)} files in {paths[0].parent}"


def _is_format(fmt: str) -> TypeGuard[Format]:
    return fmt in FORMATS


def format_named(fmt: str) -> Format:
    """The report format ``--format fmt`` names, or a ServesimError listing them."""
    if not _is_format(fmt):
        raise ServesimError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def default_output(run_dir: Path, fmt: str) -> Path:
    """RUN_DIR/report.html, or the folder RUN_DIR/plots for PNG/SVG."""
    return run_dir / ("report.html" if fmt == "html" else "plots")


def write_report(
    run_dir: Path | str,
    out_path: Path | str | None = None,
    fmt: Format = "html",
    progress: bool = False,
    self_contained: bool = False,
) -> list[Path]:
    """Report of one output folder (a run, a plan, a capacity search or a validation); returns
    its files: the page and the plotly.js beside it (HTML; the page alone when
    ``self_contained``), or one image per plot (PNG/SVG)."""
    fmt = format_named(fmt)
    run_dir = Path(run_dir)
    out = Path(out_path) if out_path is not None else default_output(run_dir, fmt)
    with progress_bar(progress, 3, time.perf_counter()) as tick:
        run = open_run_dir(run_dir)
        if tick:
            tick(1)
        plots = figures.run_plots(run)
        if tick:
            tick(2)
        blocks = BLOCKS[run.kind](run, plots)
        paths = _save(
            f"{TITLES[run.kind]}: {run.label}", str(run_dir), blocks, plots, out, fmt, None, self_contained
        )
        if tick:
            tick(3)
    return paths


def write_comparison(
    run_dirs: list[Path | str],
    out_path: Path | str,
    fmt: Format = "html",
    progress: bool = False,
    self_contained: bool = False,
) -> list[Path]:
    """Several runs side by side: their summaries in one table, their latency CDFs overlaid."""
    fmt = format_named(fmt)
    if len(run_dirs) < 2:
        raise ServesimError("compare: give at least two run folders")
    with progress_bar(progress, len(run_dirs) + 1, time.perf_counter()) as tick:
        runs = []
        for k, d in enumerate(run_dirs):
            run = open_run_dir(d)
            if run.kind != "run":
                raise ServesimError(
                    f"{d}: a {run.kind} folder; compare takes run folders (servesim simulate --output DIR)"
                )
            runs.append(run)
            if tick:
                tick(k + 1)
        labels = [r.label for r in runs]
        if len(set(labels)) < len(labels):  # same scenario name: tell them apart by folder
            for r in runs:
                r.summary = {
                    **r.summary,
                    "scenario": {**(r.summary.get("scenario") or {}), "name": str(r.path)},
                }
        plots = [p for p in (figures.cdf_plot(m, t, runs) for m, t in figures.LATENCIES) if p.traces]
        header, rows = tables.comparison_rows(runs)
        blocks = [
            Block("h2", "Summaries"),
            Block("table", header=header, rows=rows, key_column=True),
            Block("h2", "Latency distributions"),
            Block("plots", plots=plots),
        ]
        paths = _save(
            "servesim comparison", ", ".join(labels), blocks, plots, Path(out_path), fmt, None, self_contained
        )
        if tick:
            tick(len(run_dirs) + 1)
    return paths
