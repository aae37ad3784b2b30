"""DeepGEMM's fused MoE as each vLLM version runs it (``engine.moe_backend: deep_gemm``,
block-FP8 experts): timed from the GPU's dense block-FP8 GEMM table at the rows vLLM computes
(``deep_gemm_curve``), or, without such a table, Triton's block-FP8 MoE table with DeepGEMM's
padded rows (``padded_triton_curve``); ``perf.kernel_moe.moe_curve`` picks between them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import Efficiencies
from servesim.perf.kernel_curves import LogCurve, roof_time
from servesim.perf.moe_backend import DeepGemmRun, deep_gemm_run

#: DeepGEMM's grouped GEMM (``TritonOrDeepGemmExperts``) runs steps of at least this many tokens
#: (vLLM's ``_valid_deep_gemm``: M >= 128), each expert's rows padded to a multiple of it.
DEEP_GEMM_BLOCK = 128
#: How DeepGEMM runs where no engine says (``perf.moe_backend.deep_gemm_run`` of the default
#: vLLM version on Hopper).
DEFAULT_DEEP_GEMM_RUN = deep_gemm_run(None, "H200")
#: Seconds of one dense block-FP8 GEMM, (m x k) @ (k x n), at every m of an array: the served
#: block-FP8 GEMM table (``KernelGemms._gemm_table``), read as the linear layers read it.
GemmFn = Callable[[np.ndarray, int, int], np.ndarray]
#: The memory-bound kernels of DeepGEMM's MoE besides its two GEMMs (vLLM's ``DeepGemmExperts``,
#: ``fused_moe/deep_gemm_moe.py``): ``count_expert_num_tokens``, the two ``ep_scatter`` kernels
#: (``deepgemm_moe_permute``), the gated activation and ``ep_gather`` (the unpermute and sum).
DEEP_GEMM_MEM_KERNELS = 5


def deep_gemm_rows(
    ts: np.ndarray, model: ModelSpec, moe_tp: int, ep: int, run: DeepGemmRun
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows DeepGEMM computes, routed rows, touched experts) of one rank at ``ts`` tokens a
    step (``DeepGemmRun``): from vLLM 0.13 the touched experts' rows, each expert's padded to
    a multiple of 128 (the routed rows spread evenly over the touched experts: a
    simplification); before, every chunk's ``round_up(M x topk + local_experts x 127, 128)``,
    the routed rows of every rank counted (with EP the other ranks' pairs are unwritten rows
    too). ``moe_tp`` is unused by the row count, kept for the caller's symmetry."""
    del moe_tp
    m, b = model, float(DEEP_GEMM_BLOCK)
    experts, k = m.num_experts / ep, m.num_experts_per_tok
    pairs = ts * k / ep
    touched = np.maximum(experts * (1.0 - (1.0 - k / m.num_experts) ** ts), 1.0)
    if run.skips_padding:
        return touched * b * np.ceil(pairs / touched / b), pairs, touched
    c = float(run.chunk_tokens)
    full, rest = np.floor(ts / c), ts - np.floor(ts / c) * c

    def worst(tokens: np.ndarray | float) -> np.ndarray:
        return b * np.ceil((np.asarray(tokens) * k + experts * (b - 1.0)) / b)

    rows = full * worst(c) + np.where(rest > 0, worst(rest), 0.0)
    return rows, pairs, touched


def deep_gemm_curve(
    triton: LogCurve,
    model: ModelSpec,
    gpu: GpuSpec,
    eff: Efficiencies,
    moe_tp: int,
    ep: int,
    run: DeepGemmRun,
    gemm: GemmFn,
    mem_op_s: float = 0.0,
) -> LogCurve:
    """One MoE layer run by DeepGEMM's MoE (vLLM's ``DeepGemmExperts``: permute, grouped GEMM
    of the gate and up projections, gated activation, grouped GEMM of the down projection,
    unpermute and sum; ``fused_moe/deep_gemm_moe.py`` of vLLM 0.11-0.19) on the ``Triton``
    curve's token axis; steps DeepGEMM does not run (``run.every_step`` false, below 128
    tokens) keep the Triton curve.

    The grouped GEMM is timed from the dense block-FP8 GEMM table ``gemm`` (on Hopper vLLM
    0.19.0's, which times DeepGEMM's ``fp8_gemm_nt`` from 32 rows, ``W8A8BlockFp8LinearOp``)
    at the rows it computes (``deep_gemm_rows``). ``m_grouped_fp8_gemm_nt_contiguous`` runs
    the same SM90 kernel as ``fp8_gemm_nt`` tile for tile on the concatenated rows (each
    128-row block multiplies its own expert's weights: the layout's alignment, 128, is the
    kernel's M block), so its math at R rows is the dense GEMM's at R rows; what differs is
    that each touched expert's weights are read from HBM rather than one matrix from L2.
    The kernel's loads overlap its math (TMA pipeline), so a grouped GEMM takes the longer
    of the dense table's time at R rows and its own bytes (R x K FP8 activations, touched x
    N x K FP8 weights, R x N 16-bit outputs) at the HBM bandwidth (``linear_memory`` of
    it): at Qwen3-235B's TP 2 decode (16,384 rows, 82 experts touched) the table's 0.30 ms
    for the gate/up GEMM against 0.16 ms of bytes, the table. The activation, permute and
    unpermute kernels are
    memory-bound: their bytes (the permuted FP8 activations written, the gate/up output
    read and the activation written in 16 bits, the down output read and the step's output
    written in 16 bits) at the HBM bandwidth, plus ``mem_op_s`` each of
    ``DEEP_GEMM_MEM_KERNELS``. Simplified: the table's GEMM times the quantization of its
    own input, so the first GEMM's counts a quantization of R rows where vLLM quantizes the
    step's tokens before the permute; the tables' DeepGEMM build is vLLM 0.19's."""
    m = model
    ts = np.exp(triton.lx)
    rows, pairs, touched = deep_gemm_rows(ts, m, moe_tp, ep, run)
    h, n = m.hidden_size, m.moe_intermediate_size // moe_tp
    up = (2 if m.mlp_gated else 1) * n
    bw = gpu.mem_bw

    def grouped(n_out: int, k_in: int) -> np.ndarray:
        streamed = (rows * k_in + touched * n_out * k_in + rows * n_out * 2.0) / (bw * eff.linear_memory)
        return np.maximum(np.asarray(gemm(rows, n_out, k_in)), streamed)

    moved = ts * h + pairs * h + rows * up * 2.0 + rows * n * 2.0 + pairs * h * 2.0 + ts * h * 2.0
    t = grouped(up, h) + grouped(h, n) + moved / (bw * eff.linear_memory) + DEEP_GEMM_MEM_KERNELS * mem_op_s
    on = np.ones_like(ts, dtype=bool) if run.every_step else ts >= DEEP_GEMM_BLOCK
    return LogCurve(ts, np.where(on, np.log(t), triton.ly))


def padded_triton_curve(
    curve: LogCurve, model: ModelSpec, gpu: GpuSpec, eff: Efficiencies, moe_tp: int, ep: int
) -> LogCurve:
    """Triton's block-FP8 MoE curve carried to DeepGEMM's grouped GEMM where the GPU has no
    block-FP8 GEMM table to time it from (``deep_gemm_curve``): steps of at least
    ``DEEP_GEMM_BLOCK`` tokens take every touched expert's rows padded up to a multiple of
    128; the math grows by the padded over the real rows and the weights are read as before,
    so the curve is scaled there by the ratio of the two rooflines (the routed rows spread
    evenly over the touched experts: a simplification). Smaller steps run Triton's kernel,
    as the table."""
    m = model
    E, k = m.num_experts / ep, m.num_experts_per_tok
    per_expert = m.expert_params(moe_tp)
    peak = gpu.flops_for("fp8")
    ts = np.exp(curve.lx)
    pairs = ts * k / ep
    touched = np.maximum(E * (1.0 - (1.0 - k / m.num_experts) ** ts), 1.0)
    padded = touched * DEEP_GEMM_BLOCK * np.ceil(pairs / touched / DEEP_GEMM_BLOCK)
    nbytes = per_expert * m.expert_weight_bytes * touched + pairs * m.hidden_size * 2.0 * 4
    real = roof_time(
        2.0 * per_expert * pairs, nbytes, peak, gpu.mem_bw, eff.linear_compute, eff.linear_memory
    )
    pad = roof_time(
        2.0 * per_expert * padded, nbytes, peak, gpu.mem_bw, eff.linear_compute, eff.linear_memory
    )
    scale = np.where(ts >= DEEP_GEMM_BLOCK, pad / real, 1.0)
    return LogCurve(ts, curve.ly + np.log(scale))
