"""Engine step logs: what an engine did in each step and how long the step took.

Two forms, read into an ``EngineLog`` of (BatchStats, seconds) per step:

- the JSON of a vLLM step recorder (``record.py``, tests/fixtures/vllm/README.md): every
  scheduled request's tokens and computed tokens before the step, start and end times; the
  engine knobs and the model's config;
- a generic CSV with ``num_prefill_tokens, prefill_attention_work, num_decode_reqs,
  sum_decode_context, duration_s`` (optional ``num_prefill_reqs, sum_prefill_context``).

Every reader raises ``MeasurementError`` naming the file and what was wrong.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from servesim.calibration.measurements import MeasurementError
from servesim.catalog.hf_config import from_hf_config
from servesim.catalog.models import ModelSpec
from servesim.perf.base import BatchStats


@dataclass(slots=True)
class EngineLog:
    """Per engine step: aggregate batch statistics and the measured step time (seconds).

    From a record.py JSON, ``model_config`` and ``engine`` are the recording's; the step
    time is schedule() entry to update_from_output() exit, which includes the engine's
    own CPU work (scheduling, input preparation, sampling, output processing).
    """

    stats: list[BatchStats]
    duration_s: np.ndarray
    source: str
    model_config: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None
    data: dict[str, Any] | None = None  # the whole record.py JSON, when read from one

    def model_spec(self) -> ModelSpec:
        if not self.model_config:
            raise MeasurementError(f"{self.source}: no model config in the log; name the model")
        return from_hf_config(
            self.model_config,
            self.model_config.get("_name_or_path", "recorded-model"),
            dtype=str((self.engine or {}).get("dtype", "auto")),
            source=self.source,
        )


def steps_to_stats(steps: list[dict[str, Any]], prompt_lens: dict[str, int]) -> list[BatchStats]:
    """BatchStats of record.py steps. A decode is a 1-token step past the prompt; anything
    else is a prefill chunk of ``tokens`` on top of ``computed_before``."""
    out = []
    for s in steps:
        st = BatchStats()
        for key, v in s["scheduled"].items():
            n, p = int(v["tokens"]), int(v["computed_before"] or 0)
            if n == 1 and p >= prompt_lens[key.split("-")[0]]:
                st.add_decode(p)
            else:
                st.add_chunk(n, p)
        out.append(st)
    return out


def read_engine_log(path: str | Path, run: int = 0) -> EngineLog:
    """A record.py JSON (``runs[run]``) or a generic per-step CSV."""
    path = Path(path)
    if path.suffix == ".csv":
        return _read_step_csv(path)
    try:
        data = json.loads(path.read_text())
        r = data["runs"][run]
        prompt_lens = {q["id"]: int(q["num_prompt_tokens"]) for q in r["requests"]}
        steps = [s for s in r["steps"] if s["scheduled"]]
        stats = steps_to_stats(steps, prompt_lens)
        dur = np.asarray([s["t_end"] - s["t_start"] for s in steps])
    except (OSError, json.JSONDecodeError) as err:
        raise MeasurementError(f"{path}: cannot read JSON: {err}") from None
    except (KeyError, IndexError, TypeError) as err:
        raise MeasurementError(f"{path}: not a record.py step log (missing {err})") from None
    eng = data.get("engine", {})
    return EngineLog(stats, dur, str(path), eng.get("model_config"), eng, data)


def merge_engine_logs(logs: list[EngineLog]) -> EngineLog:
    """The steps of several logs of the same engine and model as one log (for a fit that
    spans their shapes, e.g. short and long contexts). The model config and engine of the
    first log that has one are kept; logs with another model config are refused."""
    if len(logs) == 1:
        return logs[0]
    configs = [log for log in logs if log.model_config]
    for other in configs[1:]:
        if other.model_config != configs[0].model_config:
            raise MeasurementError(
                f"{other.source}: another model than {configs[0].source}'s; calibrate one model at a time"
            )
    first = configs[0] if configs else logs[0]
    return EngineLog(
        [s for log in logs for s in log.stats],
        np.concatenate([log.duration_s for log in logs]),
        " + ".join(log.source for log in logs),
        first.model_config,
        first.engine,
    )


_CSV_COLUMNS = (
    "num_prefill_tokens",
    "prefill_attention_work",
    "num_decode_reqs",
    "sum_decode_context",
    "duration_s",
)


def _read_step_csv(path: Path) -> EngineLog:
    try:
        rows = list(csv.DictReader(path.open(newline="")))
    except OSError as err:
        raise MeasurementError(f"{path}: cannot read: {err.strerror or err}") from None
    if not rows or set(_CSV_COLUMNS) - set(rows[0]):
        raise MeasurementError(
            f"{path}: expected columns {', '.join(_CSV_COLUMNS)} "
            "(optional num_prefill_reqs, sum_prefill_context)"
        )
    stats, dur = [], []
    for line, row in enumerate(rows, start=2):
        try:
            pt = int(row["num_prefill_tokens"])
            stats.append(
                BatchStats(
                    num_prefill_tokens=pt,
                    prefill_attn_work=float(row["prefill_attention_work"]),
                    num_prefill_reqs=int(row.get("num_prefill_reqs") or (1 if pt else 0)),
                    num_decode_reqs=int(row["num_decode_reqs"]),
                    sum_decode_context=int(row["sum_decode_context"]),
                    sum_prefill_context=int(row.get("sum_prefill_context") or 0),
                )
            )
            dur.append(float(row["duration_s"]))
        except ValueError as err:
            raise MeasurementError(f"{path}:{line}: {err}") from None
    return EngineLog(stats, np.asarray(dur), str(path))
