"""The result cache: one row per candidate scenario, in an SQLite file.

A row is keyed on a hash of the fully resolved candidate scenario (its canonical JSON)
and a fingerprint of servesim's code and bundled data (``code_fingerprint``), so the same
deployment is never simulated twice, whatever its id in a plan, and a changed step model,
catalog or scheduler does not reuse old numbers (the package version alone stays the same
over many such changes). The driver writes
each result as it arrives and commits it at once: a sweep stopped half way (Ctrl-C, a
lost machine) resumes from where it stopped, and the finished rows can be queried with
any SQLite client (``SELECT label, summary FROM results``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from servesim.config import Scenario
from servesim.errors import ConfigError

_SCHEMA = """CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,     -- scenario_key(): sha256 of the code fingerprint + scenario JSON
    version TEXT NOT NULL,    -- servesim version + code fingerprint that computed it
    label TEXT NOT NULL,      -- the candidate's label when it was computed
    summary TEXT,             -- the run's summary (JSON), NULL when it failed
    error TEXT,               -- why the run failed (a user error of the scenario), else NULL
    wall_s REAL NOT NULL,     -- seconds the simulation took
    created_at REAL NOT NULL  -- unix time the row was written
)"""


def servesim_version() -> str:
    """The installed servesim's version (its package metadata; the top-level package is a
    layer above the planner)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("servesim")
    except PackageNotFoundError:
        return "unknown"


#: The package's directory (src/servesim, or site-packages/servesim when installed).
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@functools.cache
def code_fingerprint() -> str:
    """sha256 of the package's Python sources and bundled data files (paths and contents),
    computed once a process (about 6 MB read). Any edit to the code or the data (a step
    model, a catalog entry, a kernel table) changes it; caches and byte-code do not."""
    h = hashlib.sha256()
    files = [
        f
        for f in PACKAGE_DIR.rglob("*")
        if f.is_file()
        and "__pycache__" not in f.parts
        and (f.suffix == ".py" or "data" in f.relative_to(PACKAGE_DIR).parts[:1])
    ]
    for f in sorted(files):
        h.update(f.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def code_version() -> str:
    """The servesim version and the code fingerprint's first 16 hex digits, as a row records it."""
    return f"{servesim_version()}+{code_fingerprint()[:16]}"


def scenario_key(scenario: Scenario) -> str:
    """The cache key of a scenario: sha256 of the code fingerprint and its canonical JSON."""
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"servesim {code_fingerprint()}\n{text}".encode()).hexdigest()


class ResultCache:
    """Finished simulations by scenario key (``cache.sqlite`` in the cache directory)."""

    FILE = "cache.sqlite"

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / self.FILE
        self.version = code_version()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path)
            # Write-ahead log, synced at checkpoints: a commit per result (what lets a stopped
            # sweep resume) no longer waits for the disk twice; a crash of the process loses
            # nothing committed, a power loss at most the last results (simulated again).
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
            self._db.commit()
        except (OSError, sqlite3.DatabaseError) as err:
            raise ConfigError(f"{self.path}: cannot use as the plan's result cache: {err}") from None

    def get(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The rows of those keys that are cached: key -> {summary, error, wall_s, label}."""
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            part = keys[i : i + 500]
            marks = ",".join("?" * len(part))
            for key, label, summary, error, wall in self._db.execute(
                f"SELECT key, label, summary, error, wall_s FROM results WHERE key IN ({marks})", part
            ):
                out[key] = {
                    "label": label,
                    "summary": json.loads(summary) if summary else None,
                    "error": error,
                    "wall_s": wall,
                }
        return out

    def put(
        self, key: str, label: str, summary: dict[str, Any] | None, error: str | None, wall_s: float
    ) -> None:
        """Store one result and commit it (so an interrupted sweep keeps it)."""
        self._db.execute(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                self.version,
                label,
                None if summary is None else json.dumps(summary),
                error,
                wall_s,
                time.time(),
            ),
        )
        self._db.commit()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def close(self) -> None:
        self._db.close()
