"""Small, generic helpers for the tests, and where the large public data sets are.

Every test runs on the fixtures under tests/ except those marked ``shared_data``: they
exercise the full public traces and measurement sets, read them from ``shared_data(...)``
(the folder ``SERVESIM_SHARED_DATA`` names, by default ``shared/data`` beside the checkout)
and skip, saying so, where it is absent. ``pytest -m "not shared_data"`` leaves them out.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler, SchedulerConfig
from servesim.workload.base import Workload

_BESIDE_THE_CHECKOUT = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_DATA = Path(os.environ.get("SERVESIM_SHARED_DATA", _BESIDE_THE_CHECKOUT))


def shared_data(rel: str) -> Path:
    """A file or folder of the public data sets (``SHARED_DATA / rel``); skips the test where
    it is absent. For tests marked ``shared_data`` only."""
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"the public data sets are not here: {path} (set SERVESIM_SHARED_DATA to their folder)")
    return path


def load_script(path: Path) -> ModuleType:
    """A script of the repository (``tools/``, ``benchmarks/``) imported as a module, its
    folder on ``sys.path`` as when it runs (``tools/pack_*.py`` import ``tools/_aic.py``)."""
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_workload(
    arrivals: Sequence[float],
    prompts: Sequence[int] | int,
    outputs: Sequence[int] | int,
    prefix_group: Sequence[int] | None = None,
    prefix_len: int = 0,
) -> Workload:
    """A validated Workload from plain lists (scalars broadcast to every request)."""
    n = len(arrivals)
    wl = Workload(
        arrival_s=np.asarray(arrivals, dtype=np.float64),
        num_prompt_tokens=np.broadcast_to(np.asarray(prompts, dtype=np.int64), (n,)).copy(),
        num_output_tokens=np.broadcast_to(np.asarray(outputs, dtype=np.int64), (n,)).copy(),
        prefix_group=None if prefix_group is None else np.asarray(prefix_group, dtype=np.int64),
        prefix_len=prefix_len,
        source="test",
    )
    wl.validate()
    return wl


def make_scheduler(
    num_gpu_blocks: int = 11,
    block_size: int = 16,
    *,
    caching: bool = False,
    max_model_len: int = 4096,
    **cfg: object,
) -> Scheduler:
    """A Scheduler on a tiny KV cache (default 11 blocks of 16 tokens, 10 usable)."""
    kv = KVCacheManager(num_gpu_blocks, block_size, caching, max_model_len)
    return Scheduler(SchedulerConfig(max_model_len=max_model_len, **cfg), kv)  # type: ignore[arg-type]


def req(idx: int, prompt: int, max_tokens: int = 1, **kw: object) -> Request:
    """A fresh request arriving at t=0."""
    return Request(idx, 0.0, prompt, max_tokens, **kw)  # type: ignore[arg-type]
