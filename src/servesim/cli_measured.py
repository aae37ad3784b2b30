"""The ``servesim`` commands over measurements (docs/fidelity.md): ``calibrate`` (fit a
hardware profile to them), ``validate`` (servesim's predictions against them) and
``profile`` (measure a model's operators on the local device). ``servesim.cli`` registers
them on its app; like every command they only parse options and call one typed function.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from servesim.cli_base import EXIT_INTERRUPTED, check_output
from servesim.cli_base import user_errors as _user_errors
from servesim.cli_options import (
    CalibrateFitParams,
    CalibrateGpu,
    CalibrateHardware,
    CalibrateKind,
    CalibrateKindOption,
    CalibrateModel,
    CalibrateName,
    CalibrateNetwork,
    CalibrateOutput,
    CalibrateSources,
    CalibrateTables,
    CalibrateTp,
    ValidateBench,
    ValidateCrossFit,
    ValidateCrossGroup,
    ValidateDataDir,
    ValidateOpenLoop,
    ValidateOutput,
    ValidateOverrides,
    ValidateRecordings,
    ValidateScenario,
    ValidateSuite,
    ValidateThreshold,
)
from servesim.errors import ServesimError

if TYPE_CHECKING:
    from servesim.calibration.fitting import FitResult


def calibrate(
    sources: CalibrateSources,
    output: CalibrateOutput,
    kind: CalibrateKindOption = CalibrateKind.auto,
    gpu: CalibrateGpu = None,
    hardware: CalibrateHardware = None,
    fit_params: CalibrateFitParams = None,
    tables: CalibrateTables = False,
    name: CalibrateName = None,
    network: CalibrateNetwork = True,
    model: CalibrateModel = None,
    tp: CalibrateTp = 1,
) -> None:
    """Fit the roofline's efficiencies to measurements; print the fit quality; write a profile.

    Name the profile in a scenario as hardware.profile. See docs/fidelity.md.
    """
    with _user_errors():
        from servesim.calibration.calibrate import calibrate_source
        from servesim.config import read_gpu_config

        hw = read_gpu_config(hardware) if hardware else None
        names = [x.strip() for x in fit_params.split(",") if x.strip()] if fit_params else None
        spec = None
        if model is not None:
            from servesim.catalog.hf_config import load_model

            spec = load_model(model)
        profile, results = calibrate_source(
            sources, kind.value, gpu, hw, names, tables, name, network, model=spec, tp=tp
        )
        try:  # the file first: a closed stdout (| head) must not lose it
            profile.save(output)
        except OSError as err:
            raise ServesimError(f"{output}: cannot write: {err.strerror or err}") from None
        console = Console(highlight=False)
        for r in results:
            _print_fit(console, r)
        console.print(f"wrote {output}", soft_wrap=True)


def _print_fit(console: Console, r: FitResult) -> None:
    """One fit's parameters and quality, its warnings, the parameters the measurements say
    little about and its five worst predictions."""
    from rich.markup import escape

    from servesim.calibration.fitting import WEAK_PCT

    q = r.quality()
    params = ", ".join(f"{k}={v:.4g}" for k, v in r.params.items())
    console.print(f"fit {int(q['n'])} measurements: {params}", soft_wrap=True)
    console.print(
        f"  R2 {q['r2']:.3f}  MAPE {q['mape_pct']:.1f}%  "
        f"median {q['median_ape_pct']:.1f}%  "
        f"P90 {q['p90_ape_pct']:.1f}%  max {q['max_ape_pct']:.1f}%"
    )
    for w in r.warnings():
        console.print(f"  [bold]warning[/bold]: {escape(w)}", soft_wrap=True)
    weak = r.weakly_constrained()
    if weak:
        console.print(
            f"  weakly constrained (halving one moves no prediction by more than "
            f"{WEAK_PCT:g}%): {', '.join(weak)}; these measurements say little about "
            "them, so predictions where they matter (other shapes, longer contexts) "
            "are extrapolations",
            soft_wrap=True,
        )
    for case, meas, pred, rel_err in r.worst(5):
        console.print(
            f"  worst: {case}: measured {meas * 1e3:.4g} ms, predicted {pred * 1e3:.4g} ms "
            f"({rel_err * 100:+.1f}%)",
            soft_wrap=True,
        )


def validate(
    data_dir: ValidateDataDir = None,
    recordings: ValidateRecordings = None,
    suite: ValidateSuite = None,
    output: ValidateOutput = None,
    threshold: ValidateThreshold = None,
    cross_fit: ValidateCrossFit = False,
    cross_group: ValidateCrossGroup = False,
    bench: ValidateBench = None,
    open_loop: ValidateOpenLoop = None,
    scenario: ValidateScenario = None,
    overrides: ValidateOverrides = None,
) -> None:
    """Predict every bundled measurement set and print predicted vs measured errors.

    Exits 1 when an error passes its goal and is not a known miss (or passes --threshold).
    With --bench, compares your own vllm bench or inference-perf runs instead (exits 1 when a
    mean's error passes --threshold).
    """
    with _user_errors():
        if threshold is not None and not (threshold > 0 and math.isfinite(threshold)):
            raise ServesimError(f"--threshold: expected a percentage > 0, found {threshold:g}")
        _check_validate_flags(open_loop, bench, suite, cross_fit, cross_group, data_dir, recordings)
        check_output(output)
        if open_loop or bench:
            code = _replay_runs(open_loop, bench, scenario, overrides or [], output, threshold)
            if code:
                raise typer.Exit(code)
            return
        if scenario is not None or overrides:
            raise ServesimError(
                "--scenario and --set go with --bench (a vllm bench or inference-perf result "
                "file to compare) "
                "or --open-loop (a folder of open-loop runs)"
            )
        _run_suites(data_dir, recordings, suite, cross_fit, cross_group, output, threshold)


def _replay_runs(
    open_loop: list[Path] | None,
    bench: list[Path] | None,
    scenario: Path | None,
    overrides: list[str],
    output: Path | None,
    threshold: float | None,
) -> int:
    """validate --open-loop or --bench: the user's own runs replayed on ``scenario`` and
    compared; the exit code."""
    if open_loop:
        from servesim.validate.openloop import run_checks as open_loop_checks

        return open_loop_checks(open_loop, scenario, overrides, output, threshold, typer.echo)
    from servesim.validate.own_bench import run_checks

    assert bench
    return run_checks(bench, scenario, overrides, output, threshold, typer.echo)


def _run_suites(
    data_dir: Path | None,
    recordings: Path | None,
    suite: list[str] | None,
    cross_fit: bool,
    cross_group: bool,
    output: Path | None,
    threshold: float | None,
) -> None:
    """validate's bundled suites (or those of ``data_dir``/``recordings``): the table of
    checks, the known misses and the verdict (typer.Exit(1) when a check is over its limit)."""
    from servesim import validate as v

    for flag, folder in (("--data-dir", data_dir), ("--recordings", recordings)):
        if folder is not None and not folder.is_dir():
            why = "is a file, expected a folder" if folder.exists() else "no such folder"
            raise ServesimError(f"{flag} {folder}: {why}")
    suites = tuple(suite) if suite else ("operators", "splitwise", "distserve", "vllm-cpu")
    checks, skipped = v.validate_all(
        data_dir, recordings, suites, cross_fit=cross_fit, output=output, cross_group=cross_group
    )
    typer.echo(_validation_table(checks, threshold))
    if threshold is None:
        for line in v.known_bad_reasons(checks):
            typer.echo(line)
    for note in skipped:
        typer.echo(f"skipped {note}")
    if output is not None and "silicon" in suites:
        typer.echo(f"wrote {output}/silicon_runs.csv, silicon_groups.json, silicon_groups.md")
    if not checks:
        raise ServesimError(
            "nothing validated: no measurement data or recordings found (check --data-dir and --recordings)"
        )
    failed = [c for c in checks if not c.passed(threshold)]
    if failed:
        typer.echo(f"{len(failed)} of {len(checks)} checks over their limit")
        raise typer.Exit(1)
    known = sum(c.status(threshold) == "known bad" for c in checks)
    typer.echo(
        f"{len(checks) - known} of {len(checks)} checks within their goals"
        + (f", {known} known to miss theirs (reasons above)" if known else "")
    )


def _check_validate_flags(
    open_loop: list[Path] | None,
    bench: list[Path] | None,
    suite: list[str] | None,
    cross_fit: bool,
    cross_group: bool,
    data_dir: Path | None,
    recordings: Path | None,
) -> None:
    """Refuse flags the chosen mode would ignore: the bundled suites' options beside
    --open-loop or --bench (which replay the user's runs instead), and --cross-group or
    --cross-fit without the suite they extend."""
    mode = "--open-loop" if open_loop else "--bench" if bench else None
    suite_flags = [
        name
        for name, given in (
            ("--suite", bool(suite)),
            ("--cross-fit", cross_fit),
            ("--cross-group", cross_group),
            ("--data-dir", data_dir is not None),
            ("--recordings", recordings is not None),
        )
        if given
    ]
    if open_loop and bench:
        raise ServesimError("--open-loop and --bench: give one (each replays its own runs)")
    if mode and suite_flags:
        raise ServesimError(
            f"{suite_flags[0]}: an option of the bundled suites; {mode} replays your runs instead "
            "(run servesim validate without it for the suites)"
        )
    suites = set(suite) if suite else {"operators", "splitwise", "distserve", "vllm-cpu"}
    for flag, given, needs in (
        ("--cross-group", cross_group, "silicon"),
        ("--cross-fit", cross_fit, "vllm-cpu"),
    ):
        if given and needs not in suites:
            raise ServesimError(
                f"{flag}: extends the {needs} suite, which this run leaves out; add --suite {needs}"
            )


def _validation_table(checks: list[Any], threshold: float | None) -> str:
    """Plain fixed-width text (wide; meant for logs and docs, not for an 80-column terminal)."""

    def num(x: float | None) -> str:
        return "" if x is None else f"{x:.4g}"

    head = (
        "suite",
        "case",
        "metric",
        "n",
        "measured",
        "predicted",
        "MAPE %",
        "max %",
        "bias %",
        "limit %",
        "ok",
    )
    rows = [head]
    for c in checks:
        limit = threshold if threshold is not None else c.limit_pct
        metric = c.metric + (f" [{c.note}]" if c.note else "")
        rows.append(
            (
                c.suite,
                c.case,
                metric,
                str(c.n),
                num(c.measured),
                num(c.predicted),
                f"{c.mape_pct:.1f}",
                f"{c.max_pct:.1f}",
                f"{c.bias_pct:+.1f}",
                "-" if limit is None else f"{limit:g}",
                c.status(threshold),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        "  ".join(v.ljust(w) if i < 3 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "error = predicted / measured - 1; MAPE = mean |error| over n points\n" + "\n".join(lines)


def profile(
    model: Annotated[str, typer.Argument(help="Model preset or path to a config.json.", show_default=False)],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", file_okay=False, help="Directory to write compute/<device-name>/<model>/ into."
        ),
    ],
    device: Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1, mps, ...")] = "cpu",
    device_name: Annotated[str, typer.Option(help="Directory name of this device in the profile.")] = "cpu",
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree whose shard to time.")] = 1,
    tokens: Annotated[
        str, typer.Option(help="Comma-separated token counts.")
    ] = "1,2,4,8,16,32,64,128,256,512",
    contexts: Annotated[
        str, typer.Option(help="Comma-separated context lengths (attention).")
    ] = "128,512,2048",
    repeats: Annotated[int, typer.Option(help="Timed runs per point (after 2 warm-up runs).")] = 5,
    no_progress: Annotated[
        bool,
        typer.Option("--no-progress", help="Do not show a progress bar (with the time left) while timing."),
    ] = False,
) -> None:
    """Time the model's operators on the local device (needs torch: servesim[profile]).

    Writes Vidur's operator-profile format, ready for `servesim calibrate`. Rows are kept
    as they are measured (in *.partial.csv until the profile is complete), so Ctrl-C keeps
    what was measured so far.
    """
    with _user_errors():
        from servesim.catalog.hf_config import load_model
        from servesim.profile_ops import ProfileInterrupted, profile_operators

        def ints(text: str, what: str) -> tuple[int, ...]:
            try:
                return tuple(int(x) for x in text.split(",") if x.strip())
            except ValueError:
                raise ServesimError(f"--{what}: expected comma-separated integers, got {text!r}") from None

        try:
            paths = profile_operators(
                load_model(model),
                output,
                device_name,
                device,
                tp,
                ints(tokens, "tokens"),
                ints(contexts, "contexts"),
                repeats=repeats,
                progress=not no_progress,
            )
        except ProfileInterrupted as stop:
            Console(stderr=True, highlight=False, soft_wrap=True).print(str(stop), markup=False, emoji=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        typer.echo("wrote " + ", ".join(str(p) for p in paths))
