"""Hardware profiles (calibrated efficiencies, optional custom hardware, optional operator
tables) and the profiled perf model that interpolates measured operator times.

A profile is JSON written by ``servesim calibrate`` and named by a scenario's
``hardware.profile``::

    {"format": "servesim-hardware-profile/1", "name": ..., "fitted_on": "H100-SXM",
     "gpu": null | {GpuConfig fields: a custom accelerator, e.g. this CPU},
     "efficiencies": {Efficiencies fields}, "cpu_overhead_s": null | seconds,
     "operator_tables": [{gpu, model, tp, shape, num_tokens, proj, mlp, elementwise}],
     "fit": {how it was made and how well it fits}}

``efficiencies`` are applied to the scenario's GPU (that is how an A100 profile predicts
an H100: the fractions of peak carry over, the peaks come from the catalog). ``gpu``
defines hardware the catalog lacks; a scenario uses it by naming it in ``hardware.gpu``.
``cpu_overhead_s``, when present, replaces the engine's ``cpu_overhead_s`` unless the
scenario sets that field itself: a profile fitted on engine step logs already contains the
engine's CPU time per step.

**Profiled model.** Where ``operator_tables`` cover the scenario's model shape, GPU and
TP degree, ``ProfiledPerfModel`` replaces the roofline's linear layers and elementwise
kernels by linear interpolation in the measured per-layer times (times the number of
layers); attention, LM head, sampling and communication stay the calibrated roofline,
and token counts outside the table fall back to the roofline entirely.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from servesim.catalog.gpus import GpuSpec, LinkSpec, get_gpu
from servesim.catalog.hf_config import from_hf_config
from servesim.catalog.models import ModelSpec
from servesim.config import EngineConfig, GpuConfig, ModelConfig, ParallelConfig, gpu_config_from_dict
from servesim.errors import CatalogError, ConfigError
from servesim.perf.base import BatchStats
from servesim.perf.capabilities import decode_step_times
from servesim.perf.operator_tables import OPERATOR_KERNELS, OperatorTable
from servesim.perf.pipelined import PipelinedPerfModel
from servesim.perf.roofline import Efficiencies, RooflinePerfModel, RooflineWork, build_perf_model

FORMAT = "servesim-hardware-profile/1"


class ProfileMismatchWarning(UserWarning):
    """A hardware profile applied to another GPU or machine than it was fitted on."""


def _profile_hardware(profile: HardwareProfile) -> GpuSpec | None:
    """The hardware a profile was fitted on: its own ``gpu``, else the catalog's ``fitted_on``
    (None when that names no catalog GPU)."""
    if profile.gpu is not None:
        return get_gpu(profile.gpu)
    try:
        return get_gpu(profile.fitted_on) if profile.fitted_on else None
    except CatalogError:  # a name the catalog does not know (a profile of other hardware)
        return None


#: Specs compared by ``profile_mismatch`` (the ones step times are made of), with their units.
_SPECS = (
    ("bf16 peak", lambda g: g.peak_flops.get("bfloat16", 0.0) / 1e12, "TFLOP/s"),
    ("memory bandwidth", lambda g: g.mem_bw / 1e9, "GB/s"),
    ("link bandwidth", lambda g: g.interconnect_bw / 1e9, "GB/s"),
)


def profile_mismatch(profile: HardwareProfile, gpu: GpuSpec) -> str | None:
    """A sentence when ``profile`` is used on other hardware than it was fitted on (another
    GPU name, or the same name with other peak FLOP/s or bandwidths), else None (also when
    the profile does not say what it was fitted on). Its efficiencies are fractions of the
    fitting hardware's peaks; on other hardware they are an extrapolation (docs/fidelity.md:
    the A100 end-to-end profile predicts H100 per-token times 17-31% too slow)."""
    own = _profile_hardware(profile)
    name = own.name if own is not None else profile.fitted_on
    if not name:
        return None
    where = f"hardware profile {profile.name!r} was fitted on {name}"
    if name.strip().lower() != gpu.name.strip().lower():
        return (
            f"{where} but is used on {gpu.name}: its efficiencies are fractions of {name}'s peaks, "
            f"applied to {gpu.name}'s, an extrapolation (calibrate on {gpu.name} to trust it)"
        )
    if own is None:
        return None
    diff = [
        f"{label} {get(gpu):.4g} vs {get(own):.4g} {unit}"
        for label, get, unit in _SPECS
        if abs(get(gpu) - get(own)) > 1e-6 * max(abs(get(own)), 1e-12)
    ]
    if diff:
        return (
            f"{where} but is used on a {gpu.name} with other specs ({', '.join(diff)}): another "
            "machine than the one it was fitted on, an extrapolation"
        )
    return None


@dataclass(slots=True)
class HardwareProfile:
    """A calibrated hardware profile (see the module docstring)."""

    name: str
    eff: Efficiencies
    fitted_on: str = ""
    gpu: GpuConfig | None = None
    cpu_overhead_s: float | None = None
    tables: list[OperatorTable] = field(default_factory=list)
    fit: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ scenario hooks

    def resolve_gpu(self, gpu: str | GpuConfig, warn: bool = True) -> GpuSpec:
        """The profile's own hardware when the scenario names it, else the catalog's GPU.
        ``warn``: a ``ProfileMismatchWarning`` when that is not what the profile was fitted
        on (``profile_mismatch``)."""
        if self.gpu is not None and isinstance(gpu, str) and gpu.strip().lower() == self.gpu.name.lower():
            spec = get_gpu(self.gpu)
        else:
            spec = get_gpu(gpu)
        if warn:
            msg = profile_mismatch(self, spec)
            if msg is not None:
                warnings.warn(msg, ProfileMismatchWarning, stacklevel=2)
        return spec

    def adjust_engine(self, engine: EngineConfig) -> EngineConfig:
        """Use the profile's CPU time per step unless the scenario set ``cpu_overhead_s``."""
        if self.cpu_overhead_s is None or "cpu_overhead_s" in engine.model_fields_set:
            return engine
        return engine.model_copy(update={"cpu_overhead_s": self.cpu_overhead_s})

    def perf_model(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        parallel: ParallelConfig,
        model_cfg: ModelConfig | None = None,
        links: LinkSpec | None = None,
    ) -> RooflinePerfModel | PipelinedPerfModel | ProfiledPerfModel:
        """The calibrated roofline (micro-batched with pipeline stages), or the profiled model
        where a table covers this case (one stage only; ``links``: a cluster pool's links, as
        ``build_perf_model`` takes them)."""
        roof = build_perf_model(model, gpu, parallel, model_cfg, eff=self.eff, links=links)
        if isinstance(roof, RooflinePerfModel) and parallel.pipeline_parallel_size == 1:
            for t in self.tables:
                if t.gpu == gpu.name and t.tp == parallel.tensor_parallel_size and same_shape(t.shape, model):
                    return ProfiledPerfModel(roof, t)
        return roof

    # ------------------------------------------------------------------ file format

    def to_dict(self) -> dict[str, Any]:
        eff = {k: v for k, v in dataclasses.asdict(self.eff).items() if v is not None}
        return {
            "format": FORMAT,
            "name": self.name,
            "fitted_on": self.fitted_on,
            "gpu": self.gpu.model_dump() if self.gpu else None,
            "efficiencies": eff,
            "cpu_overhead_s": self.cpu_overhead_s,
            "operator_tables": [_table_to_dict(t) for t in self.tables],
            "fit": self.fit,
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")

    @staticmethod
    def load(path: str | Path) -> HardwareProfile:
        """A profile file, or a bundled profile by name (``servesim catalog`` lists them)."""
        p = Path(path).expanduser()
        if not p.exists():
            bundled = bundled_profiles().get(str(path).removesuffix(".json"))
            if bundled is not None:
                p = bundled
        try:
            d = json.loads(p.read_text())
        except OSError as err:
            known = ", ".join(sorted(bundled_profiles()))
            raise ConfigError(
                f"hardware.profile: {p}: cannot read: {err.strerror or err} "
                f"(a file, or a bundled profile: {known})"
            ) from None
        except json.JSONDecodeError as err:
            raise ConfigError(f"hardware.profile: {p}: not JSON: {err}") from None
        return HardwareProfile.from_dict(d, str(p))

    @staticmethod
    def from_dict(d: dict[str, Any], source: str = "<profile>") -> HardwareProfile:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ConfigError(f'{source}: not a servesim hardware profile (expected "format": "{FORMAT}")')
        names = {f.name for f in dataclasses.fields(Efficiencies)}
        eff_d = dict(d.get("efficiencies") or {})
        unknown = set(eff_d) - names
        if unknown:
            raise ConfigError(
                f"{source}: efficiencies: unknown keys {sorted(unknown)}; known: {sorted(names)}"
            )
        tile = ("gemm_tile_m", "gemm_tile_n")
        bad = [
            k
            for k, v in eff_d.items()
            if not isinstance(v, int | float)
            or v < 0
            or (k == "roof_blend" and v > 1)  # 0 is allowed: the hard max
            or (k in tile and v != int(v))
            or (not k.endswith("_s") and k != "roof_blend" and k not in tile and not 0 < v <= 1)
        ]
        if bad:
            raise ConfigError(
                f"{source}: efficiencies {bad}: fractions must be in (0, 1] (roof_blend in [0, 1]), "
                "overheads >= 0, GEMM tiles whole numbers >= 0"
            )
        for k in tile:
            if k in eff_d:
                eff_d[k] = int(eff_d[k])
        try:
            gpu = gpu_config_from_dict(d["gpu"], source) if d.get("gpu") else None
            tables = [_table_from_dict(t) for t in d.get("operator_tables") or []]
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"{source}: malformed profile: {err}") from None
        cpu = d.get("cpu_overhead_s")
        return HardwareProfile(
            str(d.get("name", Path(source).stem)),
            Efficiencies(**eff_d),
            str(d.get("fitted_on", "")),
            gpu,
            None if cpu is None else float(cpu),
            tables,
            d.get("fit") or {},
        )


def same_shape(a: ModelSpec, b: ModelSpec) -> bool:
    """Same linear-layer shapes (hidden, heads, KV heads, head dim, MLP width and gating, dtype size)."""
    return (
        a.hidden_size,
        a.num_attention_heads,
        a.num_kv_heads,
        a.head_dim,
        a.intermediate_size,
        a.mlp_gated,
        a.is_moe,
        a.activation_dtype_bytes,
    ) == (
        b.hidden_size,
        b.num_attention_heads,
        b.num_kv_heads,
        b.head_dim,
        b.intermediate_size,
        b.mlp_gated,
        b.is_moe,
        b.activation_dtype_bytes,
    )


def _table_to_dict(t: OperatorTable) -> dict[str, Any]:
    s = t.shape
    shape = {
        "hidden_size": s.hidden_size,
        "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_kv_heads,
        "head_dim": s.head_dim,
        "intermediate_size": s.intermediate_size,
        "vocab_size": s.vocab_size,
        "model_type": "llama" if s.mlp_gated else "opt",
        "torch_dtype": s.dtype,
    }
    return {
        "gpu": t.gpu,
        "model": t.model,
        "tp": t.tp,
        "shape": shape,
        "num_tokens": t.num_tokens.tolist(),
        **{c: [float(f"{x:.6g}") for x in v] for c, v in t.times_s.items()},
    }


def _table_from_dict(d: dict[str, Any]) -> OperatorTable:
    shape = from_hf_config({**d["shape"], "num_hidden_layers": 1}, d["model"], source=d["model"])
    times = {c: np.asarray(d[c], float) for c in OPERATOR_KERNELS if c in d}
    return OperatorTable(
        d["gpu"], d["model"], int(d["tp"]), shape, np.asarray(d["num_tokens"], np.int64), times
    )


class ProfiledPerfModel(RooflineWork):
    """The calibrated roofline with measured linear and elementwise layers (implements PerfModel).

    ``batch_time = roofline + delta(T)`` where ``delta`` is, at each measured token count,
    ``num_layers x (measured - roofline)`` of the covered classes (their per-kernel
    overhead included), interpolated linearly in T; outside the table ``delta = 0``.
    Classes the table lacks (e.g. Phi-2's elementwise kernels) stay roofline.
    """

    __slots__ = ("roofline", "table", "_t", "_d", "_t_lo", "_t_hi")

    def __init__(self, roofline: RooflinePerfModel, table: OperatorTable) -> None:
        self.roofline, self.table = roofline, table
        m, e = roofline.model, roofline.eff
        one = RooflinePerfModel(
            dataclasses.replace(m, num_layers=1),
            roofline.gpu,
            tp=roofline.tp,
            dtype_bytes=roofline.dtype_bytes,
            kv_dtype_bytes=roofline.kv_dtype_bytes,
            eff=e,
        )
        emb = 6 * m.hidden_size * m.activation_dtype_bytes / (roofline.gpu.mem_bw * e.elementwise_memory)
        gemm_k = e.kernel_overhead_s if e.gemm_kernel_overhead_s is None else e.gemm_kernel_overhead_s
        deltas = []
        for i, t in enumerate(table.num_tokens.tolist()):
            b = one.breakdown(BatchStats(num_prefill_tokens=t, num_prefill_reqs=1))
            d = 0.0
            for c, meas in table.times_s.items():
                roof = b[c] - (emb * t if c == "elementwise" else 0.0)
                k = gemm_k if c in ("proj", "mlp") else e.kernel_overhead_s
                d += float(meas[i]) - roof - OPERATOR_KERNELS[c] * k
            deltas.append(m.num_layers * d)
        self._t = [float(t) for t in table.num_tokens.tolist()]
        self._d = deltas
        self._t_lo, self._t_hi = self._t[0], self._t[-1]

    def delta(self, num_tokens: float) -> float:
        """Seconds added to the roofline for a batch of ``num_tokens`` tokens (0 outside the table)."""
        if num_tokens < self._t_lo or num_tokens > self._t_hi:
            return 0.0
        ts, ds = self._t, self._d
        j = bisect.bisect_left(ts, num_tokens)
        if ts[j] == num_tokens:
            return ds[j]
        w = (num_tokens - ts[j - 1]) / (ts[j] - ts[j - 1])
        return ds[j - 1] + w * (ds[j] - ds[j - 1])

    def batch_time(self, stats: BatchStats) -> float:
        t = stats.num_prefill_tokens + stats.num_decode_reqs
        base = self.roofline.batch_time(stats)
        return base + self.delta(t) if t else base

    def decode_step_times(self, num_decode_reqs: int, sum_decode_context: np.ndarray) -> np.ndarray:
        base = decode_step_times(self.roofline, num_decode_reqs, sum_decode_context)
        return base + self.delta(num_decode_reqs) if num_decode_reqs else base


def bundled_profiles() -> dict[str, Path]:
    """The profiles shipped with servesim (src/servesim/data/profiles), by name."""
    from importlib import resources

    folder = resources.files("servesim").joinpath("data", "profiles")
    return {f.name.removesuffix(".json"): Path(str(f)) for f in folder.iterdir() if f.name.endswith(".json")}
