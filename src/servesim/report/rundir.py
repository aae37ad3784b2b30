"""Reading an output folder of servesim: a run, a plan or a validation, by the files it holds.

- a **run** (``servesim simulate --output DIR``): ``summary.json``, ``requests.*``, ``steps.*``
  and, where the run wrote it, ``timeseries.*`` (one row per pool and time bin);
- a **plan** (``servesim plan``): ``candidates.parquet`` or ``candidates.json`` (one row per
  candidate deployment) and ``pareto.json``;
- a **capacity search** (``servesim capacity --output DIR``): ``capacity.json`` (the result
  and its bracket) and ``probes.csv`` (one row per probed rate);
- a **validation** (``servesim validate --suite silicon --output DIR``): ``silicon_runs.csv``
  (one row per measured run, predicted beside measured) and ``silicon_groups.json``.

Tables are read as numpy columns, Parquet preferred over CSV where both exist. Nothing here
knows how the files were computed; the report only draws what is there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from servesim.errors import ServesimError

Kind = Literal["run", "plan", "capacity", "validate"]
Columns = dict[str, np.ndarray]

EXPECTED = (
    "summary.json (servesim simulate --output DIR), candidates.parquet/.json and pareto.json "
    "(servesim plan), capacity.json (servesim capacity), or silicon_runs.csv (servesim validate "
    "--suite silicon --output DIR)"
)


@dataclass
class RunDir:
    """One output folder, read once: its kind, its JSON documents and its tables."""

    path: Path
    kind: Kind
    summary: dict[str, Any] = field(default_factory=dict)  # summary.json (runs)
    tables: dict[str, Columns] = field(default_factory=dict)  # "requests", "steps", "timeseries", ...
    documents: dict[str, Any] = field(default_factory=dict)  # pareto.json, silicon_groups.json

    @property
    def label(self) -> str:
        """A short name for legends: the scenario's name, else the folder's."""
        name = (self.summary.get("scenario") or {}).get("name") if self.kind == "run" else None
        return str(name or self.path.name)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ServesimError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ServesimError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None


def _from_arrow(table: Any) -> Columns:
    """Arrow columns as numpy (strings as objects; nulls in numbers as NaN)."""
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def read_table(folder: Path, stem: str) -> Columns | None:
    """``stem.parquet``, else ``stem.csv``, else ``stem.json`` (a list of row objects) as
    columns; None when none is there."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    for suffix in (".parquet", ".csv", ".json"):
        path = folder / f"{stem}{suffix}"
        if not path.is_file():
            continue
        try:
            if suffix == ".parquet":
                return _from_arrow(pq.read_table(path))
            if suffix == ".csv":
                return _from_arrow(pcsv.read_csv(path))
        except (pa.ArrowInvalid, OSError) as err:
            raise ServesimError(f"{path}: not a readable {suffix[1:]} table: {err}") from None
        return _rows_to_columns(path, read_json(path))
    return None


def _rows_to_columns(path: Path, doc: Any) -> Columns:
    rows = doc.get("candidates", doc.get("rows")) if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ServesimError(f'{path}: expected a list of row objects (or {{"candidates": [...]}})')
    names = list(dict.fromkeys(k for r in rows for k in r))
    out: Columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        if all(isinstance(v, bool) for v in values):
            out[name] = np.array(values, dtype=bool)
        elif all(isinstance(v, int | float) and not isinstance(v, bool) or v is None for v in values):
            out[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        else:
            out[name] = np.array(["" if v is None else str(v) for v in values], dtype=object)
    return out


#: Columns a report reads that the writing command always writes (``planner.output``'s
#: candidates table; ``validate.silicon_results``' runs table): a table without them is not
#: that command's, and its report would be empty sections.
PLAN_COLUMNS = ("id", "status", "usd_per_hour", "meets_slo")
SILICON_COLUMNS = ("group", "measured_ttft_ms", "predicted_ttft_ms", "measured_tpot_ms", "predicted_tpot_ms")


def _check_columns(
    folder: Path, stem: str, cols: Columns | None, needed: tuple[str, ...], writer: str
) -> None:
    if not cols:  # no table, or a JSON list of no rows (which names no columns)
        return
    missing = [c for c in needed if c not in cols]
    if missing:
        name = next(f"{stem}{x}" for x in (".parquet", ".csv", ".json") if (folder / f"{stem}{x}").is_file())
        raise ServesimError(
            f"{folder / name}: not a {writer} table (no column {', '.join(missing)}; found "
            f"{', '.join(list(cols)[:8]) or 'none'})"
        )


def open_run_dir(path: Path | str) -> RunDir:
    """Read an output folder; a clear error when it is missing or holds none of the files."""
    path = Path(path)
    if not path.exists():
        raise ServesimError(f"{path}: no such folder (expected an output folder holding {EXPECTED})")
    if not path.is_dir():
        raise ServesimError(f"{path}: not a folder (expected an output folder holding {EXPECTED})")
    wrote = {  # each command's own files: two of them is one command's output over another's
        "servesim simulate (summary.json)": (path / "summary.json").is_file(),
        "servesim plan (pareto.json)": (path / "pareto.json").is_file(),
        "servesim capacity (capacity.json)": (path / "capacity.json").is_file(),
    }
    found = [k for k, v in wrote.items() if v]
    if len(found) > 1:
        raise ServesimError(
            f"{path}: holds the outputs of {' and '.join(found)}: one command wrote into another's "
            "folder, so which one to report is unclear; give each command its own --output folder"
        )
    if (path / "summary.json").is_file():
        return _read_run(path)
    if (
        any((path / f"candidates{s}").is_file() for s in (".parquet", ".csv", ".json"))
        or (path / "pareto.json").is_file()
    ):
        tables = {"candidates": read_table(path, "candidates")}
        _check_columns(path, "candidates", tables["candidates"], PLAN_COLUMNS, "servesim plan")
        docs = {"pareto": read_json(path / "pareto.json")} if (path / "pareto.json").is_file() else {}
        return RunDir(path, "plan", tables={k: v for k, v in tables.items() if v is not None}, documents=docs)
    if (path / "capacity.json").is_file():
        probes = read_table(path, "probes")
        return RunDir(
            path,
            "capacity",
            tables={"probes": probes} if probes is not None else {},
            documents={"capacity": read_json(path / "capacity.json")},
        )
    if (path / "silicon_runs.csv").is_file():
        runs = read_table(path, "silicon_runs")
        _check_columns(path, "silicon_runs", runs, SILICON_COLUMNS, "servesim validate --suite silicon")
        docs = {}
        if (path / "silicon_groups.json").is_file():
            docs["groups"] = read_json(path / "silicon_groups.json")
        return RunDir(path, "validate", tables={"silicon_runs": runs or {}}, documents=docs)
    raise ServesimError(f"{path}: not a servesim output folder (it holds none of {EXPECTED})")


def _read_run(path: Path) -> RunDir:
    summary = read_json(path / "summary.json")
    if not isinstance(summary, dict) or "latency" not in summary or "counts" not in summary:
        raise ServesimError(
            f"{path / 'summary.json'}: not a servesim summary (no 'latency' and 'counts' sections)"
        )
    tables: dict[str, Columns] = {}
    for stem in ("requests", "steps", "timeseries"):
        cols = read_table(path, stem)
        if cols is not None:
            tables[stem] = cols
    if "requests" not in tables:
        raise ServesimError(
            f"{path}: summary.json without requests.parquet or requests.csv "
            "(write the run with servesim simulate --output DIR)"
        )
    need = ("arrival_s", "first_token_s", "finished_s", "num_output_tokens")
    missing = [c for c in need if c not in tables["requests"]]
    if missing:
        raise ServesimError(f"{path}: the requests table lacks column(s) {', '.join(missing)}")
    return RunDir(path, "run", summary=summary, tables=tables)
