"""What every validation suite shares: the check record, bundled profiles, bundled data."""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from servesim.perf.profiled import HardwareProfile
from servesim.validate.limits import Goal

#: Bundled profiles (package data) by role.
PROFILES = {
    "h100_ops": "h100_vidur_ops.json",
    "a100_ops": "a100_vidur_ops.json",
    "a100_e2e": "a100_splitwise.json",
    "cpu": "cpu_vllm_tiny.json",
}
#: The recording the CPU profile was fitted on (the others are predictions).
CPU_FIT_RECORDING = "rate1.json"
#: Package data: the measurement subsets (``data/``, in the layout of the full sets) and the
#: vLLM CPU recordings (``recordings/``) that validation runs on by default; made from
#: tests/fixtures by tests/fixtures/make_validation_bundle.py.
BUNDLED_DATA = "validation.tar.gz"


@dataclass(slots=True)
class Check:
    """One row of the validation table: signed relative errors (%) of one metric."""

    suite: str
    case: str
    metric: str
    errors_pct: np.ndarray
    limit_pct: float | None = None  # the goal on the mean absolute error (validate.limits.Goal)
    measured: float | None = None  # for a single-number metric
    predicted: float | None = None
    note: str = ""
    known_bad: str = ""  # why servesim is known to miss limit_pct: reported, not failed

    @property
    def n(self) -> int:
        return len(self.errors_pct)

    @property
    def mape_pct(self) -> float:
        return float(np.mean(np.abs(self.errors_pct)))

    @property
    def max_pct(self) -> float:
        return float(np.max(np.abs(self.errors_pct)))

    @property
    def bias_pct(self) -> float:
        return float(np.mean(self.errors_pct))

    def meets(self, threshold_pct: float | None = None) -> bool:
        """Within ``threshold_pct``, else within its own limit (a row without one always is)."""
        limit = threshold_pct if threshold_pct is not None else self.limit_pct
        return limit is None or self.mape_pct <= limit

    def passed(self, threshold_pct: float | None = None) -> bool:
        """``meets``, or misses its own goal for a known reason (an explicit threshold holds for all)."""
        return self.meets(threshold_pct) or (threshold_pct is None and bool(self.known_bad))

    def status(self, threshold_pct: float | None = None) -> str:
        if self.meets(threshold_pct):
            return "yes"
        return "known bad" if self.passed(threshold_pct) else "NO"

    @classmethod
    def against(
        cls,
        suite: str,
        case: str,
        metric: str,
        errors_pct: np.ndarray,
        goal: Goal | None,
        *,
        measured: float | None = None,
        predicted: float | None = None,
        note: str = "",
    ) -> Check:
        """A row held to ``goal`` (None: a reference row, not a prediction)."""
        return cls(
            suite,
            case,
            metric,
            errors_pct,
            None if goal is None else goal.limit_pct,
            measured=measured,
            predicted=predicted,
            note=note,
            known_bad="" if goal is None else goal.known_bad,
        )


def load_bundled_profile(role: str) -> HardwareProfile:
    """One of the profiles shipped with servesim (``PROFILES``)."""
    ref = resources.files("servesim").joinpath("data", "profiles", PROFILES[role])
    return HardwareProfile.from_dict(json.loads(ref.read_text()), f"servesim/data/profiles/{PROFILES[role]}")


@contextmanager
def bundled_data() -> Iterator[tuple[Path, Path]]:
    """The data shipped with servesim, unpacked into a temporary folder for as long as the
    ``with`` block runs: (measurement folder, recordings folder), the arguments of
    ``validate_all``."""
    ref = resources.files("servesim").joinpath("data", BUNDLED_DATA)
    with tempfile.TemporaryDirectory(prefix="servesim-validate-") as tmp:
        with ref.open("rb") as f, tarfile.open(fileobj=f, mode="r:gz") as tar:
            # a filter: Python 3.12+ warns without one; Pythons before 3.11.4 have none
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)
        yield Path(tmp) / "data", Path(tmp) / "recordings"


def _pct(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return (np.asarray(pred, float) / np.asarray(meas, float) - 1.0) * 100


def base_model_name(name: str) -> str:
    """A model's name without its organization and its chat-tuning suffix (one architecture)."""
    base = name.rstrip("/").split("/")[-1].lower()
    for suffix in ("-instruct", "-chat", "-it", "-hf"):
        base = base.removesuffix(suffix)
    return base


def write_rows(folder: Path, name: str, header: list[str], rows: Iterable[list[str]]) -> Path:
    """``folder/name``: a CSV of ``header`` and ``rows`` (the comparison files of ``--bench``
    and ``--open-loop``), the folder made if need be."""
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path
