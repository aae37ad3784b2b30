"""Calibration: fit the roofline's efficiencies to measurements by bounded least squares.

The fitted quantities are the physical parameters of ``Efficiencies`` (fractions of peak
in (0, 1], overheads >= 0) plus the engine's CPU time per step, never free curves: a
profile fitted on one set of shapes must carry over to others (other batch sizes,
other tensor-parallel degrees, another GPU).

How: each measurement becomes a row of *work terms* (FLOPs and bytes per operator class,
link bytes, number of all-reduces, kernels, steps) computed once with the same formulas
as ``RooflinePerfModel`` (``_classes``); a prediction for a parameter vector is then a
few vectorized ``max``/sums, and ``scipy.optimize.least_squares`` minimizes the relative
error ``log(predicted / measured)`` within the bounds. A test checks that the terms with
the default efficiencies reproduce ``RooflinePerfModel.batch_time`` exactly.

The result is a hardware profile (``servesim.perf.profiled.HardwareProfile``) written as
JSON; a scenario names it in ``hardware.profile``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.errors import ServesimError
from servesim.perf.base import BatchStats
from servesim.perf.measurements import OPERATOR_KERNELS, AllReduceTable, E2ETiming, EngineLog, OperatorTable
from servesim.perf.roofline import KERNELS_PER_LAYER, Efficiencies, RooflinePerfModel

if TYPE_CHECKING:
    from servesim.config import GpuConfig
    from servesim.perf.profiled import HardwareProfile

#: Roofline classes with a compute and a memory roof; "elementwise" and "sampling" are memory only.
CLASSES = ("proj", "mlp", "attn_prefill", "attn_decode", "lm_head", "elementwise", "sampling")
#: Bounds of every fittable parameter: efficiencies in (0, 1], overheads >= 0 (seconds).
BOUNDS: dict[str, tuple[float, float]] = {
    **{f.name: (0.01, 1.0) for f in dataclasses.fields(Efficiencies) if not f.name.endswith("_s")},
    "allreduce_latency_s": (0.0, 1e-3),
    "launch_overhead_s": (0.0, 0.1),
    "kernel_overhead_s": (0.0, 1e-3),
    "cpu_overhead_s": (0.0, 1.0),
}


class CalibrationError(ServesimError):
    """The measurements cannot be fitted (too few rows, nothing to fit, scipy missing)."""


# --------------------------------------------------------------------------- work terms


@dataclass(slots=True)
class Terms:
    """Work of N measured quantities, one row each (see ``predict``).

    flops/bytes[c]: FLOPs and bytes of class c (per rank); peak[c]: the FLOP/s its compute
    roof uses; link_bytes: bytes over the GPU link (all-reduces, logits gather, pipeline);
    num_allreduce: all-reduces (for their latency); num_kernels: kernels (for the per-kernel
    overhead); num_launch: iterations (launch overhead); num_steps: engine steps (CPU time);
    fixed_s: seconds no parameter scales (pipeline link latency).
    """

    flops: dict[str, np.ndarray]
    bytes: dict[str, np.ndarray]
    peak: dict[str, np.ndarray]
    mem_bw: np.ndarray
    link_bw: np.ndarray
    link_bytes: np.ndarray
    num_allreduce: np.ndarray
    num_kernels: np.ndarray
    num_launch: np.ndarray
    num_steps: np.ndarray
    fixed_s: np.ndarray

    @staticmethod
    def concat(parts: Sequence[Terms]) -> Terms:
        def cat(get: object) -> np.ndarray:
            return np.concatenate([get(p) for p in parts])  # type: ignore[operator]

        return Terms(
            {c: cat(lambda p, c=c: p.flops[c]) for c in CLASSES},
            {c: cat(lambda p, c=c: p.bytes[c]) for c in CLASSES},
            {c: cat(lambda p, c=c: p.peak[c]) for c in CLASSES},
            cat(lambda p: p.mem_bw),
            cat(lambda p: p.link_bw),
            cat(lambda p: p.link_bytes),
            cat(lambda p: p.num_allreduce),
            cat(lambda p: p.num_kernels),
            cat(lambda p: p.num_launch),
            cat(lambda p: p.num_steps),
            cat(lambda p: p.fixed_s),
        )

    def __len__(self) -> int:
        return len(self.mem_bw)


def _eff_pair(e: Efficiencies | dict[str, float], cls: str) -> tuple[float, float]:
    get = e.get if isinstance(e, dict) else (lambda k: getattr(e, k))  # type: ignore[union-attr]
    if cls in ("proj", "mlp", "lm_head"):
        c, m = get(f"{cls}_compute"), get(f"{cls}_memory")
        return (get("linear_compute") if c is None else c, get("linear_memory") if m is None else m)
    if cls in ("elementwise", "sampling"):
        return 1.0, get("elementwise_memory")
    return get(f"{cls}_compute"), get(f"{cls}_memory")


def predict(terms: Terms, eff: Efficiencies | dict[str, float], cpu_overhead_s: float = 0.0) -> np.ndarray:
    """Seconds of every row of ``terms`` with these efficiencies (the roofline, vectorized)."""
    get = eff.get if isinstance(eff, dict) else (lambda k: getattr(eff, k))  # type: ignore[union-attr]
    total = terms.fixed_s.copy()
    for c in CLASSES:
        ec, em = _eff_pair(eff, c)
        mem = terms.bytes[c] / (terms.mem_bw * em)
        if c in ("elementwise", "sampling"):
            total += mem
        else:
            total += np.maximum(terms.flops[c] / (terms.peak[c] * ec), mem)
    total += terms.link_bytes / (terms.link_bw * get("comm"))
    total += terms.num_allreduce * get("allreduce_latency_s")
    total += terms.num_kernels * get("kernel_overhead_s") + terms.num_launch * get("launch_overhead_s")
    return total + terms.num_steps * cpu_overhead_s


def _empty(n: int) -> dict[str, np.ndarray]:
    return {c: np.zeros(n) for c in CLASSES}


def iteration_terms(
    model: ModelSpec,
    gpu: GpuSpec,
    stats: Sequence[BatchStats],
    tp: int = 1,
    pp: int = 1,
    kv_dtype_bytes: float | None = None,
    engine_steps: bool = False,
) -> Terms:
    """Work terms of whole iterations (``RooflinePerfModel.batch_time`` of each ``stats``).

    ``engine_steps``: the measured time includes the engine's CPU time per step.
    """
    pm = RooflinePerfModel(model, gpu, tp=tp, pp=pp, kv_dtype_bytes=kv_dtype_bytes)
    n = len(stats)
    flops, nbytes, peak = _empty(n), _empty(n), _empty(n)
    peak_lin = gpu.flops_for("fp8" if pm.dtype_bytes < 2 else _act_dtype(model))
    peak_act = gpu.flops_for(_act_dtype(model))
    for c in CLASSES:
        peak[c][:] = peak_lin if c in ("proj", "mlp") else peak_act
    link_bytes, n_ar, nonzero = np.zeros(n), np.zeros(n), np.zeros(n)
    L, H, ba = model.num_layers, model.hidden_size, model.activation_dtype_bytes
    ring = 2.0 * (tp - 1) / tp
    for i, s in enumerate(stats):
        t, r = s.num_tokens, s.num_reqs
        if t == 0:
            continue
        nonzero[i] = 1.0
        for c, (f, b) in pm._classes(s).items():
            flops[c][i], nbytes[c][i] = f, b
        link_bytes[i] = ((2 * L * ring * H * ba if tp > 1 else 0.0) + (pp - 1) * 2 * H * ba) * t
        link_bytes[i] += (tp - 1) / tp * model.vocab_size * ba * r
        n_ar[i] = (2 * L + 1) if tp > 1 else 0
    return Terms(
        flops,
        nbytes,
        peak,
        np.full(n, gpu.mem_bw),
        np.full(n, gpu.interconnect_bw),
        link_bytes,
        n_ar,
        nonzero * KERNELS_PER_LAYER * L,
        nonzero.copy(),
        nonzero.copy() if engine_steps else np.zeros(n),
        nonzero * (pp - 1) * gpu.interconnect_latency_s,
    )


def _act_dtype(model: ModelSpec) -> str:
    ba = model.activation_dtype_bytes
    return "float32" if ba >= 4 else ("bfloat16" if model.dtype == "fp8" else model.dtype)


def operator_terms(table: OperatorTable, gpu: GpuSpec, cls: str) -> Terms:
    """Work terms of one operator class of one layer over the table's token counts."""
    tokens = table.num_tokens
    n = len(tokens)
    flops, nbytes, peak = _empty(n), _empty(n), _empty(n)
    pm = RooflinePerfModel(table.shape, gpu, tp=table.tp)
    for i, t in enumerate(tokens):
        f, b = pm._classes(BatchStats(num_prefill_tokens=int(t), num_prefill_reqs=1))[cls]
        flops[cls][i], nbytes[cls][i] = f, b
        if cls == "elementwise":  # the roofline's class also holds the embedding and final norm
            nbytes[cls][i] -= 6 * table.shape.hidden_size * table.shape.activation_dtype_bytes * t
    for c in CLASSES:
        peak[c][:] = gpu.flops_for(_act_dtype(table.shape))
    z = np.zeros(n)
    return Terms(
        flops,
        nbytes,
        peak,
        np.full(n, gpu.mem_bw),
        np.full(n, gpu.interconnect_bw),
        z,
        z.copy(),
        np.full(n, float(OPERATOR_KERNELS[cls])),
        z.copy(),
        z.copy(),
        z.copy(),
    )


def attention_terms(table: OperatorTable, gpu: GpuSpec) -> Terms:
    """Work terms of one layer's attention kernel over the table's attention rows."""
    assert table.attention is not None
    stats = table.attention.stats()
    n = len(stats)
    flops, nbytes, peak = _empty(n), _empty(n), _empty(n)
    pm = RooflinePerfModel(table.shape, gpu, tp=table.tp)
    for i, s in enumerate(stats):
        cls = "attn_prefill" if s.num_prefill_tokens else "attn_decode"
        flops[cls][i], nbytes[cls][i] = pm._classes(s)[cls]
    for c in CLASSES:
        peak[c][:] = gpu.flops_for(_act_dtype(table.shape))
    z = np.zeros(n)
    return Terms(
        flops,
        nbytes,
        peak,
        np.full(n, gpu.mem_bw),
        np.full(n, gpu.interconnect_bw),
        z,
        z.copy(),
        np.ones(n),
        z.copy(),
        z.copy(),
        z.copy(),
    )


def allreduce_terms(table: AllReduceTable, gpu: GpuSpec) -> Terms:
    """One ring all-reduce per row: 2 (n-1)/n x bytes over the link, plus one latency."""
    n = len(table.time_s)
    w = table.num_workers.astype(float)
    z = np.zeros(n)
    return Terms(
        _empty(n),
        _empty(n),
        {c: np.ones(n) for c in CLASSES},
        np.full(n, gpu.mem_bw),
        np.full(n, gpu.interconnect_bw),
        2 * (w - 1) / w * table.size_bytes,
        np.ones(n),
        z,
        z.copy(),
        z.copy(),
        z.copy(),
    )


# --------------------------------------------------------------------------- fitting


@dataclass(slots=True)
class FitResult:
    """Fitted parameters and how well they explain the measurements."""

    eff: Efficiencies
    cpu_overhead_s: float
    params: dict[str, float]  # the fitted ones only
    measured_s: np.ndarray
    predicted_s: np.ndarray
    labels: list[str]

    @property
    def rel_err(self) -> np.ndarray:
        return self.predicted_s / self.measured_s - 1.0

    def quality(self) -> dict[str, float]:
        return fit_quality(self.measured_s, self.predicted_s)

    def worst(self, k: int = 5) -> list[tuple[str, float, float, float]]:
        """(label, measured s, predicted s, relative error) of the k largest errors."""
        idx = np.argsort(-np.abs(self.rel_err))[:k]
        return [
            (self.labels[i], float(self.measured_s[i]), float(self.predicted_s[i]), float(self.rel_err[i]))
            for i in idx
        ]


def fit_quality(measured: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """R^2 (on seconds), MAPE, median and max absolute percentage error, P90 error, n."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    ape = np.abs(predicted / measured - 1.0) * 100
    ss_res = float(np.sum((measured - predicted) ** 2))
    ss_tot = float(np.sum((measured - measured.mean()) ** 2))
    return {
        "n": float(len(measured)),
        "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        "mape_pct": float(ape.mean()),
        "median_ape_pct": float(np.median(ape)),
        "p90_ape_pct": float(np.percentile(ape, 90)),
        "max_ape_pct": float(ape.max()),
    }


def fit(
    terms: Terms,
    measured_s: np.ndarray,
    names: Sequence[str],
    base: Efficiencies | None = None,
    base_cpu_overhead_s: float = 0.0,
    labels: Sequence[str] | None = None,
) -> FitResult:
    """Least-squares fit of the parameters ``names`` (Efficiencies fields or "cpu_overhead_s").

    Minimizes sum of log(predicted / measured)^2 within ``BOUNDS``; the other parameters
    stay at ``base``. Needs scipy (``pip install servesim[calibrate]``).
    """
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise CalibrationError("calibration needs scipy: pip install 'servesim[calibrate]'") from None
    base = base or Efficiencies()
    measured_s = np.asarray(measured_s, float)
    if len(measured_s) != len(terms):
        raise CalibrationError(f"{len(terms)} work rows but {len(measured_s)} measurements")
    ok = measured_s > 0
    if ok.sum() < len(names) + 1:
        raise CalibrationError(
            f"{int(ok.sum())} usable measurements cannot determine {len(names)} parameters"
        )
    unknown = [n for n in names if n not in BOUNDS]
    if unknown:
        raise CalibrationError(f"unknown parameters {unknown}; fittable: {sorted(BOUNDS)}")
    start = dataclasses.asdict(base)
    for k in list(start):
        if k.startswith(("proj_", "mlp_", "lm_head_")) and start[k] is None and k in names:
            start[k] = start["linear_" + k.rsplit("_", 1)[1]]
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    # Overheads are fitted in microseconds so every parameter has a similar scale.
    scale = np.array([1e-6 if n.endswith("_s") else 1.0 for n in names])
    x0 = np.array([base_cpu_overhead_s if n == "cpu_overhead_s" else start[n] for n in names], float)
    x0 = np.clip(x0, lo + 1e-9, hi) / scale
    log_meas = np.log(measured_s[ok])

    def unpack(x: np.ndarray) -> tuple[dict[str, float], float]:
        p = dict(start)
        cpu = base_cpu_overhead_s
        for n, v in zip(names, x * scale):
            if n == "cpu_overhead_s":
                cpu = float(v)
            else:
                p[n] = float(v)
        return p, cpu

    def residuals(x: np.ndarray) -> np.ndarray:
        p, cpu = unpack(x)
        pred = predict(terms, p, cpu)[ok]
        return np.log(np.maximum(pred, 1e-15)) - log_meas

    res = least_squares(residuals, x0, bounds=(lo / scale, hi / scale), x_scale=1.0, method="trf",
                        xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
    p, cpu = unpack(res.x)
    eff = Efficiencies(**p)
    return FitResult(
        eff,
        cpu,
        {n: float(v) for n, v in zip(names, res.x * scale)},
        measured_s,
        predict(terms, eff, cpu),
        list(labels) if labels else [str(i) for i in range(len(measured_s))],
    )


# --------------------------------------------------------------------------- sources -> profile

#: What each kind of measurement determines (the rest stays at the defaults or the base profile).
OPERATOR_PARAMS = (
    "proj_compute",
    "proj_memory",
    "mlp_compute",
    "mlp_memory",
    "elementwise_memory",
    "kernel_overhead_s",
)
ATTENTION_PARAMS = (
    "attn_prefill_compute",
    "attn_prefill_memory",
    "attn_decode_compute",
    "attn_decode_memory",
)
NETWORK_PARAMS = ("comm", "allreduce_latency_s")
E2E_PARAMS = (
    "linear_compute",
    "linear_memory",
    "attn_prefill_compute",
    "attn_decode_memory",
    "launch_overhead_s",
)
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
) -> tuple[Efficiencies, list[FitResult]]:
    """Fit efficiencies and the per-kernel overhead to operator tables of one GPU (the
    attention efficiencies too when the tables time attention), and the link efficiency and
    latency to its all-reduce table. ``gpu``: the hardware, when the tables' GPU is not in
    the catalog.

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
    results = [fit(terms, meas, names, labels=labels)]
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
    from servesim.catalog.models import load_model

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
    rows: Sequence[E2ETiming], names: Sequence[str] = E2E_PARAMS, base: Efficiencies | None = None
) -> FitResult:
    """Fit whole-iteration efficiencies and overheads to end-to-end prompt/token times."""
    if not rows:
        raise CalibrationError("no end-to-end timings to fit")
    terms, meas, labels = splitwise_fit_data(rows)
    return fit(terms, meas, names, base=base, labels=labels)


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


def calibrate_source(
    source: Path,
    kind: str = "auto",
    gpu: str | None = None,
    hardware: GpuConfig | None = None,
    names: Sequence[str] | None = None,
    with_tables: bool = False,
    name: str | None = None,
    network: bool = True,
) -> tuple[HardwareProfile, list[FitResult]]:
    """Read measurements of any supported kind, fit, and return the profile and the fits.

    operators: ``source`` is a Vidur profiling tree (``compute/``, ``network/``); ``gpu`` picks
    its GPU directory (default h100); ``network`` fits the link to ``network/<gpu>_dgx/
    all_reduce.csv`` when present. splitwise: rows of ``gpu`` (default A100-80GB).
    engine-log: a record.py JSON or a step CSV, on ``hardware`` (a custom accelerator, stored
    in the profile) or the catalog ``gpu``.
    """
    from servesim.catalog.gpus import get_gpu
    from servesim.perf.measurements import (
        VIDUR_GPUS,
        read_allreduce,
        read_engine_log,
        read_operator_profiles,
        read_splitwise,
    )
    from servesim.perf.profiled import HardwareProfile

    kind = detect_kind(source) if kind == "auto" else kind
    info: dict[str, object] = {"source": str(source), "kind": kind}
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
        log = read_engine_log(source)
        spec = get_gpu(hardware) if hardware is not None else get_gpu(gpu or "H100-SXM")
        results = [calibrate_engine_log(log, spec, names=names or ENGINE_LOG_PARAMS)]
        eff, hw, kept, cpu = results[0].eff, hardware, [], results[0].cpu_overhead_s
        fitted_on = spec.name
    else:
        raise CalibrationError(f"unknown kind {kind!r}; expected auto, operators, splitwise or engine-log")
    info["fits"] = [
        {
            "params": r.params,
            "quality": r.quality(),
            "worst": [
                {"case": c, "measured_s": m, "predicted_s": p, "error": e} for c, m, p, e in r.worst(5)
            ],
        }
        for r in results
    ]
    profile = HardwareProfile(
        name or f"{fitted_on} ({kind}: {source.name})", eff, fitted_on, hw, cpu, kept, info
    )
    return profile, results
