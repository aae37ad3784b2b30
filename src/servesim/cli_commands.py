"""The ``servesim`` commands that work over many runs or keep running: ``report`` and
``compare`` (output folders), ``capacity`` and ``plan`` (many simulations), ``serve`` (a live
simulation behind an HTTP server), ``reproduce`` (a paper's headline experiment).
``servesim.cli`` registers them on its app; like every
command they only parse options and call one typed function.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from servesim.cli_base import check_output, user_errors
from servesim.cli_options import (
    CapacityJsonOut,
    CapacityMaxRate,
    CapacityMaxRequests,
    CapacityMinRate,
    CapacityNoEarlyStop,
    CapacityNoProgress,
    CapacityOutput,
    CapacityOverrides,
    CapacityPrecision,
    CapacityQuiet,
    CapacityScenario,
    CapacitySeeds,
    CapacityStable,
    PlanAddress,
    PlanBackend,
    PlanCache,
    PlanConfidence,
    PlanFile,
    PlanGpus,
    PlanIsl,
    PlanJsonOut,
    PlanModel,
    PlanNoProgress,
    PlanNumRequests,
    PlanObjective,
    PlanOsl,
    PlanOutput,
    PlanOverrides,
    PlanRate,
    PlanTop,
    PlanTotalGpus,
    PlanTpot,
    PlanTrace,
    PlanTtft,
    PlanWorkers,
)
from servesim.errors import ServesimError

_FORMAT = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="html|png|svg",
        help="html: one interactive page (offline; plotly.js beside it); png/svg: one image per plot.",
    ),
]
_NO_PROGRESS = Annotated[bool, typer.Option("--no-progress", help="Do not show a progress bar.")]
_SELF_CONTAINED = Annotated[
    bool,
    typer.Option(
        "--self-contained",
        help="HTML: embed plotly.js in the page (+4.8 MB) instead of loading "
        "plotly-VERSION.min.js from the page's folder.",
    ),
]
_REPORT = Annotated[
    bool,
    typer.Option("--report", help="Also write OUTPUT/report.html (needs --output; see servesim report)."),
]


def _check_report(report: bool, output: Path | None) -> None:
    if report and output is None:
        raise ServesimError("--report: give --output DIR (the report is written to DIR/report.html)")
    check_output(output)


#: The short form's options with their defaults (``plan``): with a plan file they would be ignored.
_SHORT_FORM = {
    "model": None,
    "gpus": ["H100-SXM"],
    "total_gpus": 8,
    "isl": None,
    "osl": None,
    "trace": None,
    "rate": 1.0,
    "ttft_s": None,
    "tpot_s": None,
    "num_requests": 400,
    "confidence": None,
}


def _refuse_short_form(opts: Mapping[str, object]) -> None:
    """A plan file gives the model, GPUs, workload and SLO itself: a short-form option beside
    it would be ignored, so it is refused naming the file's field to set instead."""
    flag = {"ttft_s": "ttft", "tpot_s": "tpot"}
    given = [k for k, default in _SHORT_FORM.items() if opts.get(k) != default]
    if given:
        name = "--" + flag.get(given[0], given[0]).replace("_", "-")
        raise ServesimError(
            f"{name}: a short-form option, not read with a plan file; set it in the file or with --set "
            "(e.g. --set model.name=..., --set slo.confidence=0.8, --set plan.gpus=[...])"
        )


def _write_report(output: Path, quiet: bool = False) -> None:
    from servesim.report import paths_line, write_report

    line = paths_line(write_report(output))
    if not quiet:
        typer.echo(line)


def report(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="An output folder: of servesim simulate --output, of a plan (candidates.*, pareto.json) "
            "or of servesim validate --output (silicon_runs.csv).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The HTML file, or the folder for PNG/SVG files "
            "(default RUN_DIR/report.html, RUN_DIR/plots).",
        ),
    ] = None,
    fmt: _FORMAT = "html",
    no_progress: _NO_PROGRESS = False,
    self_contained: _SELF_CONTAINED = False,
) -> None:
    """Write a report of an output folder: summary, latency CDFs, time series, utilization
    (a run); ranked candidates and Pareto fronts (a plan); predicted vs measured (a validation)."""
    with user_errors():
        from servesim.report import paths_line, write_report
        from servesim.report.build import format_named

        typer.echo(
            paths_line(
                write_report(
                    run_dir,
                    output,
                    format_named(fmt),
                    progress=not no_progress,
                    self_contained=self_contained,
                )
            )
        )


def compare(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(help="Two or more output folders of servesim simulate --output.", show_default=False),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The HTML file, or the folder for PNG/SVG files.")
    ] = Path("compare.html"),
    fmt: _FORMAT = "html",
    no_progress: _NO_PROGRESS = False,
    self_contained: _SELF_CONTAINED = False,
) -> None:
    """Several runs side by side: their summaries in one table, their latency CDFs overlaid."""
    with user_errors():
        from servesim.report import paths_line, write_comparison
        from servesim.report.build import format_named

        typer.echo(
            paths_line(
                write_comparison(
                    list(run_dirs),
                    output,
                    format_named(fmt),
                    progress=not no_progress,
                    self_contained=self_contained,
                )
            )
        )


def capacity(
    scenario: CapacityScenario = None,
    overrides: CapacityOverrides = None,
    output: CapacityOutput = None,
    precision: CapacityPrecision = 0.05,
    max_rate: CapacityMaxRate = None,
    min_rate: CapacityMinRate = None,
    no_early_stop: CapacityNoEarlyStop = False,
    seeds: CapacitySeeds = 5,
    stable: CapacityStable = None,
    max_requests: CapacityMaxRequests = None,
    json_out: CapacityJsonOut = False,
    quiet: CapacityQuiet = False,
    no_progress: CapacityNoProgress = False,
    report: _REPORT = False,
) -> None:
    """Find the highest arrival rate the deployment sustains while meeting its SLO targets.

    Scales the workload's rate (a trace's rate_scale, a synthetic arrival.rate, the rate
    sessions, agent tasks or reasoning questions start), bracketing then bisecting, and
    reports the answer's spread over seeds; exits 1 when even the lowest rate misses. See
    docs/planning.md.
    """
    from servesim.planner.capacity import CapacityNotFound
    from servesim.planner.capacity_report import run_capacity

    with user_errors():
        _check_report(report, output)
        try:
            run_capacity(
                scenario,
                overrides or [],
                output,
                precision=precision,
                max_rate=max_rate,
                min_rate=min_rate,
                early_stop=not no_early_stop,
                seeds=seeds,
                stable=stable,
                max_requests=max_requests,
                json_out=json_out,
                quiet=quiet,
                progress=not (no_progress or quiet or json_out),
            )
        except CapacityNotFound as err:
            Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {err}", markup=False)
            raise typer.Exit(1) from None
        if report and output is not None:
            _write_report(output, quiet or json_out)


def plan(
    plan_file: PlanFile = None,
    overrides: PlanOverrides = None,
    model: PlanModel = None,
    gpus: PlanGpus = "H100-SXM",
    total_gpus: PlanTotalGpus = 8,
    isl: PlanIsl = None,
    osl: PlanOsl = None,
    trace: PlanTrace = None,
    rate: PlanRate = 1.0,
    ttft: PlanTtft = None,
    tpot: PlanTpot = None,
    confidence: PlanConfidence = None,
    num_requests: PlanNumRequests = 400,
    backend: PlanBackend = "process",
    workers: PlanWorkers = None,
    address: PlanAddress = None,
    output: PlanOutput = None,
    cache: PlanCache = None,
    objective: PlanObjective = None,
    top: PlanTop = 10,
    json_out: PlanJsonOut = False,
    no_progress: PlanNoProgress = False,
    report: _REPORT = False,
) -> None:
    """Search deployments (GPU, TP/PP/EP/DP, replicas, disaggregation, engine knobs) for the cheapest
    meeting the SLOs."""
    from servesim.planner.output import plan_command

    with user_errors():
        _check_report(report, output)
        opts = {
            "model": model,
            "gpus": [g.strip() for g in gpus.split(",") if g.strip()],
            "total_gpus": total_gpus,
            "isl": isl,
            "osl": osl,
            "trace": trace,
            "rate": rate,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "num_requests": num_requests,
            "confidence": confidence,
        }
        if plan_file is not None:
            _refuse_short_form(opts)
        sets = [*(overrides or []), *([f"plan.objective={objective}"] if objective else [])]
        code = plan_command(
            str(plan_file) if plan_file else None,
            sets,
            opts,
            backend=backend,
            workers=workers,
            address=address,
            output=str(output) if output else None,
            cache=str(cache) if cache else None,
            top=top,
            progress=not no_progress,
            json_out=json_out,
        )
        if report and output is not None:
            _write_report(output, json_out)
    raise typer.Exit(code)


def serve(
    scenario: Annotated[
        Path | None,
        typer.Argument(
            help="Scenario file (its deployment; its workload is not read). Omit for the default.",
            show_default=False,
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help="Override one scenario field.")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8000,
    speed: Annotated[float, typer.Option(help="Simulated seconds per wall second.")] = 1.0,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No live status line.")] = False,
) -> None:
    """Serve an OpenAI-compatible API whose requests run in a live simulation (docs/serve.md)."""
    with user_errors():
        try:
            from servesim.serve.server import run_serve
        except ImportError as err:
            raise ServesimError(f"servesim serve needs {err.name}: pip install 'servesim[serve]'") from None
        run_serve(scenario, overrides or [], host, port, speed, progress=not no_progress)


def reproduce(
    name: Annotated[
        str | None,
        typer.Argument(help="The paper (servesim reproduce --list names them).", show_default=False),
    ] = None,
    show_list: Annotated[
        bool, typer.Option("--list", help="List every paper with its published headline.")
    ] = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="A smaller run (fewer requests, a coarser search).")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            file_okay=False,
            help="Directory to write reproduce.json, figures.csv and rows.csv into, and with plotly "
            "installed (the report extra) plot.html: the paper's range beside servesim's figure, and "
            "the paper's plot redrawn from the rows.",
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when a servesim figure is out of the paper's range.")
    ] = False,
) -> None:
    """Run one paper's headline experiment in its own setup and print its figure beside servesim's.

    Prints, for each headline figure, the paper's value, the range servesim's must land in, servesim's
    value from this run and whether it is in range (--strict: exit 1 when one is not). See docs/papers.md.
    """
    from servesim.papers.reproduce import reproduce as run_reproduce

    with user_errors():
        check_output(output)
        code = run_reproduce(name, quick=quick, output=output, show_list=show_list, strict=strict)
    raise typer.Exit(code)
