"""Calibration: fit the roofline's efficiencies to measurements by bounded least squares.

The fitted quantities are the physical parameters of ``Efficiencies`` (fractions of peak
in (0, 1], overheads >= 0) plus the engine's CPU time per step, never free curves: a
profile fitted on one set of shapes must carry over to others (other batch sizes,
other tensor-parallel degrees, another GPU).

How: each measurement becomes a row of *work terms* (``servesim.perf.work_terms``: FLOPs
and bytes per operator class, link bytes, all-reduces and their ring hops, kernels, row
passes, steps) computed once with the roofline's own formulas; a prediction for a
parameter vector is then a few array operations, and ``scipy.optimize.least_squares``
minimizes the relative error ``log(predicted / measured)`` within the bounds. The GEMM tile
of wave quantisation (``gemm_tile_m`` x ``gemm_tile_n``) is discrete: operator fits try each
of ``GEMM_TILES`` (and none) and keep the one with the least squared error.

The result is a hardware profile (``servesim.perf.profiled.HardwareProfile``) written as
JSON; a scenario names it in ``hardware.profile``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servesim.calibration.engine_logs import EngineLog
from servesim.calibration.fitting import (  # noqa: F401  (re-exported: the fitting API)
    BOUNDS,
    GEMM_TILES,
    MIN_TILE_GAIN,
    CalibrationError,
    FitResult,
    fit,
    fit_cost,
    fit_quality,
    fit_tiles,
    fit_warnings,
)
from servesim.calibration.measurements import E2ETiming
from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.perf.operator_tables import AllReduceTable, OperatorTable
from servesim.perf.roofline import Efficiencies
from servesim.perf.work_terms import (  # noqa: F401  (re-exported: the fitting API)
    CLASSES,
    GEMM_CLASSES,
    Terms,
    allreduce_terms,
    attention_terms,
    iteration_terms,
    operator_terms,
    predict,
    roof,
)

if TYPE_CHECKING:
    from servesim.config import GpuConfig
    from servesim.perf.profiled import HardwareProfile

# --------------------------------------------------------------------------- sources -> profile

#: What each kind of measurement determines (the rest stays at the defaults or the base profile).
OPERATOR_PARAMS = (
    "proj_compute",
    "proj_memory",
    "mlp_compute",
    "mlp_memory",
    "elementwise_memory",
    "kernel_overhead_s",
    "gemm_kernel_overhead_s",
    "roof_blend",
    "row_pass_s",
)
ATTENTION_PARAMS = (
    "attn_prefill_compute",
    "attn_prefill_memory",
    "attn_decode_compute",
    "attn_decode_memory",
)
NETWORK_PARAMS = ("comm", "allreduce_latency_s", "allreduce_hop_s")
E2E_PARAMS = (
    "linear_compute",
    "linear_memory",
    "attn_prefill_compute",
    "attn_decode_memory",
    "launch_overhead_s",
    "allreduce_hop_s",
)
#: E2E: not allreduce_latency_s: every Splitwise row runs the same model, so its 2L + 1
#: all-reduces per step are the same count at every TP degree and their fixed latency cannot
#: be told from the launch overhead; the per-hop latency (2 (tp - 1) hops) grows with TP and can.
#: Not allreduce_latency_s: with a fixed TP degree per row its 2L + 1 all-reduces per step are
#: a constant, indistinguishable from the launch overhead; the default latency is kept.
ENGINE_LOG_PARAMS = (
    "linear_compute",
    "linear_memory",
    "attn_prefill_compute",
    "attn_decode_memory",
    "elementwise_memory",
    "cpu_overhead_s",
)


def operator_fit_data(
    tables: Sequence[OperatorTable],
    gpus: dict[str, GpuSpec] | None = None,
    classes: Sequence[str] = ("proj", "mlp", "elementwise", "attention"),
) -> tuple[Terms, np.ndarray, list[str]]:
    """Work terms, measured seconds and labels of every (table, class, token count)."""
    from servesim.catalog.gpus import get_gpu

    parts, meas, labels = [], [], []
    for t in tables:
        gpu = (gpus or {}).get(t.gpu) or get_gpu(t.gpu)
        for cls, times in t.times_s.items():
            if cls not in classes:
                continue
            parts.append(operator_terms(t, gpu, cls))
            meas.append(times)
            labels += [f"{t.model} {t.gpu} tp{t.tp} {cls} T={n}" for n in t.num_tokens.tolist()]
        if t.attention is not None and "attention" in classes:
            a = t.attention
            parts.append(attention_terms(t, gpu))
            meas.append(a.time_s)
            labels += [
                f"{t.model} {t.gpu} tp{t.tp} "
                + (f"attn prefill T={n} ctx={c}" if pf else f"attn decode B={b} ctx={c}")
                for pf, n, c, b in zip(
                    a.is_prefill.tolist(),
                    a.num_tokens.tolist(),
                    a.context_len.tolist(),
                    a.batch_size.tolist(),
                )
            ]
    if not parts:
        raise CalibrationError("no operator tables to fit")
    return Terms.concat(parts), np.concatenate(meas), labels


def calibrate_operators(
    tables: Sequence[OperatorTable],
    allreduce: AllReduceTable | None = None,
    names: Sequence[str] | None = None,
    gpu: GpuSpec | None = None,
    tiles: Sequence[tuple[int, int]] = GEMM_TILES,
) -> tuple[Efficiencies, list[FitResult]]:
    """Fit efficiencies and the per-kernel overhead to operator tables of one GPU (the
    attention efficiencies too when the tables time attention), and the link efficiency and
    latency to its all-reduce table. ``gpu``: the hardware, when the tables' GPU is not in
    the catalog. ``tiles``: the GEMM tiles of wave quantisation to try ((0, 0): none); the
    fit with the least squared log error wins (a GPU without an SM count tries none).

    One joint fit over GEMMs and elementwise kernels: their per-kernel fixed costs differ
    (~9 us for a small GEMM, ~3 us for a norm on H100) but the roofline has one; fitted
    apart, the GEMMs gain (MAPE 10% instead of 13%) and the elementwise kernels lose
    (49% instead of 12%), for the same error of a whole layer (~10%).
    """
    from servesim.catalog.gpus import get_gpu

    gpus = {t.gpu for t in tables}
    if len(gpus) != 1:
        raise CalibrationError(f"operator tables of one GPU expected, found {sorted(gpus)}")
    gpu = gpu or get_gpu(next(iter(gpus)))
    if names is None:
        names = OPERATOR_PARAMS + (ATTENTION_PARAMS if any(t.attention is not None for t in tables) else ())
    terms, meas, labels = operator_fit_data(tables, {gpu.name: gpu, next(iter(gpus)): gpu})
    results = [fit_tiles(terms, meas, names, tiles if gpu.num_sms else ((0, 0),), labels=labels)]
    eff = results[-1].eff
    if allreduce is not None:
        net = fit(
            allreduce_terms(allreduce, gpu),
            allreduce.time_s,
            NETWORK_PARAMS,
            base=eff,
            labels=[f"all_reduce x{w} {s} B" for w, s in zip(allreduce.num_workers, allreduce.size_bytes)],
        )
        results.append(net)
        eff = net.eff
    return eff, results


def splitwise_fit_data(
    rows: Sequence[E2ETiming], batched_prompts: bool = False
) -> tuple[Terms, np.ndarray, list[str]]:
    """Terms of Splitwise rows: every per-token time, and prompt times of single prompts
    (``batched_prompts`` adds the batched ones, which Splitwise's engine runs far slower
    than one iteration: see docs/fidelity.md)."""
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model

    parts, meas, labels = [], [], []
    for r in rows:
        stats, ms, kinds = [r.decode_stats()], [r.token_time_s], ["token"]
        if r.batch_size == 1 or batched_prompts:
            stats.append(r.prefill_stats())
            ms.append(r.prompt_time_s)
            kinds.append("prompt")
        parts.append(iteration_terms(load_model(r.model), get_gpu(r.gpu), stats, tp=r.tp))
        meas += ms
        labels += [
            f"{r.gpu} tp{r.tp} prompt{r.prompt_len} batch{r.batch_size} out{r.num_output_tokens} {k}"
            for k in kinds
        ]
    return Terms.concat(parts), np.asarray(meas), labels


def calibrate_e2e(
    rows: Sequence[E2ETiming],
    names: Sequence[str] = E2E_PARAMS,
    base: Efficiencies | None = None,
    tiles: Sequence[tuple[int, int]] = GEMM_TILES,
) -> FitResult:
    """Fit whole-iteration efficiencies and overheads to end-to-end prompt/token times (and
    the GEMM tile of wave quantisation among ``tiles``)."""
    if not rows:
        raise CalibrationError("no end-to-end timings to fit")
    terms, meas, labels = splitwise_fit_data(rows)
    if not np.all(terms.num_sms > 0):
        tiles = ((0, 0),)
    return fit_tiles(terms, meas, names, tiles, base=base, labels=labels)


def calibrate_engine_log(
    log: EngineLog,
    gpu: GpuSpec,
    model: ModelSpec | None = None,
    names: Sequence[str] = ENGINE_LOG_PARAMS,
    base: Efficiencies | None = None,
    tp: int = 1,
) -> FitResult:
    """Fit efficiencies and the engine's CPU time per step to an engine's per-step times.

    The per-iteration GPU overheads are set to 0 unless fitted: on a step log they cannot be
    told apart from the engine's CPU time per step, which ``cpu_overhead_s`` carries.
    """
    model = model or log.model_spec()
    base = dataclasses.replace(base or Efficiencies(), launch_overhead_s=0.0, kernel_overhead_s=0.0)
    terms = iteration_terms(model, gpu, log.stats, tp=tp, engine_steps=True)
    labels = [
        f"step {i}: prefill {s.num_prefill_tokens} tok/{s.num_prefill_reqs} req, decode {s.num_decode_reqs}"
        for i, s in enumerate(log.stats)
    ]
    return fit(terms, log.duration_s, names, base=base, labels=labels)


def detect_kind(source: Path) -> str:
    """'operators' (a Vidur tree), 'splitwise' (perf_model.csv) or 'engine-log' (anything else)."""
    if source.is_dir():
        return "operators"
    if source.suffix == ".csv":
        with source.open(newline="") as f:
            header = f.readline()
        if "prompt_time" in header and "token_time" in header:
            return "splitwise"
    return "engine-log"


def describe_source(path: Path) -> str:
    """A source as a profile records it: its folder and name, not where it lay on the machine
    that fitted it (the profile's sha256 says which file exactly)."""
    path = path.resolve()
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fit_record(r: FitResult) -> dict[str, object]:
    """What a profile keeps of a fit: parameters, alternatives tried, quality (R^2 among it),
    sensitivity, warnings (``fit_warnings``) and the five worst cases."""
    return {
        "params": r.params,
        **({"gemm_tile_mape_pct": r.alternatives} if r.alternatives else {}),
        "quality": r.quality(),
        "sensitivity_pct": r.sensitivity_pct,
        "warnings": r.warnings(),
        "worst": [{"case": c, "measured_s": m, "predicted_s": p, "error": e} for c, m, p, e in r.worst(5)],
    }


def _calibrate_engine_logs(
    sources: list[Path],
    gpu: GpuSpec,
    names: Sequence[str] | None,
    model: ModelSpec | None,
    tp: int,
) -> FitResult:
    """One fit over the steps of every engine log in ``sources`` (see calibrate_source)."""
    from servesim.calibration.engine_logs import merge_engine_logs, read_engine_log

    log = merge_engine_logs([read_engine_log(p) for p in sources])
    if model is None and not log.model_config:
        raise CalibrationError(
            f"{sources[0]}: a step CSV names no model; give the model it was measured with "
            "(--model: a preset name or a config.json)"
        )
    return calibrate_engine_log(log, gpu, model, names=names or ENGINE_LOG_PARAMS, tp=tp)


def _sources_and_kind(source: Path | Sequence[Path], kind: str) -> tuple[list[Path], str]:
    """The source paths and their one kind ('auto': detected): several sources only as
    engine logs, all of one kind."""
    sources = [Path(source)] if isinstance(source, (str, Path)) else [Path(p) for p in source]
    if not sources:
        raise CalibrationError("no measurements given")
    kinds = {detect_kind(p) for p in sources} if kind == "auto" else {kind}
    if len(kinds) > 1:
        raise CalibrationError(
            f"measurements of different kinds ({', '.join(sorted(kinds))}); fit one kind at a time"
        )
    kind = kinds.pop()
    if len(sources) > 1 and kind != "engine-log":
        raise CalibrationError(
            f"{kind}: one source at a time (several are fitted together only for engine logs)"
        )
    return sources, kind


def calibrate_source(
    source: Path | Sequence[Path],
    kind: str = "auto",
    gpu: str | None = None,
    hardware: GpuConfig | None = None,
    names: Sequence[str] | None = None,
    with_tables: bool = False,
    name: str | None = None,
    network: bool = True,
    model: ModelSpec | None = None,
    tp: int = 1,
) -> tuple[HardwareProfile, list[FitResult]]:
    """Read measurements of any supported kind, fit, and return the profile and the fits.

    operators: ``source`` is a Vidur profiling tree (``compute/``, ``network/``); ``gpu`` picks
    its GPU directory (default h100); ``network`` fits the link to ``network/<gpu>_dgx/
    all_reduce.csv`` when present. splitwise: rows of ``gpu`` (default A100-80GB).
    engine-log: a record.py JSON or a step CSV, on ``hardware`` (a custom accelerator, stored
    in the profile) or the catalog ``gpu``, for ``model`` (required for a step CSV, which names
    no model; a record.py JSON carries its own) at tensor parallelism ``tp``. Several engine
    logs (a sequence of paths) are fitted together, as one set of steps.
    """
    from servesim.calibration.measurements import (
        VIDUR_GPUS,
        read_allreduce,
        read_operator_profiles,
        read_splitwise,
    )
    from servesim.catalog.gpus import get_gpu
    from servesim.perf.profiled import HardwareProfile

    sources, kind = _sources_and_kind(source, kind)
    source = sources[0]
    info: dict[str, object] = {
        "source": describe_source(source) if len(sources) == 1 else [describe_source(p) for p in sources],
        "kind": kind,
        # Which files exactly (a validation can tell the recording a profile was fitted on).
        "sha256": [file_sha256(p) for p in sources if p.is_file()],
    }
    if kind == "operators":
        gpu_dir = (gpu or "h100").lower()
        gpu_dir = {v.lower(): k for k, v in VIDUR_GPUS.items()}.get(gpu_dir, gpu_dir)
        tables = read_operator_profiles(source, (gpu_dir,))
        if not tables:
            raise CalibrationError(
                f"{source}: no operator profiles under compute/{gpu_dir}/ (name the directory with --gpu)"
            )
        ar_path = source / "network" / f"{gpu_dir}_dgx" / "all_reduce.csv"
        allreduce = read_allreduce(ar_path) if network and ar_path.is_file() else None
        spec = get_gpu(hardware) if hardware is not None else None
        eff, results = calibrate_operators(tables, allreduce, names, spec)
        fitted_on, hw = (spec.name if spec else VIDUR_GPUS.get(gpu_dir, gpu_dir)), hardware
        kept = tables if with_tables else []
        cpu = None
    elif kind == "splitwise":
        fitted_on = get_gpu(gpu or "A100-80GB").name
        rows = [r for r in read_splitwise(source) if r.gpu == fitted_on]
        results = [calibrate_e2e(rows, names or E2E_PARAMS)]
        eff, hw, kept, cpu = results[0].eff, None, [], None
    elif kind == "engine-log":
        spec = get_gpu(hardware) if hardware is not None else get_gpu(gpu or "H100-SXM")
        results = [_calibrate_engine_logs(sources, spec, names, model, tp)]
        eff, hw, kept, cpu = results[0].eff, hardware, [], results[0].cpu_overhead_s
        fitted_on = spec.name
    else:
        raise CalibrationError(f"unknown kind {kind!r}; expected auto, operators, splitwise or engine-log")
    info["fits"] = [_fit_record(r) for r in results]
    # Every fit's warnings in one list (calibrate prints them; a reader of the profile finds them).
    info["warnings"] = [w for r in results for w in r.warnings()]
    profile = HardwareProfile(
        name or f"{fitted_on} ({kind}: {' + '.join(p.name for p in sources)})",
        eff,
        fitted_on,
        hw,
        cpu,
        kept,
        info,
    )
    return profile, results
