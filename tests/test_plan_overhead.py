"""What a plan's candidates no longer redo: a step model built from equal inputs is reused
within a process (``perf.factory.build_step_model``), and the result cache commits without
waiting for the disk (SQLite's write-ahead log)."""

from __future__ import annotations

import sqlite3

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config import EngineConfig, HardwareConfig, ParallelConfig, resolve_engine
from servesim.perf.factory import build_step_model
from servesim.planner.cache import ResultCache


def test_a_step_model_from_equal_inputs_is_reused() -> None:
    gpu = get_gpu("H100-SXM")
    engine = resolve_engine(EngineConfig(), gpu.mem_bytes, gpu.name, 8192)
    a = build_step_model(load_model("Llama-3.1-8B"), gpu, ParallelConfig(), HardwareConfig(), engine=engine)
    # Equal inputs, built anew (another candidate's deployment): the same model.
    b = build_step_model(
        load_model("Llama-3.1-8B"), get_gpu("H100-SXM"), ParallelConfig(), HardwareConfig(), engine=engine
    )
    assert b is a
    # Any field that differs gives a model of its own.
    tp2 = build_step_model(
        load_model("Llama-3.1-8B"),
        gpu,
        ParallelConfig(tensor_parallel_size=2),
        HardwareConfig(),
        engine=engine,
    )
    eager = build_step_model(
        load_model("Llama-3.1-8B"),
        gpu,
        ParallelConfig(),
        HardwareConfig(),
        engine=engine.model_copy(update={"enforce_eager": True}),
    )
    roofline = build_step_model(
        load_model("Llama-3.1-8B"),
        gpu,
        ParallelConfig(),
        HardwareConfig(perf_model="roofline"),
        engine=engine,
    )
    assert len({id(m) for m in (a, tp2, eager, roofline)}) == 4
    assert tp2.tp == 2 and type(roofline).__name__ == "RooflinePerfModel"


def test_the_result_cache_is_in_wal_mode_and_keeps_what_it_committed(tmp_path) -> None:
    cache = ResultCache(tmp_path)
    cache.put("k", "one", {"x": 1}, None, 0.5)
    # Another connection (a resumed plan) sees the committed row before this one closes.
    other = sqlite3.connect(tmp_path / ResultCache.FILE)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT label, summary FROM results").fetchall() == [("one", '{"x": 1}')]
    other.close()
    cache.close()
    assert ResultCache(tmp_path).get(["k"])["k"]["summary"] == {"x": 1}
