"""The whole scenario, and reading it from a file, a dict and ``--set`` overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from servesim.config._base import _Strict
from servesim.config.cluster import ClusterConfig
from servesim.config.engine import EngineConfig
from servesim.config.parts import (
    GpuConfig,
    HardwareConfig,
    ModelConfig,
    ParallelConfig,
    RunConfig,
    SloConfig,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadConfig,
)
from servesim.errors import ConfigError


class Scenario(_Strict):
    """One simulation: model on hardware with an engine config, serving a workload."""

    name: str = "scenario"
    model: ModelConfig = ModelConfig()
    hardware: HardwareConfig = HardwareConfig()
    parallel: ParallelConfig = ParallelConfig()
    engine: EngineConfig = EngineConfig()
    workload: WorkloadConfig = TraceWorkload(path="builtin:azure_conv")
    slo: SloConfig = SloConfig(ttft_s=2.0, tpot_s=0.1)
    run: RunConfig = RunConfig()
    cluster: ClusterConfig | None = Field(None, description=(
        "Pools, router, disaggregation (docs/cluster.md); None: one replica of hardware/parallel/engine."))


# --------------------------------------------------------------------------- loading


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = d
    for k in keys[:-1]:
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[k] = nxt
        cur = nxt
    cur[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``engine.max_num_seqs=64`` -> ("engine.max_num_seqs", 64); values parse as YAML scalars."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, for example engine.max_num_seqs=64")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _format_validation_error(err: Any, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not (isinstance(p, str) and p in ("synthetic", "trace")))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = e.get("input")
        quiet = isinstance(got, dict) or e["type"] in ("extra_forbidden", "missing")
        got_s = "" if quiet else f" (got {got!r})"
        lines.append(f"{source}: {loc or '<root>'}: {msg}{got_s}")
    return "\n".join(lines)


def scenario_from_dict(data: dict[str, Any], source: str = "<scenario>",
                       overrides: list[str] | None = None) -> Scenario:
    from pydantic import ValidationError

    data = dict(data or {})
    if overrides and "workload" not in data and any(o.startswith("workload.") for o in overrides):
        # Overriding a field of the default workload: start from the default's fields.
        data["workload"] = Scenario.model_fields["workload"].default.model_dump(exclude_defaults=True)
        data["workload"]["type"] = "trace"
    for text in overrides or []:
        key, value = parse_override(text)
        _set_path(data, key, value)
    wl = data.get("workload")
    if isinstance(wl, dict) and "type" not in wl:
        # The type may be left out when it is obvious: a trace names its path.
        data["workload"] = {**wl, "type": "trace" if "path" in wl else "synthetic"}
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None


def read_gpu_config(path: str | Path) -> GpuConfig:
    """A custom accelerator from a YAML/JSON file of ``hardware.gpu`` fields (name,
    bf16_tflops, mem_gb, mem_bw_tbps, ...), as ``calibrate --hardware`` takes."""
    from pydantic import ValidationError

    p = Path(path)
    try:
        import yaml

        data = yaml.safe_load(p.read_text())
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: cannot parse: {err}") from None
    try:
        return GpuConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(
            f"{p}: not a hardware description (hardware.gpu fields):\n"
            + _format_validation_error(err, str(p))
        ) from None


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read a YAML or TOML scenario file (or the built-in default when ``path`` is None)."""
    if path is None:
        return scenario_from_dict({}, "<default scenario>", overrides)
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such scenario file")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as err:  # noqa: BLE001 - parser errors differ by library
        raise ConfigError(f"{p}: cannot parse: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, found {type(data).__name__}")
    scenario = scenario_from_dict(data, str(p), overrides)
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
    elif isinstance(wl, SyntheticWorkload):
        upd = {}
        for fld in ("prompt_len", "output_len"):
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
    return s.model_copy(update=updates) if updates else s
