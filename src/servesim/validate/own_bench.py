"""servesim against your own ``vllm bench serve`` run: one command, predicted vs measured.

``servesim validate --bench RESULT.json --scenario DEPLOYMENT.yaml`` reads the result file
``vllm bench serve --save-result`` wrote and the scenario that describes the deployment the
benchmark ran against (model, GPU, parallelism, engine settings, vLLM version: what the
result file does not record), replays the run's workload on it and prints, for every
figure the result file holds, the measured and the predicted value and their difference.

The workload is the run's own (``workload.format: vllm_bench``, docs/workloads.md): with
``--save-detailed`` its per-request prompt and output lengths, sent as ``vllm bench`` sends
them (its ``--request-rate``, ``--burstiness`` and ``--max-concurrency``, from the file);
failed requests are left out, as ``vllm bench`` leaves them out of its figures. Without
``--save-detailed`` the file has no per-request lengths: every request then takes the run's
mean prompt and output lengths (a ``benchmark`` workload of fixed lengths), and the report
says so. The scenario's own workload is replaced; the rest of it is used as written.

The predicted figures are computed as ``vllm bench``'s ``calculate_metrics`` computes them
(``metrics.benchmark.run_figures``): TTFT, TPOT per request, ITL pooled, E2EL; mean,
median, std and the percentiles the file holds (p90, p95, p99); throughput over the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.errors import ConfigError, ServesimError, WorkloadError
from servesim.validate.common import base_model_name, write_rows
from servesim.validate.ip_bench import compare_lifecycle, is_lifecycle_file

#: The figures compared, in ``vllm bench``'s key names (milliseconds; throughputs per s).
STATS = ("mean", "median", "p90", "p95", "p99")
METRICS = ("ttft", "tpot", "itl", "e2el")
RATES = ("request_throughput", "output_throughput", "total_token_throughput")
#: The run's settings a result file records, replayed as they are.
TRAFFIC = ("request_rate", "burstiness", "max_concurrency")


@dataclass
class BenchComparison:
    """One result file against its prediction: ``rows`` of (figure, measured, predicted,
    error % = predicted / measured - 1), ``notes`` on how the run was replayed."""

    path: Path
    rows: list[tuple[str, float, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def worst_mean_error(self) -> float:
        """The largest |error| of the means (TTFT, TPOT, ITL, E2EL), in percent."""
        errs = [abs(e) for name, _, _, e in self.rows if name.startswith("mean_")]
        return max(errs) if errs else 0.0


def read_result(path: Path) -> dict[str, Any]:
    """The JSON object of a ``vllm bench serve --save-result`` file, or a clear error."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file (a `vllm bench serve --save-result` JSON file or an "
            "inference-perf lifecycle metrics file)"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise WorkloadError(
            f"{path}: line {err.lineno}: not JSON ({err.msg}); expected the file "
            "`vllm bench serve --save-result` writes"
        ) from None
    if not isinstance(doc, dict):
        raise WorkloadError(
            f"{path}: expected one JSON object (a vllm bench result), found {type(doc).__name__}"
        )
    if is_lifecycle_file(doc):  # inference-perf's stage or summary file (validate.ip_bench)
        return doc
    if isinstance(doc.get("benchmarks"), list):  # guidellm's report (benchmarks.json)
        raise WorkloadError(
            f"{path}: a guidellm report (benchmarks); --bench compares `vllm bench serve "
            "--save-result` files and inference-perf lifecycle metrics, not guidellm's results "
            "(its scenario file replays as workload: {type: guidellm, config: FILE})"
        )
    if "profile" in doc and "data" in doc:  # guidellm's scenario file
        raise WorkloadError(
            f"{path}: a guidellm scenario (profile, data), not a result; replay it as "
            "workload: {type: guidellm, config: FILE}; --bench takes `vllm bench serve "
            "--save-result` files and inference-perf lifecycle metrics"
        )
    measured = [f"{s}_{m}_ms" for m in METRICS for s in STATS] + list(RATES)
    if not any(_number(doc.get(k)) is not None for k in measured):
        raise WorkloadError(
            f"{path}: no measured figure (mean_ttft_ms, mean_tpot_ms, ...): "
            "expected the file `vllm bench serve --save-result` writes"
        )
    return doc


def replay_workload(path: Path, doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The ``workload`` section that replays the run of ``doc``, and notes on it."""
    if isinstance(doc.get("input_lens"), list) and isinstance(doc.get("output_lens"), list):
        return (
            {"type": "trace", "path": str(path.resolve()), "format": "vllm_bench", "failed": "drop"},
            [f"workload: the run's {len(doc['input_lens'])} requests with their own lengths"],
        )
    done = _number(doc.get("completed"))
    tin, tout = _number(doc.get("total_input_tokens")), _number(doc.get("total_output_tokens"))
    if not done or tin is None or tout is None:
        raise WorkloadError(
            f"{path}: no per-request input_lens/output_lens (saved with --save-detailed) "
            "and no completed, total_input_tokens and total_output_tokens to take "
            "mean lengths from"
        )
    n = int(done)
    wl: dict[str, Any] = {
        "type": "benchmark",
        "num_prompts": n,
        "input_len": max(1, round(tin / n)),
        "output_len": max(1, round(tout / n)),
        "random_range_ratio": 0.0,
        "num_warmups": 0,
    }
    rate = doc.get("request_rate", "inf")
    wl["request_rate"] = math.inf if rate in ("inf", None) else float(rate)
    if doc.get("burstiness") is not None:
        wl["burstiness"] = float(doc["burstiness"])
    if doc.get("max_concurrency") is not None:
        wl["max_concurrency"] = int(doc["max_concurrency"])
    return wl, [
        f"workload: no per-request lengths in the file (run vllm bench with --save-detailed "
        f"for them): every one of its {n} requests takes the run's mean lengths, "
        f"{wl['input_len']} prompt and {wl['output_len']} output tokens"
    ]


def compare(
    scenario_path: Path | None,
    result_path: Path,
    overrides: list[str] | None = None,
    progress: bool = False,
    cache: dict[Any, Any] | None = None,
) -> BenchComparison:
    """Replay the run of ``result_path`` on the deployment of ``scenario_path`` (an
    inference-perf lifecycle metrics file: ``validate.ip_bench``; ``cache`` keeps its
    simulated run for the other stage files of the same run)."""
    from servesim import sim
    from servesim.config.files import read_scenario_file
    from servesim.config.scenario import _resolve_relative_paths, scenario_from_dict
    from servesim.metrics.benchmark import num_before, run_figures

    doc = read_result(result_path)
    if is_lifecycle_file(doc):
        rows, notes = compare_lifecycle(result_path, doc, scenario_path, overrides, progress, cache)
        return BenchComparison(result_path, rows, notes)
    workload, notes = replay_workload(result_path, doc)
    raw: dict[str, Any] = dict(read_scenario_file(scenario_path)) if scenario_path is not None else {}
    source = str(scenario_path) if scenario_path is not None else "<default scenario>"
    if raw.get("workload") is not None:
        notes.append("the scenario's own workload is replaced by the run's")
    raw["workload"] = workload
    scenario = scenario_from_dict(raw, source, overrides)
    if scenario_path is not None:  # its model, profile and trace paths are relative to it
        scenario = _resolve_relative_paths(scenario, scenario_path.parent)
    want, have = str(doc.get("model_id") or ""), str(scenario.model.name)
    if want and base_model_name(want) != base_model_name(have):
        notes.append(f"model: the run served {want}, the scenario simulates {have}")
    result = sim.simulate(scenario, progress=progress)
    predicted = run_figures(result, num_before(result))
    out = BenchComparison(result_path, notes=notes)
    for name in [f"{s}_{m}_ms" for m in METRICS for s in STATS] + list(RATES) + ["duration"]:
        meas, pred = _number(doc.get(name)), _number(predicted.get(name))
        if meas is None or pred is None or meas <= 0:
            continue
        out.rows.append((name, meas, pred, 100.0 * (pred / meas - 1.0)))
    if not out.rows:
        raise WorkloadError(f"{result_path}: none of its figures could be compared")
    return out


def write_comparisons(comparisons: list[BenchComparison], folder: Path) -> Path:
    """``folder/bench_comparison.csv``: one row per (result file, figure)."""
    header = ["result", "figure", "measured", "predicted", "error_pct"]
    return write_rows(
        folder,
        "bench_comparison.csv",
        header,
        (
            [str(c.path), name, f"{meas:.6g}", f"{pred:.6g}", f"{err:.2f}"]
            for c in comparisons
            for name, meas, pred, err in c.rows
        ),
    )


def comparison_text(c: BenchComparison) -> str:
    """The comparison of one result file as fixed-width text."""
    lines = [
        f"{c.path}",
        *(f"  {n}" for n in c.notes),
        f"  {'figure':<26}{'measured':>12}{'predicted':>12}{'error %':>10}",
    ]
    for name, meas, pred, err in c.rows:
        lines.append(f"  {name:<26}{meas:>12.4g}{pred:>12.4g}{err:>+10.1f}")
    return "\n".join(lines)


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def run_checks(
    results: list[Path],
    scenario: Path | None,
    overrides: list[str],
    output: Path | None,
    threshold: float | None,
    echo: Callable[[str], Any],
) -> int:
    """``servesim validate --bench``: each result file replayed on the scenario and printed
    with ``echo``; the exit code (1 when a mean's error passes ``threshold``)."""
    if scenario is None:
        raise ServesimError(
            "--bench: give --scenario FILE, the deployment the benchmark ran against "
            "(model, GPU, parallelism, engine settings)"
        )
    cache: dict[Any, Any] = {}  # one simulation per inference-perf run, whatever its stage files
    done = [compare(scenario, r, overrides, cache=cache) for r in results]
    echo("error = predicted / measured - 1")
    for c in done:
        echo(comparison_text(c))
    if output is not None:
        try:
            echo(f"wrote {write_comparisons(done, output)}")
        except OSError as err:
            why = err.strerror or err
            raise ServesimError(f"{output}: cannot write bench_comparison.csv: {why}") from None
    if threshold is not None:
        over = [c for c in done if c.worst_mean_error() > threshold]
        if over:
            echo(f"{len(over)} of {len(done)} runs with a mean's error over {threshold:g}%")
            return 1
    return 0
