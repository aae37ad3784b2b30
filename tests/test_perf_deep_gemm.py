"""DeepGEMM's MoE as vLLM runs it on block-FP8 experts, by version (``perf.execution_path``
``DeepGemmRun``, ``perf.kernel_moe_deep_gemm.deep_gemm_curve``).

Every expected figure below is read in vLLM's source of the tag named or computed by hand
from the packed, measured block-FP8 GEMM table (AIConfigurator's vLLM 0.19.0 collection of
H200, whose Hopper block-FP8 linear layer runs DeepGEMM's ``fp8_gemm_nt`` from 32 rows).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.catalog.gpus import get_gpu
from servesim.catalog.hf_config import load_model
from servesim.config.engine import EngineConfig
from servesim.config.hardware import HardwareConfig, ParallelConfig
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.factory import build_step_model
from servesim.perf.kernel_curves import LogCurve
from servesim.perf.kernel_model import KernelPerfModel, kernel_perf_model
from servesim.perf.kernel_moe_deep_gemm import DEEP_GEMM_MEM_KERNELS, deep_gemm_rows
from servesim.perf.kernels import load_database
from servesim.perf.moe_backend import DeepGemmRun, deep_gemm_run

QWEN_FP8 = "Qwen/Qwen3-235B-A22B-FP8"  # hidden 4096, 128 experts of 1536, top-8, 94 layers


@pytest.mark.parametrize(
    ("version", "gpu", "every_step", "skips_padding", "chunk"),
    [
        pytest.param(
            "0.11.0",
            "H200",
            False,
            False,
            32768,
            id="utils/deep_gemm.py@v0.11.0: SM90 E8M0 only with VLLM_USE_DEEP_GEMM_E8M0_HOPPER (default 0)",
        ),
        pytest.param(
            "0.11.0", "B200", True, False, 32768, id="utils/deep_gemm.py@v0.11.0: SM100 E8M0 (default 1)"
        ),
        pytest.param(
            "0.11.2",
            "H200",
            True,
            False,
            32768,
            id="utils/deep_gemm.py@v0.11.2: one VLLM_USE_DEEP_GEMM_E8M0 (default 1) for SM90 too",
        ),
        pytest.param(
            "0.12.0",
            "H200",
            True,
            False,
            16384,
            id="deep_gemm_utils.py@v0.12.0: expert_ids torch.zeros; envs.py chunk 16*1024",
        ),
        pytest.param(
            "0.13.0", "H200", True, True, 16384, id="deep_gemm_utils.py@v0.13.0: expert_ids torch.full(-1)"
        ),
        pytest.param("0.14.0", "H100-SXM", True, True, 16384, id="deep_gemm_utils.py@v0.14.0: -1, skipped"),
    ],
)
def test_how_the_version_runs_deep_gemm(
    version: str, gpu: str, every_step: bool, skips_padding: bool, chunk: int
) -> None:
    assert deep_gemm_run(EngineConfig(version=version), get_gpu(gpu)) == DeepGemmRun(
        every_step, skips_padding, chunk
    )


@pytest.mark.parametrize(
    ("version", "gpu", "env", "every_step"),
    [
        pytest.param(
            "0.11.0",
            "H200",
            {"VLLM_USE_DEEP_GEMM_E8M0_HOPPER": "1"},
            True,
            id="utils/deep_gemm.py@v0.11.0: SM90 E8M0 with VLLM_USE_DEEP_GEMM_E8M0_HOPPER=1",
        ),
        pytest.param(
            "0.11.0",
            "B200",
            {"VLLM_USE_DEEP_GEMM_E8M0": "0"},
            False,
            id="utils/deep_gemm.py@v0.11.0: SM100 without E8M0",
        ),
        pytest.param(
            "0.11.0",
            "B200",
            {"VLLM_USE_DEEP_GEMM_E8M0_HOPPER": "1"},
            True,
            id="utils/deep_gemm.py@v0.11.0: the Hopper switch leaves SM100 as it is",
        ),
        pytest.param(
            "0.12.0",
            "H200",
            {"VLLM_USE_DEEP_GEMM_E8M0": "0"},
            False,
            id="utils/deep_gemm.py@v0.12.0: VLLM_USE_DEEP_GEMM_E8M0=0 on any GPU",
        ),
        pytest.param(
            "0.12.0",
            "H200",
            {"VLLM_USE_DEEP_GEMM_E8M0_HOPPER": "1"},
            True,
            id="v0.12.0 reads no Hopper switch: E8M0 by default",
        ),
    ],
)
def test_the_server_s_e8m0_switches(version: str, gpu: str, env: dict[str, str], every_step: bool) -> None:
    """``VLLM_USE_DEEP_GEMM_E8M0`` and (through v0.11.0) ``VLLM_USE_DEEP_GEMM_E8M0_HOPPER`` in
    ``engine.vllm_env`` decide whether DeepGEMM runs at every step (``is_deep_gemm_e8m0_used``)."""
    run = deep_gemm_run(EngineConfig(version=version, vllm_env=env), get_gpu(gpu))
    assert run.every_step is every_step


def test_without_e8m0_vllm_0_12_runs_triton_at_small_n() -> None:
    """v0.12.0 on SM90 with ``VLLM_USE_DEEP_GEMM_E8M0=0``: ``_valid_deep_gemm`` decides again,
    so at TP 4 (N = 384 <= 512) every step is Triton's, as v0.11.0's default is."""
    plain, off = _qwen("0.12.0", 4), _qwen("0.12.0", 4, env={"VLLM_USE_DEEP_GEMM_E8M0": "0"})
    assert plain.moe_backend == "deep_gemm" and off.moe_backend == "triton"
    assert _qwen("0.12.0", 2, env={"VLLM_USE_DEEP_GEMM_E8M0": "0"}).moe_backend == "deep_gemm"  # N = 768


def test_the_rows_deep_gemm_computes() -> None:
    """``compute_aligned_M`` (``deep_gemm_utils.py``): M_sum = round_up(M x topk + experts x
    127, 128), all computed through v0.12 (unwritten rows are expert 0's); from v0.13 the
    touched experts' rows padded to 128."""
    m = load_model(QWEN_FP8)
    v12, v14 = DeepGemmRun(True, False, 16384), DeepGemmRun(True, True, 16384)
    ts = np.array([1.0, 16.0, 8192.0, 20000.0])
    rows, _, _ = deep_gemm_rows(ts, m, 2, 1, v12)
    # 1 and 16 tokens: 8 + 16,256 and 128 + 16,256 rows, both rounded up to 16,384;
    # 8,192: 65,536 + 16,256 = 81,792 (a multiple of 128); 20,000 = a chunk of 16,384
    # (131,072 + 16,256 = 147,328) and one of 3,616 (28,928 + 16,256 = 45,184).
    assert rows.tolist() == [16384.0, 16384.0, 81792.0, 147328.0 + 45184.0]
    # With EP 8 each rank holds 16 experts: 128 + 16 x 127 = 2,160 -> 2,176 rows at 16 tokens.
    assert deep_gemm_rows(np.array([16.0]), m, 1, 8, v12)[0].tolist() == [2176.0]
    rows14, pairs, touched = deep_gemm_rows(np.array([16.0]), m, 2, 1, v14)
    want_touched = 128 * (1 - (1 - 8 / 128) ** 16)  # 82.4 experts for 128 routed rows
    assert math.isclose(float(touched[0]), want_touched, rel_tol=1e-12) and pairs[0] == 128.0
    assert math.isclose(float(rows14[0]), want_touched * 128, rel_tol=1e-12)


def _moe(perf: KernelPerfModel) -> LogCurve:
    """The step model's MoE layer curve (seconds vs the step's tokens)."""
    return next(curve for name, curve, _ in perf._token_ops if name == "moe")


def _qwen(version: str, tp: int, gpu: str = "H200", env: dict[str, str] | None = None) -> KernelPerfModel:
    """The step model of a vLLM ``version`` server of Qwen3-235B-A22B-FP8 (the factory's:
    the version's kernel tables, MoE kernel and DeepGEMM run; ``env``: ``engine.vllm_env``)."""
    model = build_step_model(
        load_model(QWEN_FP8),
        get_gpu(gpu),
        ParallelConfig(tensor_parallel_size=tp),
        HardwareConfig(gpu=gpu, perf_model="kernels"),
        engine=EngineConfig(version=version, vllm_env=env or {}),
    )
    assert isinstance(model, KernelPerfModel)
    return model


def test_vllm_0_12_times_deep_gemm_on_the_worst_case_rows_from_the_measured_gemm_table() -> None:
    """vLLM 0.12 on H200 at TP 2 (0.14.0 tables; its block-FP8 GEMMs timed the quantization
    unfused, so the linear layers and DeepGEMM read 0.19.0's): a decode step of 1 to 16 tokens
    runs DeepGEMM on 16,384 rows. By hand: the table's measured (16,384 x 4,096) @ (4,096 x
    1,536) gate/up GEMM and (16,384 x 768) @ (768 x 4,096) down GEMM, each at least its bytes
    at 0.8 of the HBM bandwidth; the memory-bound kernels' bytes; five kernel latencies."""
    perf = _qwen("0.12.0", 2)
    assert perf.moe_backend == "deep_gemm" and perf.deep_gemm == DeepGemmRun(True, False, 16384)
    assert "table gemm fp8_block of vLLM 0.19.0" in perf.sources["moe"]
    ms, ns, ks, lat = load_database("H200", "0.19.0").gemm("fp8_block")  # type: ignore[misc]
    i, j1, k1, j2, k2 = (
        int(np.flatnonzero(ms == 16384)[0]),
        int(np.flatnonzero(ns == 1536)[0]),
        int(np.flatnonzero(ks == 4096)[0]),
        int(np.flatnonzero(ns == 4096)[0]),
        int(np.flatnonzero(ks == 768)[0]),
    )
    g, eff = get_gpu("H200"), Efficiencies()
    bw = g.mem_bw * eff.linear_memory
    r, h, n = 16384.0, 4096, 768
    for tokens in (1.0, 8.0):
        pairs = tokens * 8
        touched = 128 * (1 - (1 - 8 / 128) ** tokens)
        up = max(float(lat[i, j1, k1]) * 1e-3, (r * h + touched * 2 * n * h + r * 2 * n * 2) / bw)
        down = max(float(lat[i, j2, k2]) * 1e-3, (r * n + touched * h * n + r * h * 2) / bw)
        moved = tokens * h + pairs * h + r * 2 * n * 2 + r * n * 2 + pairs * h * 2 + tokens * h * 2
        want = up + down + moved / bw + DEEP_GEMM_MEM_KERNELS * 3e-6
        assert math.isclose(_moe(perf).at(tokens), want, rel_tol=1e-9)


def test_deep_gemm_time_is_above_its_physics_floor() -> None:
    """Hand-computed floor at vLLM 0.12, TP 2, a 16-token decode step: the 16,384 rows' math,
    2 x 16,384 x 3 x 4,096 x 768 = 3.09e11 FLOPs, takes 156 us at H200's FP8 peak (1,979
    TFLOP/s); the 82.4 touched experts' weights, 82.4 x 3 x 4,096 x 768 B = 778 MB, take 162
    us at 4.8 TB/s. Every version and layout stays above both floors of its own rows."""
    g = get_gpu("H200")
    assert math.isclose(2 * 16384 * 3 * 4096 * 768 / g.flops_for("fp8"), 156.2e-6, rel_tol=1e-3)
    touched16 = 128 * (1 - (1 - 8 / 128) ** 16)
    assert math.isclose(touched16 * 3 * 4096 * 768 / g.mem_bw, 162.1e-6, rel_tol=1e-3)
    assert _moe(_qwen("0.12.0", 2)).at(16.0) >= 162.1e-6
    m = load_model(QWEN_FP8)
    ts = np.array([1.0, 16.0, 64.0, 512.0, 2048.0, 8192.0, 16384.0])
    for version, tp in (("0.12.0", 2), ("0.12.0", 4), ("0.14.0", 2), ("0.14.0", 4)):
        perf = _qwen(version, tp)
        n = m.moe_intermediate_size // tp
        rows, _, touched = deep_gemm_rows(ts, m, tp, 1, perf.deep_gemm)
        t = _moe(perf).at_many(ts)
        assert np.all(t >= 2 * rows * 3 * m.hidden_size * n / g.flops_for("fp8"))
        assert np.all(t >= touched * 3 * m.hidden_size * n / g.mem_bw)


def test_vllm_0_11_runs_triton_below_128_tokens_and_at_small_n() -> None:
    """v0.11.0 on SM90 (no E8M0): ``fused_experts`` takes DeepGEMM only where
    ``_valid_deep_gemm`` holds, M >= 128 and N > 512: at TP 2 (N = 768) steps below 128
    tokens are Triton's table, at TP 4 (N = 384) every step is."""
    gpu, tri = get_gpu("H200"), {}
    m = load_model(QWEN_FP8)
    for tp in (2, 4):
        tri[tp] = _moe(kernel_perf_model(m, gpu, "0.14.0", tp=tp, moe_backend="triton"))
    dg2, dg4 = _qwen("0.11.0", 2), _qwen("0.11.0", 4)
    assert dg2.moe_backend == "deep_gemm" and dg4.moe_backend == "triton"
    small = np.array([1.0, 16.0, 64.0, 127.0])
    assert np.allclose(_moe(dg2).at_many(small), tri[2].at_many(small), rtol=1e-12)
    assert _moe(dg2).at(4096.0) != tri[2].at(4096.0)
    both = np.array([1.0, 16.0, 4096.0])
    assert np.allclose(_moe(dg4).at_many(both), tri[4].at_many(both), rtol=1e-12)


def test_the_gemm_table_deep_gemm_is_timed_from_is_the_measured_deep_gemm_one() -> None:
    """Provenance: Hopper's DeepGEMM MoE reads the packed vLLM 0.19.0 block-FP8 GEMM table,
    AIConfigurator's collection of vLLM's block-FP8 linear layer (DeepGEMM's ``fp8_gemm_nt``
    from 32 rows on SM90, ``W8A8BlockFp8LinearOp._run_flashinfer``, v0.19.0
    ``quantization/utils/fp8_utils.py``), not the 0.14.0 one, whose quantization is unfused."""
    db = load_database("H200", "0.19.0")
    assert db.version == "0.19.0" and db.gemm("fp8_block") is not None
    assert "kernels/h200_sxm/gemm/vllm/0.19.0/gemm_perf.parquet" in db.meta["tables"]
    source = _qwen("0.12.0", 4).sources["moe"]
    assert source.startswith("DeepGEMM MoE at every step: table gemm fp8_block of vLLM 0.19.0 (")
    assert "0.14.0's fp8_block table spends" in source and "worst-case" in source
