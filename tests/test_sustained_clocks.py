"""Sustained clocks (``perf.sustained``): the bundled curves, their packing, and the step time
a long prefill takes once the GPU holds its power limit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import load_script

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.perf.base import BatchStats
from servesim.perf.kernel_model import KernelPerfModel
from servesim.perf.pipelined import MicroBatchShare
from servesim.perf.sustained import sustained_clocks

ROOT = Path(__file__).resolve().parents[1]


def _prefill(tokens: int, prompts: int = 1, decodes: int = 0) -> BatchStats:
    return BatchStats(
        num_prefill_tokens=tokens,
        prefill_attn_work=prompts * (tokens // prompts) ** 2 / 2,
        num_prefill_reqs=prompts,
        num_decode_reqs=decodes,
        sum_decode_context=decodes * 1000,
    )


@pytest.mark.parametrize("gpu", ["B200", "H200", "GB200"])
def test_the_measured_curves_rise_from_one_with_utilization(gpu):
    c = sustained_clocks(gpu)
    assert c is not None
    assert list(c.util) == sorted(c.util) and list(c.ratio) == sorted(c.ratio)
    assert c.ratio[0] == 1.0 and c.ratio[1] < 1.01  # a third of the peak: not throttled
    assert 1.15 < c.ratio[-1] < 1.4  # 0.85 of the peak: 15-40% slower sustained
    assert 0.01 <= c.onset_s <= 0.1


@pytest.mark.parametrize("gpu", ["H100-SXM", "B300", "A100-80GB", "L40S"])
def test_gpus_without_a_measured_pair_keep_full_clocks(gpu):
    assert sustained_clocks(gpu) is None
    pm = KernelPerfModel(load_model("meta-llama/Llama-3.1-8B"), get_gpu(gpu))
    assert pm.step.hot is None and "sustained_clocks" not in pm.breakdown(_prefill(8192))


def test_slowed_reads_the_curve_at_each_points_own_utilization():
    c = sustained_clocks("H200")
    assert c is not None
    peak = 1e15
    secs = np.array([1e-3, 1e-3, 1e-3, 1e-3])
    util = np.array([0.1, c.util[3], (c.util[4] + c.util[5]) / 2, 2.0])  # below, on, between, above
    got = c.slowed(secs, util * peak * secs, peak)
    assert got[0] == pytest.approx(1e-3)
    assert got[1] == pytest.approx(1e-3 * c.ratio[3])
    assert got[2] == pytest.approx(1e-3 * (c.ratio[4] + c.ratio[5]) / 2)
    assert got[3] == pytest.approx(1e-3 * c.ratio[-1])


@pytest.fixture(scope="module")
def h200() -> KernelPerfModel:
    return KernelPerfModel(load_model("meta-llama/Llama-3.1-70B-Instruct"), get_gpu("H200"))


def test_a_long_prefill_runs_past_the_onset_at_sustained_clocks(h200):
    step, onset = h200.step, h200.step.onset_s
    assert step.hot is not None and onset == sustained_clocks("H200").onset_s
    st = _prefill(8192)
    cold, hot = step.gpu_time(st), step.hot.gpu_time(st)
    assert cold > 10 * onset  # an 8k prompt on one H200: over half a second
    assert 1.05 < hot / cold < 1.25  # its GEMMs and attention near the peak, throttled
    want = cold + (cold - onset) / cold * (hot - cold)
    assert h200.batch_time(st) == pytest.approx(want, rel=1e-12)
    parts = h200.breakdown(st)
    assert parts["sustained_clocks"] == pytest.approx(want - cold, rel=1e-9)
    assert sum(parts.values()) == pytest.approx(want, rel=1e-9)
    # a fractional share (a pipeline micro-batch's, the interpreted path) agrees with the step's
    frac = MicroBatchShare(8192.0, 8192.0**2 / 2, 1.0, 0.0, 0.0, 0.0)
    assert KernelPerfModel.batch_time(h200, frac) == pytest.approx(want, rel=1e-9)


def test_short_steps_and_decodes_keep_their_measured_times(h200):
    cool = KernelPerfModel(h200.model, h200.gpu, sustained=False)
    assert cool.step.hot is None
    short = _prefill(128)
    assert h200.step.gpu_time(short) < h200.step.onset_s
    for st in (short, BatchStats(num_decode_reqs=64, sum_decode_context=64 * 2000), _prefill(8192)):
        assert cool.batch_time(st) == pytest.approx(h200.step.gpu_time(st), rel=1e-12)
    assert h200.batch_time(short) == cool.batch_time(short)
    # memory-bound kernels are not slowed: one token's GEMMs at sustained clocks as measured
    ops = {n: c for n, c, _ in h200._token_ops}
    assert {"gemm_qkv", "gemm_gate_up", "gemm_down"} <= set(h200.hot)
    for name, curve in h200.hot.items():
        cold = ops.get(name) or dict((n, c) for n, c, _ in h200._req_ops)[name]
        assert curve.at(1.0) == pytest.approx(cold.at(1.0), rel=1e-12), name
        assert curve.at(8192.0) >= cold.at(8192.0)


def test_the_option_turns_it_off():
    from servesim.config import Scenario
    from servesim.deployment import resolve_deployment

    base = {"model": {"name": "meta-llama/Llama-3.1-8B"}, "hardware": {"gpu": "B200"}}
    on = resolve_deployment(Scenario.model_validate(base))
    off = resolve_deployment(
        Scenario.model_validate({**base, "hardware": {"gpu": "B200", "sustained_clocks": False}})
    )
    st = _prefill(16384)
    assert on.perf.batch_time(st) > off.perf.batch_time(st)


# ---------------------------------------------------------------- the packer


def _tables(tmp_path: Path, tool) -> None:
    """A burst and a sustained bf16 GEMM table of one GPU: bursts short enough to run at full
    clocks measure ratio 0.97 below a third of the peak and 1.15 at 0.65; longer bursts at
    0.65 are throttled themselves after 40 ms, so their ratio falls as the packer models it."""
    peak = tool.GPUS["b200_sxm"][1]
    burst, sus = [], []
    n = k = 4096
    for i in range(60):
        m = 16 + i
        lat = 2.0 * m * n * k / (0.2 * peak)  # seconds, at 20% of the peak
        burst.append((m, n, k, lat * 1e3))
        sus.append((m, n, k, lat * 0.97e3))
        m2 = 1000 + i
        lat = 2.0 * m2 * n * k / (0.65 * peak)
        burst.append((m2, n, k, lat * 1e3))
        sus.append((m2, n, k, lat * 1.15e3))
    for i in range(60):  # long bursts at 65% of the peak
        d = 0.002 + 0.0015 * i  # seconds per iteration of six GEMMs
        m = int(d / 6 * 0.65 * peak / (2.0 * 8192 * 8192))
        lat = 2.0 * m * 8192 * 8192 / (0.65 * peak)
        part = float(np.clip((9 * 6 * lat - 0.04) / (6 * 6 * lat), 0, 1))
        burst.append((m, 8192, 8192, lat * 1e3))
        sus.append((m, 8192, 8192, lat * 1.15 / (1 + 0.15 * part) * 1e3))
    for version, rows in ((tool.BURST, burst), (tool.SUSTAINED, sus)):
        path = tmp_path / tool.TABLE.format(gpu="b200_sxm", version=version)
        path.parent.mkdir(parents=True)
        pq.write_table(
            pa.table(
                {
                    "gemm_dtype": ["bfloat16"] * len(rows),
                    "m": [r[0] for r in rows],
                    "n": [r[1] for r in rows],
                    "k": [r[2] for r in rows],
                    "latency": [r[3] for r in rows],
                }
            ),
            path,
        )
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "t"], check=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_packer_recovers_the_ratio_and_the_onset(tmp_path, monkeypatch):
    tool = load_script(ROOT / "tools" / "pack_sustained_clocks.py")
    monkeypatch.setattr(tool, "GPUS", {"b200_sxm": tool.GPUS["b200_sxm"]})
    _tables(tmp_path, tool)
    out = tool.pack(tmp_path, "HEAD")
    g = out["gpus"]["B200"]
    assert g["util"] == [0.3, 0.65] and g["ratio"] == [1.0, 1.15]  # 0.97 at low utilization: not below 1
    assert g["onset_s"] == pytest.approx(0.04, abs=0.006)
    assert g["own_median_abs_err"] == pytest.approx(0.0, abs=1e-9)
    assert len(out["commit"]) == 40 and out["burst_version"] == "0.19.0"
