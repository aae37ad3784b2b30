"""The result cache: one row per candidate scenario, in an SQLite file.

A row is keyed on a hash of the fully resolved candidate scenario (its canonical JSON)
and the servesim version, so the same deployment is never simulated twice, whatever its
id in a plan, and a new servesim version does not reuse old numbers. The driver writes
each result as it arrives and commits it at once: a sweep stopped half way (Ctrl-C, a
lost machine) resumes from where it stopped, and the finished rows can be queried with
any SQLite client (``SELECT label, summary FROM results``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from servesim.config import Scenario
from servesim.errors import ConfigError

_SCHEMA = """CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,     -- scenario_key(): sha256 of version + scenario JSON
    version TEXT NOT NULL,    -- servesim version that computed it
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


def scenario_key(scenario: Scenario) -> str:
    """The cache key of a scenario: sha256 of the servesim version and its canonical JSON."""
    __version__ = servesim_version()
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"servesim {__version__}\n{text}".encode()).hexdigest()


class ResultCache:
    """Finished simulations by scenario key (``cache.sqlite`` in the cache directory)."""

    FILE = "cache.sqlite"

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / self.FILE
        self.version = servesim_version()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path)
            self._db.execute(_SCHEMA)
            self._db.commit()
        except (OSError, sqlite3.DatabaseError) as err:
            raise ConfigError(f"{self.path}: cannot use as the plan's result cache: {err}") from None

    def get(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The rows of those keys that are cached: key -> {summary, error, wall_s, label}."""
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            part = keys[i:i + 500]
            marks = ",".join("?" * len(part))
            for key, label, summary, error, wall in self._db.execute(
                    f"SELECT key, label, summary, error, wall_s FROM results WHERE key IN ({marks})", part):
                out[key] = {"label": label, "summary": json.loads(summary) if summary else None,
                            "error": error, "wall_s": wall}
        return out

    def put(self, key: str, label: str, summary: dict[str, Any] | None, error: str | None, wall_s: float) -> None:
        """Store one result and commit it (so an interrupted sweep keeps it)."""
        self._db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (key, self.version, label, None if summary is None else json.dumps(summary),
                          error, wall_s, time.time()))
        self._db.commit()

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def close(self) -> None:
        self._db.close()
