"""The ``servesim`` app and how its commands end: user mistakes (any ``ServesimError``)
print ``error: <message>`` on stderr and exit 2 without a traceback; Ctrl-C exits 130
quietly; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

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
def user_errors() -> Iterator[None]:
    """Turn user mistakes and Ctrl-C into short messages and exit codes."""
    try:
        yield
    except ServesimError as err:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"error: {err}", markup=False, emoji=False
        )
        raise typer.Exit(EXIT_USER_ERROR) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None


def check_output(output: Path | None) -> None:
    """Refuse an ``--output`` folder that cannot be created or written before the work starts
    (a run of minutes would otherwise end in "cannot write"): its nearest existing folder
    must be a writable directory, and it must not be a file."""
    if output is None:
        return
    if output.exists() and not output.is_dir():
        raise ServesimError(f"{output}: is a file, expected a folder for the outputs")
    here = output
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        raise ServesimError(f"{output}: cannot create it: {here} is a file, not a folder")
    if not os.access(here, os.W_OK | os.X_OK):
        raise ServesimError(f"{output}: cannot create or write it: {here} is not writable")
