"""``servesim capacity``: the probes' progress, the console report and the output files.

Files (``--output DIR``, written all or nothing after the search): ``capacity.json`` (the
result, every probe with its verdict and key figures, and the scenario) and ``probes.csv``
(one row a probe).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from servesim.planner.capacity import Capacity
from servesim.planner.probe import Probe

ProbeCallback = Callable[[Probe, float | None, float | None], None]


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x, fmt)


def _verdict_word(p: Probe) -> str:
    if p.meets:
        return "meets"
    return "cut short" if p.cut_short else "saturated" if p.verdict.meets else "misses"


def probes_left(lo: float | None, hi: float | None, precision: float) -> int:
    """Bisection probes still needed to narrow [lo, hi] to ``precision`` (0 without a bracket)."""
    if lo is None or hi is None or hi / lo - 1 <= precision:
        return 0
    return max(0, math.ceil(math.log2(math.log(hi / lo) / math.log1p(precision))))


@contextmanager
def probe_progress(enabled: bool, precision: float) -> Iterator[ProbeCallback | None]:
    """A rich progress bar on stderr (a terminal only): probes done against an estimate of
    the total (the bisection steps the bracket still needs), the last rate and the bracket."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("capacity probes"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("", total=None)
    done = 0

    def report(p: Probe, lo: float | None, hi: float | None) -> None:
        nonlocal done
        done += 1
        left = probes_left(lo, hi, precision) if hi is not None else 1
        bar.update(
            task,
            completed=done,
            total=done + left,
            description=f"{p.rate_rps:.4g} req/s {_verdict_word(p)}; bracket [{_num(lo)}, {_num(hi)}] req/s",
        )

    bar.start()
    try:
        yield report
    finally:
        bar.stop()


def probes_table(probes: list[Probe], knob: str, unit: str = "req/s") -> Table:
    table = Table(
        title=f"Probes (rate set through {knob}; the same seed for each)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in (
        "#",
        unit,
        "verdict",
        "margin",
        "attained",
        "TTFT\np99 s",
        "TPOT\np99 s",
        "tokens/s",
        "good\nreq/s",
    ):
        table.add_column(col, justify="left" if col == "verdict" else "right", no_wrap=True)
    for i, p in enumerate(probes, 1):
        m = p.metrics
        table.add_row(
            str(i),
            f"{p.rate_rps:.4g}",
            _verdict_word(p),
            f"{p.verdict.margin:+.2f}",
            _num(m["attainment"], ".3f"),
            _num(m["ttft_p99_s"], ".3f"),
            _num(m["tpot_p99_s"], ".4f"),
            _num(m["total_tokens_per_s"], ".0f"),
            _num(m["goodput_rps"], ".3g"),
        )
    return table


def print_capacity(cap: Capacity, console: Console) -> None:
    """The probes, then the answer with its bracket and what it earns."""
    unit = cap.knob.unit
    console.print(probes_table(cap.probes, cap.knob.field, unit))
    f = cap.figures()
    if cap.hi is None:
        head = (
            f"capacity: at least {f['capacity_rps']:.4g} {unit} (meets the targets at --max-rate; "
            "the true capacity may be higher)"
        )
    else:
        head = (
            f"capacity: {f['capacity_rps']:.4g} {unit} ({cap.knob.field} = {f['knob_value']:.4g}); "
            f"bracket [{f['bracket_rps'][0]:.4g}, {f['bracket_rps'][1]:.4g}] {unit}, "
            f"width {f['relative_width'] * 100:.1f}% (precision {cap.precision * 100:g}%)"
        )
    console.print(head, soft_wrap=True)
    if unit != "req/s":
        each = cap.knob.requests_per_start
        console.print(
            f"  each {unit[:-3]} sends {_num(each, '.3g')} requests on average: "
            f"{_num(None if each is None else each * f['capacity_rps'], '.4g')} req/s offered at the "
            f"capacity ({_num(f['requests_per_s'], '.4g')} req/s over the run, its tail included)",
            soft_wrap=True,
        )
    console.print(f"  targets: {cap.lo.verdict.describe()}", soft_wrap=True)
    console.print(
        f"  throughput {_num(f['capacity_total_tokens_per_s'], ',.0f')} tokens/s "
        f"({_num(f['capacity_output_tokens_per_s'], ',.0f')} output); goodput "
        f"{_num(f['goodput_rps'])} req/s, {_num(f['goodput_rps_per_gpu'])} per GPU "
        f"({f['num_gpus']} GPU{'' if f['num_gpus'] == 1 else 's'}), "
        f"{_num(f['good_requests_per_usd'], ',.0f')} good requests per $ "
        f"at ${_num(f['usd_per_hour'], '.2f')}/hour",
        soft_wrap=True,
    )
    for line in uncertainty_lines(cap):
        console.print(f"  {line}", soft_wrap=True)


def uncertainty_lines(cap: Capacity) -> list[str]:
    """What the answer's spread over seeds says (nothing when it was not measured)."""
    sp, unit = cap.spread, cap.knob.unit
    if sp is None:
        return []
    if not sp.varies:
        return [
            "uncertainty: the workload is the same at every seed (a trace), so is the answer; "
            "its spread as a sample of the traffic behind the trace is not measured"
        ]
    if sp.interval is None:
        return ["uncertainty: not measured (--seeds 1)"]
    lo, hi = sp.interval
    rel = sp.relative_half_width
    pm = "-" if rel is None else f"+-{rel * 100:.0f}%"
    lines = [
        f"uncertainty: {len(sp.answers)} seeds give {min(sp.answers):.4g} to {max(sp.answers):.4g} {unit} "
        f"at {sp.num_requests:,} requests; the answer at another seed lies in [{lo:.4g}, {hi:.4g}] "
        f"{unit} ({pm}, 95% prediction interval)"
    ]
    if cap.stable_width is None:
        if rel is not None and rel > 0.1:
            lines.append(
                "  not stable at this request count: --stable 0.1 grows the run until it is within +-10%"
            )
        return lines
    steps = ", ".join(f"{r.num_requests:,}: +-{(r.relative_half_width or 0) * 100:.0f}%" for r in cap.rounds)
    if sp.is_within(cap.stable_width):
        lines.append(f"  stable to +-{cap.stable_width * 100:g}% at {sp.num_requests:,} requests ({steps})")
    else:
        lines.append(
            f"  NOT stable to +-{cap.stable_width * 100:g}%: still {pm} at {sp.num_requests:,} requests, "
            f"the most --max-requests allows ({steps})"
        )
    return lines


def probe_columns(probes: list[Probe]) -> dict[str, np.ndarray]:
    """One row a probe: rate, verdict, margin and the key figures (``probes.csv``)."""
    keys = list(probes[0].metrics) if probes else []
    cols: dict[str, list[Any]] = {
        "rate_rps": [],
        "knob_value": [],
        "meets": [],
        "margin": [],
        "cut_short": [],
        "num_requests": [],
        **{k: [] for k in keys},
    }
    for p in probes:
        for k, v in (
            ("rate_rps", p.rate_rps),
            ("knob_value", p.knob_value),
            ("meets", p.meets),
            ("margin", p.verdict.margin),
            ("cut_short", p.cut_short or ""),
            ("num_requests", p.num_requests),
        ):
            cols[k].append(v)
        for k in keys:
            v = p.metrics[k]
            cols[k].append(math.nan if v is None else v)
    return {k: np.asarray(v, dtype=object if k == "cut_short" else None) for k, v in cols.items()}


def write_capacity(cap: Capacity, out_dir: Path) -> list[Path]:
    """capacity.json and probes.csv in ``out_dir`` (created if needed), all or nothing."""
    from servesim.metrics.output import write_csv, write_files, write_json

    out_dir.mkdir(parents=True, exist_ok=True)
    return write_files(
        out_dir,
        [
            ("capacity.json", lambda p: write_json(p, cap.to_dict())),
            ("probes.csv", lambda p: write_csv(p, probe_columns(cap.probes))),
        ],
    )


def run_capacity(
    scenario_path: Path | None,
    overrides: list[str],
    output: Path | None,
    *,
    precision: float = 0.05,
    max_rate: float | None = None,
    min_rate: float | None = None,
    early_stop: bool = True,
    seeds: int = 5,
    stable: float | None = None,
    max_requests: int | None = None,
    json_out: bool = False,
    quiet: bool = False,
    progress: bool = False,
    console: Console | None = None,
) -> Capacity:
    """``servesim capacity``: resolve the scenario, search, report, write the files.

    When even the lowest rate misses, the probes are printed and ``CapacityNotFound``
    propagates (the command prints its one line and exits 1).
    """
    from servesim.config import load_scenario
    from servesim.errors import CatalogError, ConfigError, DoesNotFitError, WorkloadError
    from servesim.planner.capacity import CapacityNotFound, find_capacity, seed_spread, stabilize

    _check_flags(seeds, stable, max_requests)
    scenario = load_scenario(scenario_path, overrides)
    console = console or Console(highlight=False)
    try:
        with probe_progress(progress, precision) as report:
            if stable is not None:
                cap = stabilize(
                    scenario,
                    width=stable,
                    seeds=seeds,
                    max_requests=max_requests,
                    precision=precision,
                    max_rate=max_rate,
                    min_rate=min_rate,
                    early_stop=early_stop,
                    on_probe=report,
                )
            else:
                cap = find_capacity(
                    scenario,
                    precision=precision,
                    max_rate=max_rate,
                    min_rate=min_rate,
                    early_stop=early_stop,
                    on_probe=report,
                )
                cap.spread = seed_spread(
                    cap, seeds, max_rate=max_rate, min_rate=min_rate, early_stop=early_stop
                )
    except (ConfigError, WorkloadError, CatalogError, DoesNotFitError) as err:
        # the scenario cannot be searched or run: name its file
        where = str(scenario_path) if scenario_path is not None else "<default scenario>"
        if where in str(err):
            raise
        raise type(err)(f"{where}: {err}") from None
    except CapacityNotFound as err:
        if not (quiet or json_out):
            console.print(probes_table(err.probes, "the workload's rate", err.unit))
        raise
    _report(cap, output, json_out, quiet, console)
    return cap


def _check_flags(seeds: int, stable: float | None, max_requests: int | None) -> None:
    """``servesim capacity``'s flags that only make sense together or in a range."""
    from servesim.errors import ConfigError
    from servesim.planner.spread import MAX_SEEDS

    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds: expected 1 to {MAX_SEEDS} seeds, found {seeds}")
    if max_requests is not None and stable is None:
        raise ConfigError("--max-requests caps --stable's growth of the run; give --stable too")
    if max_requests is not None and max_requests < 1:
        raise ConfigError(f"--max-requests: expected at least 1 request, found {max_requests}")


def _report(cap: Capacity, output: Path | None, json_out: bool, quiet: bool, console: Console) -> None:
    """Write the files (first: a closed stdout, ``| head``, must not lose them), then print
    the JSON or the table."""
    import json

    from servesim.errors import ServesimError

    paths: list[Path] = []
    if output is not None:
        try:
            paths = write_capacity(cap, output)
        except OSError as err:
            raise ServesimError(f"{output}: cannot write outputs: {err.strerror or err}") from None
    if json_out:
        print(json.dumps(cap.to_dict(), indent=2, allow_nan=False))
    elif not quiet:
        print_capacity(cap, console)
        if paths:
            console.print(f"wrote {', '.join(str(p) for p in paths)}", soft_wrap=True)
