"""servesim against an inference-perf run: its results folder's lifecycle metrics, predicted.

inference-perf (kubernetes-sigs/inference-perf) writes into its results folder one
``stage_N_lifecycle_metrics.json`` per load stage, a ``summary_lifecycle_metrics.json`` over
all of them, and the resolved ``config.yaml`` it ran with. ``servesim validate --bench
<results>/stage_N_lifecycle_metrics.json --scenario DEPLOYMENT.yaml`` (or the summary file)
builds the run's requests from that ``config.yaml`` (workload type ``inference-perf``,
``servesim.workload.inference_perf``), simulates them on the scenario's deployment and
compares, figure by figure, what the file measured with what servesim predicts for the same
requests: those of stage N for a stage file, all of them for the summary. The whole run is
simulated either way, so a stage starts with the prefix cache the earlier ones left, as on
the real server.

The figures are computed as inference-perf's ``reportgen/base.py`` (``summarize_requests``)
computes them, over the requests that succeeded: ``request_latency`` (E2E: last token -
sent), ``time_to_first_token``, ``time_per_output_token`` ((last token - first token) /
(output - 1), per request), ``normalized_time_per_output_token`` (E2E / output); mean,
median and percentiles by ``np.percentile``; throughputs over the stage's span, from its
first send to its last finish. They are named as ``vllm bench``'s (``mean_ttft_ms``,
``p90_e2el_ms``, ``request_throughput``), in milliseconds.

Not compared: ``inter_token_latency``. inference-perf times every token of a streamed chunk
at the chunk's arrival, so its gaps are per chunk: where the server sends tokens in pairs
half of them are ~0 and its median is microseconds. TPOT carries the same information per
request and is compared instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from servesim.errors import ConfigError, WorkloadError

if TYPE_CHECKING:
    from servesim.config import Scenario
    from servesim.workload.base import Workload

#: inference-perf's latency name -> the vllm bench name servesim's --bench rows use.
LATENCIES = {
    "time_to_first_token": "ttft",
    "time_per_output_token": "tpot",
    "request_latency": "e2el",
    "normalized_time_per_output_token": "ntpot",
}
STATS = ("mean", "median", "p90", "p99")
RATES = {
    "requests_per_sec": "request_throughput",
    "output_tokens_per_sec": "output_throughput",
    "input_tokens_per_sec": "input_throughput",
    "total_tokens_per_sec": "total_token_throughput",
}
_STAGE = re.compile(r"stage_(\d+)_lifecycle_metrics\.json$")


def is_lifecycle_file(doc: Any) -> bool:
    """An inference-perf lifecycle metrics file (stage or summary)?"""
    return isinstance(doc, dict) and isinstance(doc.get("successes"), dict) and "load_summary" in doc


def stage_of(path: Path) -> int | None:
    """The stage of ``stage_N_lifecycle_metrics.json`` (None: the summary, all stages)."""
    m = _STAGE.search(path.name)
    return int(m.group(1)) if m else None


def config_beside(path: Path) -> Path:
    """The ``config.yaml`` inference-perf wrote next to its results."""
    cfg = path.parent / "config.yaml"
    if not cfg.is_file():
        raise ConfigError(
            f"{path}: no config.yaml beside it: inference-perf writes the config it ran "
            "with into its results folder; copy it there to replay the run"
        )
    return cfg


def measured_figures(doc: dict[str, Any]) -> dict[str, float]:
    """The file's figures: latencies in ms by vllm bench's names, throughputs per second."""
    succ = doc.get("successes") or {}
    out: dict[str, float] = {}
    lat = succ.get("latency") or {}
    for ip_name, name in LATENCIES.items():
        summary = lat.get(ip_name) or {}
        for stat in STATS:
            v = summary.get(stat)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[f"{stat}_{name}_ms"] = 1e3 * float(v)
    for ip_name, name in RATES.items():
        v = (succ.get("throughput") or {}).get(ip_name)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[name] = float(v)
    return out


def predicted_figures(
    arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, prompt: np.ndarray, output: np.ndarray
) -> dict[str, float]:
    """inference-perf's figures of the given requests (all succeeded), as ``measured_figures`` names them."""
    e2e = finish - arrival
    values = {"ttft": first - arrival, "e2el": e2e, "ntpot": e2e / np.maximum(output, 1)}
    multi = output > 1
    values["tpot"] = (finish[multi] - first[multi]) / (output[multi] - 1)
    out: dict[str, float] = {}
    for name, x in values.items():
        if not x.size:
            continue
        out[f"mean_{name}_ms"] = 1e3 * float(np.mean(x))
        for stat, p in (("median", 50), ("p90", 90), ("p99", 99)):
            out[f"{stat}_{name}_ms"] = 1e3 * float(np.percentile(x, p))
    span = float(finish.max() - arrival.min()) if arrival.size else 0.0
    if span > 0:
        out["request_throughput"] = arrival.size / span
        out["output_throughput"] = float(output.sum()) / span
        out["input_throughput"] = float(prompt.sum()) / span
        out["total_token_throughput"] = float(prompt.sum() + output.sum()) / span
    return out


def compare_lifecycle(
    result_path: Path,
    doc: dict[str, Any],
    scenario_path: Path | None,
    overrides: list[str] | None,
    progress: bool = False,
    cache: dict[Any, Any] | None = None,
) -> tuple[list[tuple[str, float, float, float]], list[str]]:
    """The rows (figure, measured, predicted, error %) and notes of one lifecycle metrics file."""
    cfg_path = config_beside(result_path).resolve()
    stage = stage_of(result_path)
    notes = [
        f"inference-perf {'stage ' + str(stage) if stage is not None else 'summary (all stages)'}; "
        f"workload from {cfg_path.name} beside it; latencies in ms by vllm bench's names; "
        "inter_token_latency not compared (per streamed chunk: compare TPOT)"
    ]
    scenario = _replay_scenario(cfg_path, scenario_path, overrides, notes)
    key = (str(cfg_path), scenario.model_dump_json())
    if cache is not None and key in cache:
        result, wl = cache[key]
    else:
        from servesim import sim
        from servesim.workload import load_workload

        wl = load_workload(scenario.workload, scenario.run.seed)
        result = sim.simulate(scenario, progress=progress)
        if cache is not None:
            cache[key] = (result, wl)
    cols = result.records.columns()
    rows = _compared_rows(result_path, doc, cfg_path, stage, wl, cols["status"], notes)
    predicted = predicted_figures(
        cols["arrival_s"][rows],
        cols["first_token_s"][rows],
        cols["finished_s"][rows],
        cols["num_prompt_tokens"][rows].astype(np.float64),
        cols["num_output_tokens"][rows].astype(np.float64),
    )
    out = []
    for name, meas in measured_figures(doc).items():
        pred = predicted.get(name)
        if pred is None or meas <= 0:
            continue
        out.append((name, meas, pred, 100.0 * (pred / meas - 1.0)))
    if not out:
        raise WorkloadError(f"{result_path}: none of its figures could be compared")
    return out, notes


def _replay_scenario(
    cfg_path: Path, scenario_path: Path | None, overrides: list[str] | None, notes: list[str]
) -> Scenario:
    """The scenario (``scenario_path``, else the default one, with ``overrides``) with its
    workload replaced by the run's inference-perf config; notes where the two differ."""
    from servesim.config.files import read_scenario_file
    from servesim.config.scenario import _resolve_relative_paths, scenario_from_dict
    from servesim.validate.common import base_model_name
    from servesim.workload.inference_perf import read_config

    raw: dict[str, Any] = dict(read_scenario_file(scenario_path)) if scenario_path is not None else {}
    given = raw.get("workload")
    own: dict[str, Any] = given if isinstance(given, dict) else {}
    if own:
        notes.append("the scenario's own workload is replaced by the run's")
    workload: dict[str, Any] = {"type": "inference-perf", "config": str(cfg_path)}
    if own.get("type") == "inference-perf":  # keep its tokenizer and seed settings
        workload.update({k: own[k] for k in ("num_special_tokens", "seed") if k in own})
    raw["workload"] = workload
    scenario = scenario_from_dict(raw, str(scenario_path or "<default scenario>"), overrides)
    if scenario_path is not None:
        scenario = _resolve_relative_paths(scenario, scenario_path.parent)
    model = str(((read_config(cfg_path).get("server") or {}).get("model_name")) or "")
    if model and base_model_name(model) != base_model_name(scenario.model.name):
        notes.append(f"model: the run served {model}, the scenario simulates {scenario.model.name}")
    return scenario


def _compared_rows(
    result_path: Path,
    doc: dict[str, Any],
    cfg_path: Path,
    stage: int | None,
    wl: Workload,
    status: np.ndarray,
    notes: list[str],
) -> np.ndarray:
    """The predicted requests compared with the file's figures: those of its stage (all for a
    summary) that finished; notes on counts that differ from the run's."""
    from servesim.metrics.records import RequestStatus

    rows = np.arange(len(wl))
    if stage is not None:
        stages = wl.meta["stage"]
        if stage > int(stages.max()):
            raise WorkloadError(
                f"{result_path}: stage {stage}, but {cfg_path.name} has {int(stages.max()) + 1} load stages"
            )
        rows = rows[stages == stage]
    ok = status[rows] == RequestStatus.FINISHED
    sent = int((doc.get("load_summary") or {}).get("count") or 0)
    if sent and sent != len(rows):
        notes.append(
            f"requests: the run sent {sent:,}, the replay {len(rows):,} (its own seeded draw of the load)"
        )
    failed = int((doc.get("failures") or {}).get("count") or 0)
    if failed:
        notes.append(f"{failed:,} requests failed in the run (left out of its figures)")
    if int(np.sum(~ok)):
        notes.append(f"{int(np.sum(~ok)):,} predicted requests did not finish (left out)")
    return rows[ok]
