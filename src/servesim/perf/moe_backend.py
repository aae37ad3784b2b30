"""Which fused-MoE kernel a vLLM version picks for the routed experts, and how it runs
DeepGEMM's (``perf.execution_path`` reports the choice; the rules were read in the same
release tags, listed there):

- MXFP4 experts (``quantization/mxfp4.py`` ``get_mxfp4_backend``; from v0.19.0
  ``fused_moe/oracle/mxfp4.py`` ``select_mxfp4_moe_backend``, the same outcomes): on SM100
  with FlashInfer, FlashInfer's TRTLLM-gen MoE with 16-bit activations
  (``SM100_FI_MXFP4_BF16``), with MXFP8 ones under ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``,
  FlashInfer's CUTLASS MXFP4 x MXFP8 MoE under ``..._MXFP8_CUTLASS=1``; SM100 means capability
  10.0 exactly through v0.12.x (B300, 10.3, falls through) and the 10.x family from v0.13.0.
  On SM90 FlashInfer's CUTLASS MXFP4 x BF16 MoE only under
  ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1``. Otherwise Marlin where ``triton_kernels`` cannot
  run or under ``VLLM_MXFP4_USE_MARLIN=1`` (read from v0.11.2; v0.10.2-v0.11.0 ignore it
  there), else Triton's ``matmul_ogs`` (``triton_kernels``). ``triton_kernels`` is an optional
  package up to v0.11.x (neither the wheel's requirements nor the Docker image install it:
  Marlin by default, ``engine.moe_backend: triton`` for a server that installed it) and is
  built into the wheel from v0.12.0 (``vllm.third_party.triton_kernels``), where it runs on
  SM 9.0 to 10.x only.
- FP8 experts (``quantization/fp8.py`` ``Fp8MoEMethod`` / ``get_fp8_moe_backend`` through
  v0.13.x; ``fused_moe/oracle/fp8.py`` ``select_fp8_moe_backend`` from v0.14.0): below SM89
  Marlin (FP8 weight-only). v0.10.2: DeepGEMM off by default (``VLLM_USE_DEEP_GEMM=0``);
  block-FP8 on SM100 vLLM's CUTLASS block-scaled grouped GEMM, else Triton's
  ``fused_experts``. v0.11.0-v0.14.x: FlashInfer only under ``VLLM_USE_FLASHINFER_MOE_FP8=1``;
  block-FP8 on SM90/SM100 DeepGEMM (``VLLM_USE_DEEP_GEMM`` on by default from v0.11.0; the
  image installs it), which from v0.12.0 is off by default at a MoE TP size of 8 or more unless
  ``VLLM_MOE_USE_DEEP_GEMM`` is set. Where DeepGEMM runs, and on which rows (``DeepGemmRun``,
  ``deep_gemm_run``): with E8M0 scales (SM100; SM90 from v0.11.1) at every step, so decode
  steps too; without them (SM90, v0.11.0) only steps of 128 tokens or more and only where
  the rank's expert intermediate size is above 512 (``_valid_deep_gemm``; Qwen3-235B's 384
  at TP 4 runs Triton at every step). Through v0.12.x DeepGEMM computes the worst-case
  ``M x topk + experts x 127`` rows (the unwritten ones as expert 0's), from v0.13.0 only
  the touched experts' rows padded to 128. Without DeepGEMM, SM100 block-FP8 takes the CUTLASS
  block-scaled grouped GEMM through v0.13.x and Triton from v0.14.0; the rest Triton. From
  v0.16.0 a priority list: FlashInfer TRTLLM-gen (SM100, block and per-tensor), FlashInfer
  CUTLASS (SM90 block and per-tensor, SM100 per-tensor), DeepGEMM, Triton;
  ``VLLM_USE_FLASHINFER_MOE_FP8=0`` drops the FlashInfer ones, ``VLLM_USE_DEEP_GEMM=0`` or
  ``VLLM_MOE_USE_DEEP_GEMM=0`` DeepGEMM. From v0.17.0 block-FP8 on SM90 puts Triton first
  for TP and FlashInfer CUTLASS first for EP. Simplified: the TRTLLM-gen kernel's routing
  support (which routers its monolithic variant takes) is not checked.
- int4 experts (GPTQ, AWQ, compressed-tensors W4A16): Marlin (``GPTQMarlinMoEMethod``,
  ``CompressedTensorsWNA16MarlinMoEMethod``) on SM80 and up.
- NVFP4 experts: FlashInfer on SM100, Marlin (FP4 weight-only) below; reported, timed from the
  packed ``nvfp4`` tables as before (simplified: which FlashInfer kernel is not resolved).
- 16-bit experts: Triton's ``fused_experts``. Simplified: the unquantized oracle's FlashInfer
  choices of v0.16.0 on are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.config.engine import EngineConfig
from servesim.config.vllm_version import version_tuple
from servesim.perf.vllm_rules import (
    V0_11_0,
    V0_11_1,
    V0_12_0,
    V0_13_0,
    V0_14_0,
    V0_16_0,
    V0_17_0,
    Choice,
    flag,
    sm_of,
)

#: DeepGEMM's grouped GEMM runs a step from this many tokens (``_valid_deep_gemm``: M >= 128) where
#: its activations' scales are not E8M0 (``DeepGemmRun.every_step``), and only where the rank's
#: expert intermediate size is above ``DEEP_GEMM_MIN_N`` (``_valid_deep_gemm``: ``N <= 512`` falls back
#: to Triton) and it and the hidden size are multiples of 128.
DEEP_GEMM_MIN_TOKENS = 128
DEEP_GEMM_MIN_N = 512
DEEP_GEMM_ALIGN = 128


@dataclass(frozen=True)
class DeepGemmRun:
    """How vLLM runs DeepGEMM's contiguous grouped GEMM on a step's routed rows, by version
    (``deep_gemm_run``; the step-time model reads it, ``perf.kernel_moe_deep_gemm.deep_gemm_curve``).

    ``every_step``: the GEMMs use E8M0 (power-of-two) scales, and then
    ``fused_experts(allow_deep_gemm=True)`` (``fused_moe/fused_moe.py``, through v0.13.x) and
    ``TritonOrDeepGemmExperts._select_experts_impl`` (``triton_deep_gemm_moe.py``) take
    DeepGEMM at every step (``is_deep_gemm_e8m0_used() or _valid_deep_gemm(...)``); without
    them only steps of at least ``DEEP_GEMM_MIN_TOKENS`` tokens, Triton below. E8M0 is on by
    default on SM100 from v0.10.2, on SM90 from v0.11.1 (``VLLM_USE_DEEP_GEMM_E8M0``, default
    1, ``utils/deep_gemm.py is_deep_gemm_e8m0_used``; v0.10.2-v0.11.0 read
    ``VLLM_USE_DEEP_GEMM_E8M0_HOPPER``, default 0, on SM90).

    ``skips_padding``: the rows DeepGEMM computes. ``deepgemm_moe_permute``
    (``fused_moe/deep_gemm_utils.py``) sizes the permuted activations for the worst case,
    ``M_sum = round_up(M x topk + local_experts x 127, 128)`` (``compute_aligned_M``; the
    tensor-parallel path has no per-expert counts on the host), and writes each expert's
    rows padded to a multiple of 128. Through v0.12.x the expert index of the unwritten
    rows is initialized to 0 (``torch.zeros``): DeepGEMM computes all ``M_sum`` rows, the
    unwritten ones as expert 0's. From v0.13.0 it is -1 (``torch.full(..., -1)``), which
    DeepGEMM's scheduler skips: only the touched experts' padded rows are computed.

    ``chunk_tokens``: ``VLLM_FUSED_MOE_CHUNK_SIZE``, the tokens of one pass of the modular
    kernel (32,768 through v0.11.x, 16,384 from v0.12.0, ``envs.py``); a larger step runs
    in chunks, each with its own ``M_sum``.
    """

    every_step: bool
    skips_padding: bool
    chunk_tokens: int


def deep_gemm_run(engine: EngineConfig | None, gpu: GpuSpec | str) -> DeepGemmRun:
    """``DeepGemmRun`` of ``engine.version`` on ``gpu`` (vLLM's defaults and ``engine.vllm_env``;
    None: the default version's)."""
    eng = engine if engine is not None else EngineConfig()
    v = version_tuple(eng.version)
    every = e8m0_used(v, sm_of(gpu), dict(eng.vllm_env))
    return DeepGemmRun(
        every_step=every, skips_padding=v >= V0_13_0, chunk_tokens=16384 if v >= V0_12_0 else 32768
    )


def e8m0_used(v: tuple[int, ...], sm: int | None, env: dict[str, str]) -> bool:
    """Whether DeepGEMM's GEMMs use E8M0 scales (``utils/deep_gemm.py``
    ``is_deep_gemm_e8m0_used``). From v0.11.1 on any GPU DeepGEMM runs on, unless
    ``VLLM_USE_DEEP_GEMM_E8M0=0``; through v0.11.0 on SM100 exactly
    (``is_device_capability(100)``) with ``VLLM_USE_DEEP_GEMM_E8M0`` (default 1) and on SM90
    with ``VLLM_USE_DEEP_GEMM_E8M0_HOPPER`` (default 0, v0.10.2-v0.11.0)."""
    if sm is None:
        return False
    e8m0 = flag(env, "VLLM_USE_DEEP_GEMM_E8M0") is not False
    if v >= V0_11_1:
        return e8m0
    return (sm == 100 and e8m0) or (sm == 90 and flag(env, "VLLM_USE_DEEP_GEMM_E8M0_HOPPER") is True)


def _mxfp4(v: tuple[int, ...], sm: int, env: dict[str, str]) -> Choice:
    src = (
        "fused_moe/oracle/mxfp4.py select_mxfp4_moe_backend"
        if v >= (0, 19, 0)
        else "quantization/mxfp4.py get_mxfp4_backend"
    )
    sm100 = 100 <= sm < 110 if v >= V0_13_0 else sm == 100
    fam = "SM 10.x (v0.13.0+)" if v >= V0_13_0 else "SM 10.0 exactly (through v0.12.x)"
    if sm == 90 and flag(env, "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16"):
        return Choice(
            "flashinfer_cutlass",
            f"{src}: SM90 with VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1 -> FlashInfer CUTLASS",
        )
    if sm100:
        if flag(env, "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS"):
            return Choice(
                "flashinfer_cutlass", f"{src}: {fam} with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS=1"
            )
        if flag(env, "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8"):
            return Choice(
                "flashinfer_trtllm_mxfp8",
                f"{src}: {fam} with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 -> TRTLLM-gen MXFP4 x MXFP8",
            )
        return Choice("flashinfer_trtllm", f"{src}: {fam} with FlashInfer -> TRTLLM-gen MXFP4 x BF16")
    if v >= V0_11_1 and flag(env, "VLLM_MXFP4_USE_MARLIN"):
        return Choice("marlin", f"{src}, v0.11.2+: VLLM_MXFP4_USE_MARLIN=1 -> Marlin")
    if v >= V0_12_0:
        if 90 <= sm < 110:
            return Choice(
                "triton_kernels_matmul_ogs",
                f"{src}, v0.12.0+: triton_kernels built in, runs on SM 9.0-10.x -> Triton matmul_ogs",
            )
        return Choice(
            "marlin", f"{src}, v0.12.0+: triton_kernels runs on SM 9.0-10.x only -> Marlin on SM{sm}"
        )
    return Choice(
        "marlin",
        f"{src}, v0.10.1-v0.11.x: triton_kernels not installed by vLLM's wheel or image -> Marlin "
        "(engine.moe_backend: triton for a server that installed it)",
    )


def _deep_gemm_shape_ok(model: ModelSpec, moe_tp: int) -> bool:
    """``_valid_deep_gemm`` (``fused_moe/deep_gemm_moe.py``) on the rank's expert shape: the
    intermediate size N (``w2.size(2)``) above 512 and, with the hidden size K, a multiple
    of 128."""
    n, k = model.moe_intermediate_size // max(moe_tp, 1), model.hidden_size
    return n > DEEP_GEMM_MIN_N and n % DEEP_GEMM_ALIGN == 0 and k % DEEP_GEMM_ALIGN == 0


def _fp8(
    v: tuple[int, ...],
    sm: int,
    env: dict[str, str],
    block: bool,
    moe_tp: int,
    ep: int,
    model: ModelSpec,
) -> Choice:
    """FP8 experts: Marlin below SM89, else the oracle's priority list (v0.16.0+,
    ``_fp8_priority``) or the environment's switches before it (``_fp8_switches``)."""
    if sm < 89:
        return Choice(
            "marlin", f"quantization/fp8.py: SM{sm} has no FP8 tensor cores -> Marlin (FP8 weight-only)"
        )
    if v >= V0_16_0:
        return _fp8_priority(v, sm, env, block, ep)
    return _fp8_switches(v, sm, env, block, moe_tp, model)


def _fp8_priority(v: tuple[int, ...], sm: int, env: dict[str, str], block: bool, ep: int) -> Choice:
    """v0.16.0+: the first supported kernel of ``select_fp8_moe_backend``'s priority list."""
    fi = flag(env, "VLLM_USE_FLASHINFER_MOE_FP8")
    dg_env = flag(env, "VLLM_USE_DEEP_GEMM")
    moe_dg = flag(env, "VLLM_MOE_USE_DEEP_GEMM")
    what = "block-FP8" if block else "per-tensor FP8"
    src = "fused_moe/oracle/fp8.py select_fp8_moe_backend"
    fi_ok, dg_ok = fi is not False, dg_env is not False and moe_dg is not False
    if v >= V0_17_0 and sm == 90 and block:
        if ep > 1 and fi_ok:
            return Choice(
                "flashinfer_cutlass",
                f"{src}, v0.17.0+: SM90 block-FP8 with EP -> FLASHINFER_CUTLASS first",
            )
        return Choice("triton_fused_experts", f"{src}, v0.17.0+: SM90 block-FP8 with TP -> TRITON first")
    if fi_ok and 100 <= sm < 110:
        return Choice(
            "flashinfer_trtllm", f"{src}, v0.16.0+: SM100 {what} -> FLASHINFER_TRTLLM (first supported)"
        )
    if fi_ok and sm == 90:
        return Choice(
            "flashinfer_cutlass", f"{src}, v0.16.0+: SM90 {what} -> FLASHINFER_CUTLASS (first supported)"
        )
    if block and dg_ok and sm in (90, 100):
        return Choice("deep_gemm", f"{src}, v0.16.0+: FlashInfer off -> DEEPGEMM")
    return Choice("triton_fused_experts", f"{src}, v0.16.0+: -> TRITON")


def _fp8_switches(
    v: tuple[int, ...], sm: int, env: dict[str, str], block: bool, moe_tp: int, model: ModelSpec
) -> Choice:
    """v0.10.2-v0.15.x: FlashInfer where switched on, else DeepGEMM for block-FP8 where its
    switches and the MoE TP size let it run (``_fp8_deep_gemm``), else CUTLASS's block-scaled
    grouped GEMM (SM100 before v0.14.0) or Triton."""
    fi = flag(env, "VLLM_USE_FLASHINFER_MOE_FP8")
    dg_env = flag(env, "VLLM_USE_DEEP_GEMM")
    moe_dg = flag(env, "VLLM_MOE_USE_DEEP_GEMM")
    what = "block-FP8" if block else "per-tensor FP8"
    src = (
        "fused_moe/oracle/fp8.py select_fp8_moe_backend, v0.14.0-v0.15.x"
        if v >= V0_14_0
        else "quantization/fp8.py Fp8MoEMethod, v0.10.2-v0.13.x"
    )
    sm100 = 100 <= sm < 110 if v >= V0_13_0 else sm == 100
    if fi and (sm100 or sm == 90):
        mode = env.get("VLLM_FLASHINFER_MOE_BACKEND", "latency" if v >= V0_12_0 else "throughput")
        kernel = "flashinfer_trtllm" if mode == "latency" else "flashinfer_cutlass"
        return Choice(
            kernel,
            f"{src}: VLLM_USE_FLASHINFER_MOE_FP8=1 -> FlashInfer, VLLM_FLASHINFER_MOE_BACKEND={mode} "
            "(default throughput before v0.12.0, latency from it)",
        )
    dg_on = dg_env if dg_env is not None else v >= V0_11_0
    if v >= V0_11_1 and moe_dg is False:
        dg_on = False
    if v >= V0_12_0 and moe_dg is None and moe_tp >= 8:
        if block and sm in (90, 100):
            why = f"{src}: DeepGEMM off by default at MoE TP >= 8 (v0.12.0+)"
            if sm == 100 and v < V0_14_0:
                return Choice(
                    "vllm_cutlass_block_grouped_gemm", f"{why} -> CUTLASS block-scaled grouped GEMM"
                )
            return Choice("triton_fused_experts", f"{why} -> Triton fused_experts")
        dg_on = False
    if block and dg_on and sm in (90, 100):
        return _fp8_deep_gemm(v, sm, env, moe_tp, model, src)
    if block and sm100 and v < V0_14_0:
        return Choice(
            "vllm_cutlass_block_grouped_gemm", f"{src}: SM100 block-FP8 -> CUTLASS block-scaled grouped GEMM"
        )
    return Choice("triton_fused_experts", f"{src}: {what} -> Triton fused_experts")


def _fp8_deep_gemm(
    v: tuple[int, ...], sm: int, env: dict[str, str], moe_tp: int, model: ModelSpec, src: str
) -> Choice:
    """Block-FP8 experts where DeepGEMM is switched on (before v0.16.0): DeepGEMM, at every
    step with E8M0 scales, else from ``DEEP_GEMM_MIN_TOKENS`` tokens a step where
    ``_valid_deep_gemm`` takes the rank's expert shape, else Triton."""
    every = e8m0_used(v, sm, env)
    if not every and not _deep_gemm_shape_ok(model, moe_tp):
        n = model.moe_intermediate_size // max(moe_tp, 1)
        return Choice(
            "triton_fused_experts",
            f"{src}: block-FP8 on SM{sm}, DeepGEMM allowed but without E8M0 scales (SM90 before "
            f"v0.11.1, or VLLM_USE_DEEP_GEMM_E8M0=0) _valid_deep_gemm refuses N={n} (N <= "
            f"{DEEP_GEMM_MIN_N} or not a multiple of {DEEP_GEMM_ALIGN}) -> Triton fused_experts "
            "at every step",
        )
    when = (
        "at every step (E8M0 scales: SM100, SM90 from v0.11.1; VLLM_USE_DEEP_GEMM_E8M0)"
        if every
        else f"from {DEEP_GEMM_MIN_TOKENS} tokens a step, Triton below (no E8M0 scales)"
    )
    return Choice(
        "deep_gemm",
        f"{src}: block-FP8 on SM{sm}, VLLM_USE_DEEP_GEMM on (default from v0.11.0) -> DeepGEMM {when}",
    )


def moe_choice(
    v: tuple[int, ...], sm: int, fmt: str, env: dict[str, str], moe_tp: int, ep: int, model: ModelSpec
) -> Choice:
    if fmt == "mxfp4":
        return _mxfp4(v, sm, env)
    if fmt in ("fp8", "fp8_block"):
        return _fp8(v, sm, env, fmt == "fp8_block", moe_tp, ep, model)
    if fmt == "int4":
        return Choice(
            "marlin",
            "quantization/gptq_marlin.py GPTQMarlinMoEMethod, compressed_tensors_moe.py "
            "CompressedTensorsWNA16MarlinMoEMethod: Marlin on SM80+",
        )
    if fmt == "nvfp4":
        if sm >= 100:
            return Choice(
                "flashinfer_trtllm",
                "quantization/modelopt.py, fused_moe/oracle/nvfp4.py: SM100 -> FlashInfer",
            )
        return Choice("marlin", "quantization/modelopt.py: below SM100 -> Marlin (FP4 weight-only)")
    return Choice(
        "triton_fused_experts", "fused_moe/layer.py UnquantizedFusedMoEMethod -> Triton fused_experts"
    )
