"""Open-loop validation: real vLLM runs under inference-perf's open-loop load, replayed.

A run folder holds what an inference-perf run against ``vllm serve`` leaves, in the layout
of the BLIS project's public H100 runs (inference-sim/training: ``default_args/<run>/`` and
``replay_data/<run>*.json``):

- ``exp-config.yaml``: the server's arguments (``model``, ``tensor_parallelism``,
  ``max_model_len``, ``max_num_batched_tokens``, ``max_num_seqs``);
- ``config.yaml`` (inference-perf's resolved config) or ``profile.yaml``: the load and the
  prompts' structure (``servesim.workload.inference_perf``);
- ``replay.json``: each request's send time (``arrival_time_us``) and prompt length
  (``input_tokens``) as the server counted it;
- ``ground_truth.json``: each request's measured ``ttft_s`` and ``e2e_s`` at the client;
- ``model_config.json``: the served model's Hugging Face ``config.json``.

The run is replayed on the deployment it names (the GPU and vLLM version from a base
scenario: ``--scenario``), each request with its recorded send time and prompt length and
the prompt identity inference-perf gives it (request ``i`` sends prompt ``i mod N``, the
group's system prompt first), and its output length as the config asks: these runs set
``ignore_eos``, so every request generates ``output_len`` tokens. (The replay files'
``output_tokens`` are the client's recount of the streamed text; their E2E shows every
request ran to ``output_len``, 2.06 s against 2.07 s for recounts below and above 100.)

Per run: the error of the mean and of P50/P90 of TTFT, E2E and ITL (a request's
(E2E - TTFT) / (output tokens - 1)); the suite's figure is the median over runs.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from servesim.errors import ConfigError
from servesim.workload.inference_perf import (
    _ALIASES,
    HASH_BLOCK_TOKENS,
    SHARED_PREFIX_DEFAULTS,
    prompt_hash_ids,
)

METRICS = ("ttft", "e2e", "itl")
STATS = ("mean", "p50", "p90")
#: exp-config.yaml key -> scenario field.
ENGINE_KEYS = {
    "max_model_len": "max_model_len",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
}


@dataclass
class OpenLoopRun:
    """One run's measured and predicted figures (seconds) and the errors (%)."""

    name: str
    measured: dict[str, float] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def error(self, key: str) -> float:
        return 100.0 * (self.predicted[key] / self.measured[key] - 1.0)


def _read(path: Path) -> Any:
    if not path.exists():
        raise ConfigError(
            f"{path}: missing (an open-loop run folder holds exp-config.yaml, config.yaml or "
            "profile.yaml, replay.json, ground_truth.json and model_config.json)"
        )
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot parse: {str(err).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{path}: cannot parse: nested too deeply") from None


def _mapping(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{path}: expected a mapping, got {got}")
    return data


def _number(where: str, row: Any, key: str, least: float) -> float:
    """``row``'s ``key``: a finite number of at least ``least``, or an error naming it."""
    value = row.get(key) if isinstance(row, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool) or not value >= least:
        what = f"{key} {value!r}" if isinstance(row, dict) else f"{row!r:.40}"
        raise ConfigError(f"{where}: {what}; expected {key}, a number >= {least:g}")
    if not np.isfinite(value):
        raise ConfigError(f"{where}: {key} {value!r}; expected a finite number")
    return float(value)


def _rows(path: Path, what: str, rows: Any, fields: dict[str, float]) -> list[dict[str, Any]]:
    """The entries of a replay or ground-truth list (``what``: where in the file), each with
    an integer ``index`` and the ``fields`` (name -> least value) checked; no index twice."""
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{path}: {what}: expected a non-empty list of requests, got {rows!r:.60}")
    seen: set[int] = set()
    for k, row in enumerate(rows):
        where = f"{path}: {what}[{k}]"
        index = _number(where, row, "index", 0)
        if index != int(index) or int(index) in seen:
            raise ConfigError(f"{where}: index {row['index']!r}; expected an integer given once")
        seen.add(int(index))
        for key, least in fields.items():
            _number(where, row, key, least)
    return sorted(rows, key=lambda r: r["index"])


def figures(ttft: np.ndarray, e2e: np.ndarray, out_tokens: np.ndarray) -> dict[str, float]:
    """Mean, P50 and P90 of TTFT, E2E and ITL over a run's requests."""
    itl = (e2e - ttft) / np.maximum(out_tokens - 1, 1)
    out = {}
    for name, x in (("ttft", ttft), ("e2e", e2e), ("itl", itl)):
        out[f"{name}_mean"] = float(np.mean(x))
        out[f"{name}_p50"] = float(np.percentile(x, 50))
        out[f"{name}_p90"] = float(np.percentile(x, 90))
    return out


def run_scenario(folder: Path, base: dict[str, Any], trace: Path) -> tuple[dict[str, Any], np.ndarray]:
    """The scenario replaying the run of ``folder`` (its requests written to ``trace``) and
    each request's output length."""
    exp = _mapping(folder / "exp-config.yaml", _read(folder / "exp-config.yaml"))
    cfg_path = folder / "config.yaml" if (folder / "config.yaml").exists() else folder / "profile.yaml"
    ip = _mapping(cfg_path, _read(cfg_path))
    replay_path = folder / "replay.json"
    replay = _mapping(replay_path, _read(replay_path))
    data = ip.get("data") or {}
    if str(data.get("type")) != "shared_prefix":
        raise ConfigError(
            f"{cfg_path}: data.type {data.get('type')!r}: the open-loop suite replays shared_prefix runs"
        )
    given = (data.get("shared_prefix") or {}).items()
    sp = {**SHARED_PREFIX_DEFAULTS, **{_ALIASES.get(k, k): v for k, v in given}}
    groups, per = int(sp["num_groups"]), int(sp["num_prompts_per_group"])
    sys_len, out_len = sp["system_prompt_len"], sp["output_len"]
    if not isinstance(sys_len, int) or not isinstance(out_len, int):
        raise ConfigError(f"{cfg_path}: the open-loop suite replays fixed system_prompt_len and output_len")
    reqs = _rows(replay_path, "requests", replay.get("requests"), {"arrival_time_us": 0, "input_tokens": 1})
    outs = np.full(len(reqs), out_len, np.int64)
    with trace.open("w") as f:
        for r in reqs:
            i = int(r["index"])
            p = i % (groups * per)
            n = int(r["input_tokens"])
            f.write(
                json.dumps(
                    {
                        "arrived_at_s": r["arrival_time_us"] / 1e6,
                        "num_prompt_tokens": n,
                        "num_output_tokens": out_len,
                        "hash_ids": list(prompt_hash_ids(sys_len + 1, n, p % groups, p)),
                    }
                )
                + "\n"
            )
    sc = json.loads(json.dumps(base))
    sc["model"] = {**sc.get("model", {}), "name": str(folder / "model_config.json")}
    sc.setdefault("parallel", {})["tensor_parallel_size"] = int(exp.get("tensor_parallelism", 1))
    eng = sc.setdefault("engine", {})
    for k, v in ENGINE_KEYS.items():
        if exp.get(k) is not None:
            eng[v] = int(exp[k])
    eng.setdefault("enable_prefix_caching", True)
    sc["workload"] = {
        "type": "trace",
        "path": str(trace),
        "format": "generic",
        "hash_block_tokens": HASH_BLOCK_TOKENS,
    }
    return sc, outs


def replay_run(folder: Path, base: dict[str, Any]) -> OpenLoopRun:
    """Replay one run folder on ``base`` (a scenario dict: GPU, vLLM version) and compare."""
    from servesim import sim

    gt_path = folder / "ground_truth.json"
    gt = _rows(gt_path, "entries", _read(gt_path), {"ttft_s": 0, "e2e_s": 0})
    run = OpenLoopRun(folder.name)
    with tempfile.TemporaryDirectory() as tmp:
        sc, outs = run_scenario(folder, base, Path(tmp) / "requests.jsonl")
        replayed = [int(r["index"]) for r in _read(folder / "replay.json")["requests"]]
        if sorted(replayed) != [int(r["index"]) for r in gt]:
            raise ConfigError(
                f"{gt_path}: {len(gt):,} requests, replay.json {len(replayed):,}; expected the same "
                "requests (one entry per index of replay.json)"
            )
        result = sim.simulate(sc)
    ok = np.array([not r.get("has_error", False) for r in gt])
    run.measured = figures(
        np.array([r["ttft_s"] for r in gt])[ok], np.array([r["e2e_s"] for r in gt])[ok], outs[ok]
    )
    cols = result.records.columns()
    order = np.argsort(cols["arrival_s"], kind="stable")
    arr = cols["arrival_s"][order]
    run.predicted = figures(
        (cols["first_token_s"][order] - arr)[ok],
        (cols["finished_s"][order] - arr)[ok],
        cols["num_output_tokens"][order][ok],
    )
    if int(np.sum(~ok)):
        run.notes.append(f"{int(np.sum(~ok))} requests with an error left out")
    return run


def run_folders(root: Path) -> list[Path]:
    """``root`` itself if it is a run folder, else its subfolders that are."""
    if not root.is_dir():
        raise ConfigError(f"{root}: {'is a file, expected a folder' if root.exists() else 'no such folder'}")
    if (root / "replay.json").exists():
        return [root]
    found = sorted(p for p in root.iterdir() if p.is_dir() and (p / "replay.json").exists())
    if not found:
        raise ConfigError(f"{root}: no open-loop run folder (one holding replay.json) in it")
    return found


def summary_rows(runs: list[OpenLoopRun]) -> list[tuple[str, float]]:
    """Median |error| over runs of each figure (the suite's headline)."""
    return [
        (f"{m}_{s}", float(np.median([abs(r.error(f"{m}_{s}")) for r in runs])))
        for m in METRICS
        for s in STATS
    ]


def report_text(runs: list[OpenLoopRun]) -> str:
    lines = [f"{'run':<48}" + "".join(f"{m + ' ' + s:>13}" for m in METRICS for s in ("mean",))]
    for r in runs:
        cells = "".join(
            f"{r.measured[m + '_mean'] * 1e3:>6.1f}/{r.predicted[m + '_mean'] * 1e3:<6.1f}" for m in METRICS
        )
        errs = " ".join(f"{m} {r.error(m + '_mean'):+.1f}%" for m in METRICS)
        lines.append(f"{r.name:<48}{cells}  {errs}")
        lines.extend(f"  {n}" for n in r.notes)
    med = dict(summary_rows(runs))
    lines.append("median |error| over runs: " + ", ".join(f"{k} {v:.1f}%" for k, v in med.items()))
    return "\n".join(lines)


#: The suite's goals: median |error| of the run means over runs (%).
GOALS = {"ttft_mean": 15.0, "e2e_mean": 10.0, "itl_mean": 10.0}


def write_runs(runs: list[OpenLoopRun], folder: Path) -> Path:
    """``folder/open_loop_runs.csv``: one row per (run, figure)."""
    from servesim.validate.common import write_rows

    header = ["run", "figure", "measured_s", "predicted_s", "error_pct"]
    return write_rows(
        folder,
        "open_loop_runs.csv",
        header,
        (
            [r.name, k, f"{r.measured[k]:.6g}", f"{r.predicted[k]:.6g}", f"{r.error(k):.2f}"]
            for r in runs
            for k in r.measured
        ),
    )


def run_checks(
    folders: list[Path],
    scenario: Path | None,
    overrides: list[str],
    output: Path | None,
    threshold: float | None,
    echo: Any,
) -> int:
    """``servesim validate --open-loop``: every run folder replayed on the scenario's GPU and
    vLLM version; the exit code (1 when a median error passes its goal or ``threshold``)."""
    from servesim.config.files import read_scenario_file
    from servesim.config.overrides import parse_override

    base: dict[str, Any] = dict(read_scenario_file(scenario)) if scenario is not None else {}
    for item in overrides:
        key, value = parse_override(item)
        keys = key.split(".")
        node = base
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    base.pop("workload", None)
    from servesim.config import scenario_from_dict

    scenario_from_dict(dict(base), str(scenario) if scenario is not None else "--set")  # errors name it
    runs = [replay_run(f, base) for root in folders for f in run_folders(root)]
    echo("measured/predicted ms; error = predicted / measured - 1")
    echo(report_text(runs))
    if output is not None:
        try:
            echo(f"wrote {write_runs(runs, output)}")
        except OSError as err:
            raise ConfigError(f"{output}: cannot write open_loop_runs.csv: {err.strerror or err}") from None
    med = dict(summary_rows(runs))
    over = [k for k, goal in GOALS.items() if med[k] > (threshold if threshold is not None else goal)]
    if over:
        echo("over the goal: " + ", ".join(f"{k} {med[k]:.1f}%" for k in over))
        return 1
    return 0
