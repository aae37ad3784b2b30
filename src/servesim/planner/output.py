"""What a plan shows and writes: the ranked table, Pareto fronts, files, the winner.

Files (all or nothing, ``metrics.output.write_files``)::

    candidates.parquet / candidates.json   every candidate: shape, status (pruned: why /
                                           simulated / failed), metrics, verdict, rank
    pareto.json                            cost vs latency and cost vs energy fronts
    pareto.png                             both fronts (with matplotlib, the ``plot`` extra)
    best.yaml                              the winner as a scenario (`servesim simulate best.yaml`)
    best_vllm.sh                           its `vllm serve` line(s), one per pool

A Pareto front keeps the candidates no other beats on both axes (lower $/hour and lower
p90 end-to-end latency, or lower $/hour and fewer joules per output token), among those
meeting the SLOs (all simulated ones when none does).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError, naming_file
from servesim.planner.search import Evaluated, PlanResult

#: vLLM's KV connector for disaggregated prefill/decode (NIXL; each side is kv_both and the
#: proxy in front decides who prefills, as in vLLM's disaggregated-serving examples).
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def pareto(points: list[tuple[float, float, int]]) -> list[int]:
    """Ids of the points no other point beats on both coordinates (both minimised)."""
    front, best_y = [], float("inf")
    for _x, y, cid in sorted(points):
        if y < best_y:
            front.append(cid)
            best_y = y
    return front


def fronts(result: PlanResult) -> dict[str, Any]:
    pool = [e for e in result.evaluated if e.meets] or [e for e in result.evaluated if e.summary]

    def front(metric: str) -> list[dict[str, Any]]:
        pts = [
            (e.metrics["usd_per_hour"], e.metrics[metric], e.candidate.id)
            for e in pool
            if e.metrics.get(metric) is not None
        ]
        ids = pareto(pts)
        by_id = {e.candidate.id: e for e in pool}
        return [
            {
                "id": i,
                "label": by_id[i].candidate.label(),
                "usd_per_hour": by_id[i].metrics["usd_per_hour"],
                metric: by_id[i].metrics[metric],
            }
            for i in ids
        ]

    return {
        "among": "meeting_slo" if any(e.meets for e in pool) else "simulated",
        "cost_vs_latency": front("e2e_p90_s"),
        "cost_vs_energy": front("j_per_output_token"),
    }


def candidate_rows(result: PlanResult) -> list[dict[str, Any]]:
    """One row per candidate (pruned ones too), in id order."""
    rank = {e.candidate.id: i + 1 for i, e in enumerate(result.ranked())}
    done = {e.candidate.id: e for e in result.evaluated}
    metric_names = sorted({k for e in result.evaluated for k in e.metrics})
    rows = []
    for c in result.candidates:
        row = c.describe()
        e = done.get(c.id)
        if c.id in result.pruning.pruned:
            reason, message = result.pruning.pruned[c.id]
            row.update(status=f"pruned:{reason}", message=message)
        elif e is not None and e.error is not None:
            row.update(status="failed", message=e.error)
        else:
            row.update(status="simulated", message="")
        row.update({m: (e.metrics.get(m) if e else None) for m in metric_names})
        row.update(
            meets_slo=bool(e and e.meets),
            margin=None if e is None or e.summary is None else e.margin,
            rank=rank.get(c.id),
            cached=bool(e and e.cached),
            verdict=e.verdict if e else "",
        )
        rows.append(row)
    return rows


def vllm_serve_lines(e: Evaluated) -> list[str]:
    """The `vllm serve` command of each pool of the candidate (vLLM's flag names)."""
    from servesim.deployment import resolve_deployments

    lines = []
    for dep in resolve_deployments(e.candidate.scenario):
        eng, par = dep.engine, dep.parallel
        args = ["vllm", "serve", dep.model.name, "--tensor-parallel-size", str(par.tensor_parallel_size)]
        if par.pipeline_parallel_size > 1:
            args += ["--pipeline-parallel-size", str(par.pipeline_parallel_size)]
        dp = par.data_parallel_size
        if dp > 1:
            args += ["--data-parallel-size", str(dp)]
        if par.expert_parallel_size > 1:
            args.append("--enable-expert-parallel")
        args += [
            "--max-num-seqs",
            str(eng.max_num_seqs),
            "--max-num-batched-tokens",
            str(eng.max_num_batched_tokens),
            "--enable-chunked-prefill" if eng.enable_chunked_prefill else "--no-enable-chunked-prefill",
            "--enable-prefix-caching" if eng.enable_prefix_caching else "--no-enable-prefix-caching",
            "--gpu-memory-utilization",
            f"{eng.gpu_memory_utilization:g}",
        ]
        off = eng.kv_offload
        if off.enabled and off.eviction_policy == "arc":  # ARC: only through the connector's config
            extra = {"cpu_bytes_to_use": int(off.cpu_size_gib * (1 << 30)), "eviction_policy": "arc"}
            connector = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
            args += ["--kv-transfer-config", json.dumps({**connector, "kv_connector_extra_config": extra})]
        elif off.enabled:
            args += ["--kv-offloading-backend", off.backend, "--kv-offloading-size", f"{off.cpu_size_gib:g}"]
        if eng.lora.enabled:
            args += ["--enable-lora", "--max-loras", str(eng.lora.max_loras)]
            args += ["--max-lora-rank", str(eng.lora.max_lora_rank)]
            args += ["--max-cpu-loras", str(eng.lora.cpu_slots)]
        if e.candidate.scenario.engine.max_model_len:
            args += ["--max-model-len", str(eng.max_model_len)]
        if dep.role in ("prefill", "decode"):
            args += ["--kv-transfer-config", KV_TRANSFER_CONFIG]
        where = f"{dep.role} pool" if dep.role != "colocated" else "each replica"
        lines.append(f"# {where}: {dep.num_replicas // dp} x {dep.num_gpus * dp} {dep.gpu.name}")
        lines.append(shlex.join(args))
    return lines


def best_scenario_yaml(e: Evaluated) -> str:
    """The winner as a scenario file `servesim simulate` loads."""
    import yaml

    sc = e.candidate.scenario
    data = sc.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("workload", {})["type"] = sc.workload.type
    head = f"# servesim plan's best candidate {e.candidate.id}: {e.candidate.label()}\n"
    return head + yaml.safe_dump(data, sort_keys=False)


def _plot(path: Path, result: PlanResult, fr: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim = [e for e in result.evaluated if e.summary]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, metric, ylabel in (
        (axes[0], "cost_vs_latency", "e2e_p90_s", "p90 end-to-end latency (s)"),
        (axes[1], "cost_vs_energy", "j_per_output_token", "J per output token"),
    ):
        for ok, colour in ((False, "lightgray"), (True, "tab:blue")):
            pts = [
                (e.metrics["usd_per_hour"], e.metrics[metric])
                for e in sim
                if e.meets == ok and e.metrics.get(metric) is not None
            ]
            if pts:
                ax.scatter(*zip(*pts), s=14, c=colour, label="meets SLOs" if ok else "misses SLOs")
        line = fr[key]
        if line:
            ax.plot(
                [p["usd_per_hour"] for p in line],
                [p[metric] for p in line],
                "o-",
                c="tab:red",
                label="Pareto front",
            )
        ax.set_xlabel("$ per hour")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def write_plan(result: PlanResult, out_dir: str | Path) -> list[Path]:
    """Write the plan's files into ``out_dir`` (created if needed); returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from servesim.metrics.output import write_files

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = candidate_rows(result)
    fr = fronts(result)
    doc = {
        "counts": result.counts(),
        "objective": result.plan.objective,
        "wall_s": result.wall_s,
        "backend": result.backend,
        "candidates": rows,
    }
    jobs = [
        ("candidates.parquet", lambda p: pq.write_table(pa.Table.from_pylist(rows), p)),
        ("candidates.json", lambda p: p.write_text(json.dumps(doc, indent=1, default=str) + "\n")),
        ("pareto.json", lambda p: p.write_text(json.dumps(fr, indent=1) + "\n")),
    ]
    ranked = result.ranked()
    if ranked:
        jobs += [
            ("best.yaml", lambda p: p.write_text(best_scenario_yaml(ranked[0]))),
            ("best_vllm.sh", lambda p: p.write_text("\n".join(vllm_serve_lines(ranked[0])) + "\n")),
        ]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        jobs.append(("pareto.png", lambda p: _plot(p, result, fr)))
    return write_files(out, jobs)


#: Columns of the ranked table when the output is a file or a pipe (rich would take 80 and
#: fold every row of the 12-column table); a terminal and COLUMNS keep their own width.
PIPED_WIDTH = 160


def report_width() -> int | None:
    """The console width for the plan's report: the terminal's (None: rich finds it), or
    ``PIPED_WIDTH`` when standard output is not a terminal and COLUMNS is not set."""
    return None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH


def console_report(result: PlanResult, top: int = 10) -> Any:
    """The ranked table (or, when nothing meets the SLOs, the closest candidates) as rich
    renderables; the best candidate's `vllm serve` lines are printed after it, unfolded."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    counts = result.counts()
    pruned = ", ".join(f"{k} {v}" for k, v in counts["pruned_by"].items() if v)
    head = Text(
        f"{counts['candidates']} candidates: {counts['pruned']} pruned ({pruned or 'none'}), "
        f"{counts['simulated']} simulated, {counts['cached']} from the cache, "
        f"{counts['meeting_slo']} meet the SLO targets "
        f"({result.wall_s:.1f} s, {result.backend} backend)"
    )
    ranked = result.ranked()
    rows = ranked[:top] if ranked else result.closest(top)
    if not rows:
        return Group(head, Text(nothing_simulated(result), style="yellow"))
    title = f"best by {result.plan.objective}" if ranked else "nothing meets the SLOs: the closest candidates"
    table = Table(title=title, title_justify="left")
    slo = result.base.slo
    ttft_p, tpot_p = judged_percentile(slo, "ttft_s"), judged_percentile(slo, "tpot_s")
    for name in (
        "#",
        "id",
        "deployment",
        "mode",
        "GPUs",
        "$/h",
        "attain",
        f"TTFT {ttft_p}",
        f"TPOT {tpot_p}",
        "tok/s/GPU",
        "tok/s/user",
        "J/tok",
    ):
        table.add_column(name, justify="left" if name in ("deployment", "mode") else "right")
    for i, e in enumerate(rows, 1):
        m = e.metrics
        table.add_row(
            str(i),
            str(e.candidate.id),
            e.candidate.label(),
            e.candidate.mode,
            str(m["num_gpus"]),
            f"{m['usd_per_hour']:.2f}",
            _f(m["attainment"], "{:.1%}"),
            _f(_latency(e, "ttft_s", ttft_p), "{:.3f}"),
            _f(_latency(e, "tpot_s", tpot_p), "{:.4f}"),
            _f(m["tokens_per_s_per_gpu"], "{:.0f}"),
            _f(m["tokens_per_s_per_user"], "{:.1f}"),
            _f(m["j_per_output_token"], "{:.2f}"),
        )
    return Group(head, table)


#: The percentiles a summary stores (metrics.summary), lowest first.
_STORED = ((50, "p50"), (90, "p90"), (95, "p95"), (99, "p99"), (100, "max"))


def judged_percentile(slo: Any, metric: str) -> str:
    """The stored percentile ("p90", "p99", ...) at which the SLO judges ``metric``: the
    strictest of its percentile limits and of its and ``all``'s attainment targets (0.99 of
    requests within the limit is the p99), p90 when none applies; rounded up to one the
    summary stores."""
    from servesim.planner.targets import attainment_targets

    ps = [pl.p for pl in getattr(slo, "percentiles", None) or [] if pl.metric == metric]
    targets = attainment_targets(slo) if slo is not None else {}
    ps += [100 * float(v) for k, v in targets.items() if k in (metric, "all")]
    p = max(ps) if ps else 90.0
    return next(name for q, name in _STORED if q >= p - 1e-9)


def _latency(e: Any, metric: str, p: str) -> float | None:
    d = ((e.summary or {}).get("latency") or {}).get(metric) or {}
    return d.get(p) if isinstance(d, dict) else None


def nothing_simulated(result: PlanResult) -> str:
    """Why the table is empty: every candidate was pruned before simulation (by which
    bound, with one candidate's reason each) or failed, so no SLO was ever checked."""
    counts = result.counts()
    if not counts["candidates"]:
        return "no candidate to simulate: the plan's ranges give no deployment"
    parts = []
    shown: set[str] = set()
    for reason, message in result.pruning.pruned.values():
        if reason not in shown:
            shown.add(reason)
            parts.append(f"{reason} ({counts['pruned_by'][reason]}): {message}")
    failed = [e.error for e in result.evaluated if e.error]
    if failed:
        parts.append(f"failed ({len(failed)}): {failed[0]}")
    return "nothing was simulated: every candidate was pruned before simulation or failed; " + "; ".join(
        parts
    )


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


# --------------------------------------------------------------------------- the command


def progress_display(enabled: bool) -> Any:
    """A factory for ``run_plan``'s progress: a rich bar on stderr with ETA and the
    pruned/simulated counts (only on a terminal, and not with ``--no-progress``)."""
    import sys

    if not enabled or not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )

    def start(pruning: Any, total: int) -> Any:
        pruned = sum(pruning.counts().values())
        task = bar.add_task(f"simulating ({pruned} pruned)", total=total)
        bar.start()

        def tick(done: int, total: int, cached: int) -> None:
            bar.update(task, completed=done, description=f"simulating ({pruned} pruned, {cached} cached)")

        return tick

    return start, bar


def plan_command(
    plan_file: str | None,
    overrides: list[str],
    options: dict[str, Any],
    *,
    backend: str,
    workers: int | None,
    address: str | None,
    output: str | None,
    cache: str | None,
    top: int,
    progress: bool,
    json_out: bool,
) -> int:
    """`servesim plan`: read the plan (file or short form), search, show, write. Returns the
    exit code: 0 when a candidate meets the SLOs, 1 when none does."""
    from rich.console import Console

    from servesim.planner.backends import backend_named
    from servesim.planner.search import run_plan
    from servesim.planner.space import load_plan, plan_config, plan_from_options

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers: expected at least 1 process, found {workers}")
    if plan_file is not None:
        base, plan = load_plan(plan_file, overrides)
    elif options.get("model") is None:
        raise ConfigError("plan: give a plan file, or --model with --gpus, --isl/--osl or --trace")
    else:
        base, plan = plan_from_options(**options)
        if overrides:
            plan = plan_config(
                plan.model_dump(exclude_defaults=True),
                "plan options",
                [o if o.startswith("plan.") else f"plan.{o}" for o in overrides],
            )
    start, bar = progress_display(progress and not json_out)
    try:
        with naming_file(None if plan_file is None else str(plan_file)):
            result = run_plan(
                base,
                plan,
                backend=backend_named(backend),
                workers=workers,
                address=address,
                cache_dir=cache or output,
                progress=start,
            )
    finally:
        if bar is not None:
            bar.stop()
    paths = write_plan(result, output) if output else []
    if json_out:
        ranked = result.ranked()
        doc = {
            "counts": result.counts(),
            "best": candidate_rows(result)[ranked[0].candidate.id] if ranked else None,
            "pareto": fronts(result),
        }
        print(json.dumps(doc, indent=1, default=str))
    else:
        console = Console(highlight=False, width=report_width())
        console.print(console_report(result, top))
        if result.ranked():  # never folded: a `vllm serve` line is copied whole into a shell
            console.print("\n".join(vllm_serve_lines(result.ranked()[0])), soft_wrap=True, markup=False)
        if paths:
            console.print(f"wrote {', '.join(p.name for p in paths)} to {output}")
    if not result.ranked():
        why = (
            "no candidate meets the SLO targets; the closest are shown above"
            if result.closest(1)
            else nothing_simulated(result)
        )
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {why}", markup=False)
        return 1
    return 0
