"""Profiled perf model: measured operator tables replace the roofline's linear layers where
they cover the model, GPU and TP degree, and nothing changes outside them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from servesim.calibration.measurements import read_operator_profiles
from servesim.catalog import get_gpu, load_model
from servesim.config import ParallelConfig
from servesim.perf.base import BatchStats
from servesim.perf.operator_tables import OPERATOR_KERNELS, OperatorTable
from servesim.perf.profiled import HardwareProfile, ProfiledPerfModel, same_shape
from servesim.perf.roofline import Efficiencies, RooflinePerfModel

DATA = Path(__file__).parent / "fixtures" / "measurements" / "measurements"
EFF = Efficiencies(kernel_overhead_s=3e-6)


def _roofline_table(model_name: str, gpu: str, tokens: list[int]) -> OperatorTable:
    """A table whose 'measurements' are the roofline's own per-layer class times."""
    m = load_model(model_name)
    one = RooflinePerfModel(dataclasses.replace(m, num_layers=1), get_gpu(gpu), eff=EFF)
    emb = 6 * m.hidden_size * 2 / (one.gpu.mem_bw * EFF.elementwise_memory)
    times: dict[str, list[float]] = {c: [] for c in OPERATOR_KERNELS}
    for t in tokens:
        b = one.breakdown(BatchStats(num_prefill_tokens=t, num_prefill_reqs=1))
        for c in times:
            times[c].append(
                b[c] - (emb * t if c == "elementwise" else 0) + OPERATOR_KERNELS[c] * EFF.kernel_overhead_s
            )
    return OperatorTable(
        get_gpu(gpu).name,
        model_name,
        1,
        dataclasses.replace(m, num_layers=1),
        np.asarray(tokens),
        {c: np.asarray(v) for c, v in times.items()},
    )


def test_a_table_of_roofline_times_changes_nothing() -> None:
    m, g = load_model("Llama-3.1-8B"), get_gpu("H100")
    roof = RooflinePerfModel(m, g, eff=EFF)
    pm = ProfiledPerfModel(roof, _roofline_table("Llama-3.1-8B", "H100", [1, 16, 128, 1024]))
    for s in (
        BatchStats(num_decode_reqs=16, sum_decode_context=16 * 500),
        BatchStats(
            num_prefill_tokens=1000,
            prefill_attn_work=5e5,
            num_prefill_reqs=1,
            num_decode_reqs=24,
            sum_decode_context=24000,
        ),
    ):
        assert pm.batch_time(s) == pytest.approx(roof.batch_time(s), rel=1e-9)


def test_measured_table_at_grid_points_and_fallback_outside() -> None:
    tables = read_operator_profiles(DATA / "vidur_profiling", ("h100",))
    table = next(t for t in tables if t.model.endswith("Llama-2-7b-hf") and t.tp == 1)
    m, g = load_model("Llama-2-7B"), get_gpu("H100")
    roof = RooflinePerfModel(m, g, eff=EFF)
    pm = ProfiledPerfModel(roof, table)
    one = RooflinePerfModel(dataclasses.replace(m, num_layers=1), g, eff=EFF)
    emb = 6 * m.hidden_size * 2 / (g.mem_bw * EFF.elementwise_memory)
    for i in (0, 5, len(table.num_tokens) - 1):
        t = int(table.num_tokens[i])
        s = BatchStats(num_prefill_tokens=t, prefill_attn_work=t * t / 2, num_prefill_reqs=1)
        b = one.breakdown(BatchStats(num_prefill_tokens=t, num_prefill_reqs=1))
        roof_layer = b["proj"] + b["mlp"] + b["elementwise"] - emb * t + 9 * EFF.kernel_overhead_s
        meas_layer = sum(v[i] for v in table.times_s.values())
        assert pm.batch_time(s) == pytest.approx(
            roof.batch_time(s) + m.num_layers * (meas_layer - roof_layer), rel=1e-9
        )
    # Between grid points: between the neighbours' deltas. Outside: the roofline itself.
    t0, t1 = int(table.num_tokens[10]), int(table.num_tokens[11])
    lo, hi = sorted((pm.delta(t0), pm.delta(t1)))
    assert lo <= pm.delta((t0 + t1) / 2) <= hi
    big = BatchStats(num_prefill_tokens=10000, prefill_attn_work=5e7, num_prefill_reqs=1)
    assert pm.batch_time(big) == roof.batch_time(big)


def test_profile_uses_a_table_only_where_it_covers_the_case() -> None:
    tables = read_operator_profiles(DATA / "vidur_profiling", ("h100",))
    prof = HardwareProfile("h100", EFF, "H100-SXM", tables=tables)
    m7 = load_model("Llama-2-7B")
    assert same_shape(tables[0].shape, m7) or same_shape(tables[-1].shape, m7)
    assert isinstance(prof.perf_model(m7, get_gpu("H100"), ParallelConfig()), ProfiledPerfModel)
    assert isinstance(prof.perf_model(m7, get_gpu("A100"), ParallelConfig()), RooflinePerfModel)
    assert isinstance(
        prof.perf_model(load_model("Llama-3.1-8B"), get_gpu("H100"), ParallelConfig()), RooflinePerfModel
    )
    assert isinstance(
        prof.perf_model(m7, get_gpu("H100"), ParallelConfig(pipeline_parallel_size=2)), RooflinePerfModel
    )


def test_profile_with_tables_round_trips(tmp_path: Path) -> None:
    tables = read_operator_profiles(DATA / "vidur_profiling", ("h100",))[:2]
    HardwareProfile("h100", EFF, "H100-SXM", tables=tables).save(tmp_path / "p.json")
    back = HardwareProfile.load(tmp_path / "p.json")
    assert [(t.model, t.tp) for t in back.tables] == [(t.model, t.tp) for t in tables]
    for a, b in zip(back.tables, tables):
        assert same_shape(a.shape, b.shape)
        np.testing.assert_array_equal(a.num_tokens, b.num_tokens)
        for c in b.times_s:
            np.testing.assert_allclose(a.times_s[c], b.times_s[c], rtol=1e-5)
