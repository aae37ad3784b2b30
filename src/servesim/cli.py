"""The ``servesim`` command line. Commands only parse options and call one typed function.

User mistakes (any ``ServesimError``) print ``error: <message>`` on stderr and exit 2
without a traceback; Ctrl-C exits 130 quietly; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from servesim.cli_base import EXIT_INTERRUPTED, EXIT_USER_ERROR, app, check_output
from servesim.cli_base import user_errors as _user_errors
from servesim.cli_catalog import catalog
from servesim.cli_commands import capacity, compare, plan, report, reproduce, serve
from servesim.cli_measured import calibrate, profile, validate
from servesim.errors import ServesimError

if TYPE_CHECKING:
    from servesim.metrics.output import RecordsFormat as RecordsFormatName

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "app", "main"]


class RecordsFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"


#: The choices typer shows, as the names ``metrics.output.write_outputs`` takes.
RECORDS_FORMATS: dict[RecordsFormat, RecordsFormatName] = {
    RecordsFormat.parquet: "parquet",
    RecordsFormat.csv: "csv",
}


@app.command()
def simulate(
    scenario: Annotated[
        Path | None,
        typer.Argument(
            help="Scenario file (YAML or TOML). Omit to run the built-in default scenario.",
            show_default=False,
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Override one scenario field, e.g. --set engine.max_num_seqs=64 "
            "(repeatable; values parse as YAML scalars).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            file_okay=False,
            help="Directory to write summary.json, requests.* and steps.* into (created if needed).",
        ),
    ] = None,
    records_format: Annotated[
        RecordsFormat,
        typer.Option("--records-format", help="File format of the per-request and per-step records."),
    ] = RecordsFormat.parquet,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout instead of the report.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing but errors (and the JSON with --json).")
    ] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Do not show a progress bar while simulating.")
    ] = False,
    report: Annotated[
        bool,
        typer.Option("--report", help="Also write OUTPUT/report.html (needs --output; see servesim report)."),
    ] = False,
) -> None:
    """Run one simulation and report latency, throughput, SLOs, utilization, energy and cost.

    Without a scenario file this runs the default scenario: Llama-3.1-8B on one H100
    (SXM) with vLLM V1 default engine settings, serving the bundled one-hour Azure 2023
    conversation trace, with SLOs TTFT <= 2 s and TPOT <= 100 ms. Change any part of it
    with --set, e.g. --set hardware.gpu=A100-80GB --set workload.rate_scale=2.

    Every scenario field (type, unit, default, the vLLM option it mirrors):
    docs/scenario_reference.md.
    """
    with _user_errors():
        if report and output is None:
            raise ServesimError("--report: give --output DIR (the report is written to DIR/report.html)")
        check_output(output)
        run_simulate(
            scenario,
            overrides or [],
            output,
            RECORDS_FORMATS[records_format],
            json_out=json_out,
            quiet=quiet,
            progress=not (no_progress or quiet or json_out),
        )
        if report and output is not None:
            from servesim.report import paths_line, write_report

            paths = write_report(output, progress=not (no_progress or quiet or json_out))
            if not (quiet or json_out):
                typer.echo(paths_line(paths))


def run_simulate(
    scenario_path: Path | None,
    overrides: list[str],
    output: Path | None,
    records_format: RecordsFormatName,
    *,
    json_out: bool = False,
    quiet: bool = False,
    progress: bool = False,
    console: Console | None = None,
) -> Any:
    """Resolve the scenario, simulate, report, write outputs; returns the ``Result``."""
    from servesim import sim
    from servesim.config import load_scenario
    from servesim.errors import naming_file
    from servesim.metrics.console import print_summary
    from servesim.metrics.output import write_outputs
    from servesim.metrics.summary import summarize

    scenario = load_scenario(scenario_path, overrides)
    # A long run streams its step series into the output directory (or, before it exists,
    # beside it: the same filesystem, so the file is renamed into place, never copied).
    stream_to = None
    if output is not None:
        stream_to = output if output.is_dir() else output.parent if output.parent.is_dir() else None
    with naming_file(None if scenario_path is None else str(scenario_path)):
        result = sim.simulate(
            scenario, progress=progress, stream_steps_to=stream_to, steps_format=str(records_format)
        )
    if not result.summary:
        result.summary = summarize(result)
    paths: list[Path] = []
    if output is not None:  # files first: a closed stdout (| head) must not lose them
        try:
            paths = write_outputs(result, output, records_format)
        except OSError as err:
            raise ServesimError(f"{output}: cannot write outputs: {err.strerror or err}") from None
    console = console or Console(highlight=False)
    if json_out:
        typer.echo(json.dumps(result.summary, indent=2, allow_nan=False))
    elif not quiet:
        print_summary(result, console)
        if paths:
            console.print(f"wrote {', '.join(str(p) for p in paths)}", highlight=False, soft_wrap=True)
    return result


# The commands of the other cli_* modules, in the order ``servesim --help`` lists them.
for _command in (report, compare, capacity, catalog, calibrate, validate, profile, plan, serve, reproduce):
    app.command()(_command)


@app.command()
def version() -> None:
    """Print the servesim version."""
    from servesim import __version__, compiled

    typer.echo(f"servesim {__version__} ({'compiled' if compiled() else 'pure-Python'} engine)")


def _empty_output(argv: list[str]) -> bool:
    """Whether ``--output``/``-o`` is given an empty path (the command line parser reads it as
    ".", so ``--output "$UNSET"`` would write into the current folder)."""
    return any(
        a == "--output=" or (a in ("--output", "-o") and i + 1 < len(argv) and argv[i + 1] == "")
        for i, a in enumerate(argv)
    )


def main() -> None:
    """Console-script entry point (``servesim``) and ``python -m servesim``."""
    if _empty_output(sys.argv[1:]):
        print(
            "error: --output: an empty path (an unset variable?); give a folder, or . for this one",
            file=sys.stderr,
        )
        sys.exit(EXIT_USER_ERROR)
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C while parsing or importing
        sys.exit(EXIT_INTERRUPTED)
