"""The whole scenario, and reading it from a file, a dict and ``--set`` overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from servesim.config._base import _Strict
from servesim.config.cluster import ClusterConfig
from servesim.config.engine import EngineConfig
from servesim.config.files import load_yaml_text, read_scenario_file
from servesim.config.hardware import GpuConfig, HardwareConfig, ParallelConfig
from servesim.config.messages import format_validation_error
from servesim.config.overrides import parse_override, set_path
from servesim.config.parts import ModelConfig, RunConfig, SloConfig
from servesim.config.tenants import TenantConfig, check_tenants
from servesim.config.workload_kinds import (
    GuidellmWorkload,
    InferencePerfWorkload,
    SessionWorkload,
    WorkloadConfig,
)
from servesim.config.workloads import SyntheticWorkload, TraceWorkload
from servesim.errors import ConfigError


class Scenario(_Strict):
    """One simulation: model on hardware with an engine config, serving a workload."""

    name: str = Field("scenario", description="Name of the scenario (in reports and summary.json).")
    model: ModelConfig = Field(ModelConfig(), description="The model served.")
    hardware: HardwareConfig = Field(HardwareConfig(), description="The accelerator.")
    parallel: ParallelConfig = Field(ParallelConfig(), description="Tensor, pipeline and expert parallelism.")
    engine: EngineConfig = Field(EngineConfig(), description="The serving engine's knobs.")
    workload: WorkloadConfig = Field(
        TraceWorkload(path="builtin:azure_conv"),
        description=("The requests: type: trace or type: synthetic."),
    )
    slo: SloConfig = Field(SloConfig(ttft_s=2.0, tpot_s=0.1), description="Latency objectives.")
    run: RunConfig = Field(RunConfig(), description="Run options.")
    cluster: ClusterConfig | None = Field(
        None,
        description=(
            "Pools, router, disaggregation (docs/cluster.md); None: one replica of hardware/parallel/engine."
        ),
    )
    tenants: list[TenantConfig] = Field(
        default_factory=list,
        description=(
            "The workload's tenants by name: weight (engine.scheduling_policy vtc), rate limit, queue "
            "cap and SLOs (docs/policies.md, Tenants); a tenant not listed has none of them."
        ),
    )

    @model_validator(mode="after")
    def _check_tenants(self) -> Scenario:
        check_tenants(self.tenants)
        cl = self.cluster
        if (
            self.tenants
            and cl is not None
            and (cl.migration.enabled or any(p.role != "colocated" for p in cl.pools))
        ):
            raise ValueError(
                "tenants: admission control and weights are modelled for colocated pools without "
                "migration; a disaggregated cluster or one with migration takes none (leave tenants out)"
            )
        return self


_DEFAULT = Scenario()

# --------------------------------------------------------------------------- loading


def _workload_type(wl: Any) -> str | None:
    if not isinstance(wl, dict):
        return None
    return wl.get("type") or ("trace" if "path" in wl else "synthetic")


def scenario_from_dict(
    data: dict[str, Any], source: str = "<scenario>", overrides: list[str] | None = None
) -> Scenario:
    """Validate a scenario mapping after applying ``--set`` overrides (``KEY=VALUE``) to it.

    ``workload.type`` is applied first: switching the type starts the workload afresh from
    the new type's defaults (the old type's fields do not apply), and the other workload
    overrides then apply to it, in any order on the command line.
    """
    from pydantic import ValidationError

    data = dict(data or {})
    parsed = [parse_override(text, Scenario) for text in overrides or []]
    if parsed and "workload" not in data and any(k.startswith("workload.") for k, _ in parsed):
        # Overriding a field of the default workload: start from the default's fields.
        data["workload"] = Scenario.model_fields["workload"].default.model_dump(exclude_defaults=True)
        data["workload"]["type"] = "trace"
    if parsed and "slo" not in data and any(k.startswith("slo.") for k, _ in parsed):
        # Overriding one objective of the default SLOs keeps the others.
        data["slo"] = Scenario.model_fields["slo"].default.model_dump(exclude_defaults=True)
    for key, value in parsed:
        if key == "workload.type" and value != _workload_type(data.get("workload")):
            data["workload"] = {"type": value}
    for key, value in parsed:
        if key != "workload.type" or not isinstance(data.get("workload"), dict):
            set_path(data, key, value, _DEFAULT)
    wl = data.get("workload")
    if isinstance(wl, dict) and "type" not in wl:
        # The type may be left out when it is obvious: a trace names its path.
        data["workload"] = {**wl, "type": _workload_type(wl)}
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, Scenario)) from None


def gpu_config_from_dict(data: Any, source: str, where: str = "gpu") -> GpuConfig:
    """A custom accelerator from a mapping found at ``where`` in ``source`` (a hardware
    profile's ``gpu``, say); errors read as a scenario's do (renamed fields say so)."""
    from pydantic import ValidationError

    try:
        return GpuConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, GpuConfig, where)) from None


def read_gpu_config(path: str | Path) -> GpuConfig:
    """A custom accelerator from a YAML/JSON file of ``hardware.gpu`` fields (name,
    bf16_tflops, mem_gb, mem_bw_tb_per_s, ...), as ``calibrate --hardware`` takes."""
    from pydantic import ValidationError

    p = Path(path)
    try:
        data = load_yaml_text(p.read_text(), str(p))
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text; expected a YAML or JSON hardware description") from None
    try:
        return GpuConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(
            f"{p}: not a hardware description (hardware.gpu fields):\n"
            + format_validation_error(err, str(p), GpuConfig)
        ) from None


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read a YAML or TOML scenario file (or the built-in default when ``path`` is None)."""
    if path is None:
        return scenario_from_dict({}, "<default scenario>", overrides)
    p = Path(path)
    scenario = scenario_from_dict(read_scenario_file(p), str(p), overrides)
    return _resolve_relative_paths(scenario, p.parent)


def _resolve_relative_paths(s: Scenario, base: Path) -> Scenario:
    """Trace, model and hardware-profile paths in a scenario file are relative to the file."""

    def fix(path: str | None) -> str | None:
        if path is None or path.startswith("builtin:"):
            return path
        q = Path(path).expanduser()
        if not q.is_absolute() and (base / q).exists():
            return str(base / q)
        return path

    updates: dict[str, Any] = {}
    wl = s.workload
    if isinstance(wl, TraceWorkload):
        updates["workload"] = wl.model_copy(update={"path": fix(wl.path)})
    elif isinstance(wl, InferencePerfWorkload | GuidellmWorkload):
        updates["workload"] = wl.model_copy(update={"config": fix(wl.config)})
    elif isinstance(wl, SyntheticWorkload | SessionWorkload):
        upd: dict[str, Any] = {}
        for fld in ("prompt_len", "output_len", "first_prompt_len", "user_len", "turns"):
            if fld not in type(wl).model_fields:
                continue
            dist = getattr(wl, fld)
            if dist.trace:
                upd[fld] = dist.model_copy(update={"trace": fix(dist.trace)})
        if upd:
            updates["workload"] = wl.model_copy(update=upd)
    if s.hardware.profile:
        fixed = fix(s.hardware.profile)
        if fixed != s.hardware.profile:
            updates["hardware"] = s.hardware.model_copy(update={"profile": fixed})
    name = s.model.name
    if "/" in name or name.endswith(".json"):
        fixed = fix(name)
        if fixed != name:
            updates["model"] = s.model.model_copy(update={"name": fixed})
    if s.cluster is not None:  # a pool's own model; requests still name it as written
        pools = []
        for pool in s.cluster.pools:
            fixed = fix(pool.model)
            if fixed != pool.model:
                served = pool.served_model_name or pool.model
                pool = pool.model_copy(update={"model": fixed, "served_model_name": served})
            pools.append(pool)
        updates["cluster"] = s.cluster.model_copy(update={"pools": pools})
    return s.model_copy(update=updates) if updates else s
