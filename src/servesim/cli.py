"""The ``servesim`` command line. Commands only parse options and call one typed function.

User mistakes (any ``ServesimError``) print ``error: <message>`` on stderr and exit 2
without a traceback; Ctrl-C exits 130 quietly; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from servesim.errors import ServesimError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="servesim",
    help="Simulate LLM inference serving (vLLM-style engines), iteration by iteration.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # plain tracebacks for bugs: readable in CI logs
    rich_markup_mode=None,
)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn user mistakes and Ctrl-C into short messages and exit codes."""
    try:
        yield
    except ServesimError as err:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {err}", markup=False)
        raise typer.Exit(EXIT_USER_ERROR) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


class RecordsFormat(StrEnum):
    parquet = "parquet"
    csv = "csv"


class CatalogKind(StrEnum):
    models = "models"
    gpus = "gpus"
    all = "all"


@app.command()
def simulate(
    scenario: Annotated[Path | None, typer.Argument(
        help="Scenario file (YAML or TOML). Omit to run the built-in default scenario.",
        show_default=False)] = None,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Override one scenario field, e.g. --set engine.max_num_seqs=64 "
             "(repeatable; values parse as YAML scalars).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", file_okay=False,
        help="Directory to write summary.json, requests.* and steps.* into (created if needed).")] = None,
    records_format: Annotated[RecordsFormat, typer.Option(
        "--records-format", help="File format of the per-request and per-step records.")
    ] = RecordsFormat.parquet,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the summary as JSON on stdout instead of the report.")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print nothing but errors (and the JSON with --json).")] = False,
    no_progress: Annotated[bool, typer.Option(
        "--no-progress", help="Do not show a progress bar while simulating.")] = False,
) -> None:
    """Run one simulation and report latency, throughput, SLOs, utilization, energy and cost.

    Without a scenario file this runs the default scenario: Llama-3.1-8B on one H100
    (SXM) with vLLM V1 default engine settings, serving the bundled one-hour Azure 2023
    conversation trace, with SLOs TTFT <= 2 s and TPOT <= 100 ms. Change any part of it
    with --set, e.g. --set hardware.gpu=A100-80GB --set workload.rate_scale=2.
    """
    with _user_errors():
        run_simulate(scenario, overrides or [], output, records_format.value, json_out=json_out,
                     quiet=quiet, progress=not (no_progress or quiet or json_out))


def run_simulate(scenario_path: Path | None, overrides: list[str], output: Path | None,
                 records_format: str, *, json_out: bool = False, quiet: bool = False,
                 progress: bool = False, console: Console | None = None) -> Any:
    """Resolve the scenario, simulate, report, write outputs; returns the ``Result``."""
    from servesim import sim
    from servesim.config import load_scenario
    from servesim.metrics.console import print_summary
    from servesim.metrics.output import write_outputs
    from servesim.metrics.summary import summarize

    scenario = load_scenario(scenario_path, overrides)
    result = sim.simulate(scenario, progress=progress)
    if not result.summary:
        result.summary = summarize(result)
    paths: list[Path] = []
    if output is not None:  # files first: a closed stdout (| head) must not lose them
        try:
            paths = write_outputs(result, output, records_format)  # type: ignore[arg-type]
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


@app.command()
def catalog(
    kind: Annotated[CatalogKind, typer.Argument(help="Which presets to list.")] = CatalogKind.all,
) -> None:
    """List the built-in model and GPU presets (names usable in a scenario)."""
    with _user_errors():
        console = Console(highlight=False)
        if kind in (CatalogKind.models, CatalogKind.all):
            console.print(_models_table())
        if kind in (CatalogKind.gpus, CatalogKind.all):
            console.print(_gpus_table())


def _call(x: Any) -> Any:
    return x() if callable(x) else x


_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _models_table() -> Table:
    from servesim.catalog.models import list_models, load_model

    title = "Models (org/ prefix optional; heads: query/KV; KV/tok: KV bytes per token)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    for col in ("params", "layers", "heads", "dtype", "max len", "KV/tok"):
        table.add_column(col, justify="right")
    for name in list_models():
        m = load_model(name)
        params = f"{_call(m.num_params) / 1e9:.1f}B"
        if m.is_moe:
            params += f" ({_call(m.num_active_params) / 1e9:.1f}B)"
        table.add_row(name.split("/")[-1], params, str(m.num_layers),
                      f"{m.num_attention_heads}/{m.num_kv_heads}", _DTYPE_SHORT.get(m.dtype, m.dtype),
                      f"{m.max_position_embeddings:,}", f"{m.kv_bytes_per_token() / 1024:,.0f}K")
    return table


def _gpus_table() -> Table:
    from servesim.catalog.gpus import get_gpu, list_gpus

    table = Table(title="GPUs (dense peak TFLOP/s)", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    table.add_column("name", no_wrap=True)
    for col in ("BF16", "FP8", "memory", "HBM TB/s", "power W", "$/hour"):
        table.add_column(col, justify="right")
    for name in list_gpus():
        g = get_gpu(name)
        fp8 = getattr(g, "peak_flops", {}).get("fp8")
        table.add_row(name, f"{g.flops_for('bfloat16') / 1e12:,.0f}",
                      "-" if fp8 is None else f"{fp8 / 1e12:,.0f}",
                      f"{g.mem_bytes / 2**30:.0f} GiB", f"{g.mem_bw / 1e12:.2f}",
                      f"{g.idle_power_w:.0f}-{g.max_power_w:.0f}", f"{g.usd_per_hour:.2f}")
    return table


@app.command()
def version() -> None:
    """Print the servesim version."""
    from servesim import __version__

    typer.echo(f"servesim {__version__}")


def main() -> None:
    """Console-script entry point (``servesim``) and ``python -m servesim``."""
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C while parsing or importing
        sys.exit(EXIT_INTERRUPTED)
