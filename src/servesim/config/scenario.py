"""The whole scenario, and reading it from a file, a dict and ``--set`` overrides."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from servesim.config._base import _Strict
from servesim.config.cluster import ClusterConfig
from servesim.config.engine import EngineConfig
from servesim.config.files import load_yaml_text, read_scenario_file
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

    name: str = Field("scenario", description="Name of the scenario (in reports and summary.json).")
    model: ModelConfig = Field(ModelConfig(), description="The model served.")
    hardware: HardwareConfig = Field(HardwareConfig(), description="The accelerator.")
    parallel: ParallelConfig = Field(ParallelConfig(), description="Tensor, pipeline and expert parallelism.")
    engine: EngineConfig = Field(EngineConfig(), description="The serving engine's knobs.")
    workload: WorkloadConfig = Field(TraceWorkload(path="builtin:azure_conv"), description=(
        "The requests: type: trace or type: synthetic."))
    slo: SloConfig = Field(SloConfig(ttft_s=2.0, tpot_s=0.1), description="Latency objectives.")
    run: RunConfig = Field(RunConfig(), description="Run options.")
    cluster: ClusterConfig | None = Field(None, description=(
        "Pools, router, disaggregation (docs/cluster.md); None: one replica of hardware/parallel/engine."))


_DEFAULT = Scenario()

# --------------------------------------------------------------------------- loading


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts; a number names an element of a list (``pools.0``)."""
    keys = dotted.split(".")
    cur: Any = d
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(cur, list):
            where = ".".join(keys[:i])
            if not k.isdigit():
                raise ConfigError(f"--set {dotted}: {where} is a list; name an element by its "
                                  f"index, e.g. {where}.0.{k}")
            if int(k) >= len(cur):
                have = f"indices 0 to {len(cur) - 1}" if cur else "no elements"
                raise ConfigError(f"--set {dotted}: {where} has {len(cur)} element(s) ({have}); "
                                  f"to add one, set the whole list: --set '{where}=[...]'")
            if last:
                cur[int(k)] = value
            elif isinstance(cur[int(k)], dict | list):
                cur = cur[int(k)]
            else:
                cur[int(k)] = cur = {}
            continue
        if last:
            cur[k] = value
            break
        nxt = cur.get(k)
        if nxt is None and keys[i + 1].isdigit():
            raise ConfigError(_no_list_message(dotted, keys[: i + 1], keys[i + 2:], value))
        scalar = nxt if nxt is not None else _default_at(keys[: i + 1])
        if scalar is not None and not isinstance(scalar, dict | list | BaseModel):
            raise ConfigError(_scalar_message(dotted, keys[: i + 1], scalar))
        if not isinstance(nxt, dict | list):
            nxt = {}
            cur[k] = nxt
        cur = nxt


def _default_at(keys: list[str]) -> Any:
    """The default scenario's value at a dotted path (None where it has none)."""
    obj: Any = _DEFAULT
    for k in keys:
        if not isinstance(obj, BaseModel) or k not in type(obj).model_fields:
            return None
        obj = getattr(obj, k)
    return obj


def _scalar_message(dotted: str, where: list[str], value: Any) -> str:
    """What to write instead of ``--set a.b.c=v`` when ``a.b`` holds a plain value."""
    path = ".".join(where)
    head = f"--set {dotted}: {path} is {value!r}, which has no fields"
    model = _model_at(where)
    if model is None:
        return f"{head}; set {path}=VALUE itself"
    required = [n for n, f in model.model_fields.items() if f.is_required()]
    example = ", ".join(f"{n}: ..." for n in required or [dotted.split(".")[len(where)]])
    return f"{head}; give {path} whole as a mapping: --set '{path}={{{example}}}'"


def _no_list_message(dotted: str, where: list[str], rest: list[str], value: Any) -> str:
    """What to write instead of ``--set a.list.0.field=v`` when the list is not there."""
    path = ".".join(where)
    head = f"--set {dotted}: {path} is not set, so it has no element {dotted.split('.')[len(where)]}"
    if where == ["cluster", "pools"] and len(rest) == 1:
        field = "" if rest[0] == "name" else f", {rest[0]}: {value}"
        return (f"{head}; without a cluster section the scenario is one replica: write the pools, "
                f"e.g. --set 'cluster.pools=[{{name: main{field}}}]'")
    return f"{head}; set the whole list: --set '{path}=[...]'"


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


#: Fields renamed so that their unit reads one way: old name -> (new name, unit).
RENAMED = {
    "interconnect_gbps": ("interconnect_gb_per_s", "GB/s"),
    "intra_node_gbps": ("intra_node_gb_per_s", "GB/s"),
    "inter_node_gbps": ("inter_node_gb_per_s", "GB/s"),
    "bandwidth_gbps": ("bandwidth_gb_per_s", "GB/s"),
    "pcie_gbps": ("pcie_gb_per_s", "GB/s"),
    "mem_bw_tbps": ("mem_bw_tb_per_s", "TB/s"),
}
_WORKLOAD_TYPES = {"synthetic": SyntheticWorkload, "trace": TraceWorkload}


_SCALAR_TAGS = ("str", "int", "float", "bool")


def _is_model_tag(part: str) -> bool:
    return part[:1].isupper()


def _union_branches(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the errors of the union branch the input meant (``gpu: str | GpuConfig``).

    Pydantic reports every branch, tagged in the location (``hardware.gpu.str``,
    ``hardware.gpu.GpuConfig.mem_gb``); a mapping meant the model, anything else the scalar.
    """
    scalar_input: dict[tuple[str, ...], Any] = {}
    for e in errors:
        loc = tuple(str(p) for p in e["loc"])
        if loc and loc[-1] in _SCALAR_TAGS:
            scalar_input[loc[:-1]] = e.get("input")
    if not scalar_input:
        return errors
    kept = []
    for e in errors:
        loc = tuple(str(p) for p in e["loc"])
        for i, part in enumerate(loc):
            if loc[:i] in scalar_input and (part in _SCALAR_TAGS or _is_model_tag(part)):
                meant_model = isinstance(scalar_input[loc[:i]], dict)
                if meant_model == _is_model_tag(part):
                    kept.append({**e, "loc": loc[:i] + loc[i + 1:]})
                break
        else:
            kept.append(e)
    return kept or errors


def _format_validation_error(err: Any, source: str, prefix: str = "") -> str:
    """One line per error: ``source: dotted.field: what was wrong`` (``prefix`` heads the
    dotted name of a part validated on its own)."""
    lines = []
    errors = _union_branches(err.errors())
    renamed_to = {(*map(str, e["loc"][:-1]), RENAMED[str(e["loc"][-1])][0]) for e in errors
                  if e["type"] == "extra_forbidden" and e["loc"] and str(e["loc"][-1]) in RENAMED}
    for e in errors:
        raw_loc = [str(p) for p in e["loc"]]
        if e["type"] == "missing" and tuple(raw_loc) in renamed_to:
            continue  # given under its old name, which the line about the rename says
        loc = ".".join([prefix] * bool(prefix) + [p for p in raw_loc if p not in _WORKLOAD_TYPES])
        msg = e["msg"]
        if e["type"] == "value_error" and "error" in e.get("ctx", {}):
            msg = str(e["ctx"]["error"])  # our own validators' messages, without "Value error, "
        if e["type"] == "extra_forbidden":
            msg = _unknown_key_message(raw_loc)
        if e["type"] == "union_tag_invalid":  # workload.type: neither synthetic nor trace
            ctx = e.get("ctx", {})
            loc = f"{loc}.{str(ctx.get('discriminator', 'type')).strip(chr(39))}"
            expected = " or ".join(str(ctx.get("expected_tags", "")).split(", "))
            msg = f"expected {expected}, found {ctx.get('tag')!r}"
            e = {**e, "input": {}}
        if e["type"] in ("model_type", "dict_type", "model_attributes_type") and e.get("input") is None:
            msg = "the section is empty (null); give its fields, or leave the section out"
            e = {**e, "input": {}}
        got = e.get("input")
        quiet = isinstance(got, dict) or e["type"] in ("extra_forbidden", "missing", "value_error")
        got_s = "" if quiet else f" (got {got!r})"
        lines.append(f"{source}: {loc or '<root>'}: {msg}{got_s}")
    return "\n".join(lines)


def _unknown_key_message(loc: list[str]) -> str:
    key = loc[-1] if loc else ""
    if key in RENAMED:
        new, unit = RENAMED[key]
        return f"was renamed to {new} ({unit})"
    if len(loc) == 3 and loc[0] == "workload" and loc[1] in _WORKLOAD_TYPES:
        other = "trace" if loc[1] == "synthetic" else "synthetic"
        if key in _WORKLOAD_TYPES[other].model_fields:
            return (f"a field of {other} workloads, and this workload is a {loc[1]} one; "
                    f"set workload.type: {other} (--set workload.type={other}) to switch")
    known = _fields_at(loc[:-1])
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6) if known else []
    return f"unknown key; did you mean {close[0]}?" if close else "unknown key"


def _fields_at(loc: list[str]) -> set[str]:
    """The field names of the config model at a validation error's location."""
    return set(getattr(_model_at(loc), "model_fields", {}))


def _model_at(loc: list[str]) -> Any:
    """The config model at a location (list indices and union tags, as pydantic writes
    them, are skipped); None where there is no single model."""
    model: Any = Scenario
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return None
        if part in fields:
            model = _models_in(fields[part].annotation)
        elif part in _WORKLOAD_TYPES or part.isdigit() or part[:1].isupper():
            continue  # a union tag or a list index: the model is the one already chosen
        else:
            return None
        if isinstance(model, list):
            model = _pick(model, loc, part)
    return model if hasattr(model, "model_fields") else None


def _models_in(annotation: Any) -> Any:
    """The pydantic models an annotation can hold (``X | None``, ``list[X]``, unions)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _models_in(args[0])
    if not args:
        return annotation if hasattr(annotation, "model_fields") else None
    found = [m for a in args for m in _as_list(_models_in(a))]
    return found[0] if len(found) == 1 else found or None


def _as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [] if x is None else [x]


def _pick(models: list[Any], loc: list[str], after: str) -> Any:
    """The member of a union the next tag in ``loc`` names (``trace``, ``GpuConfig``)."""
    rest = loc[loc.index(after) + 1:]
    for m in models:
        tag = getattr(m.model_fields.get("type"), "default", None)
        if rest and rest[0] in (m.__name__, tag):
            return m
    return None


def _workload_type(wl: Any) -> str | None:
    if not isinstance(wl, dict):
        return None
    return wl.get("type") or ("trace" if "path" in wl else "synthetic")


def scenario_from_dict(data: dict[str, Any], source: str = "<scenario>",
                       overrides: list[str] | None = None) -> Scenario:
    """Validate a scenario mapping after applying ``--set`` overrides (``KEY=VALUE``) to it.

    ``workload.type`` is applied first: switching the type starts the workload afresh from
    the new type's defaults (the old type's fields do not apply), and the other workload
    overrides then apply to it, in any order on the command line.
    """
    from pydantic import ValidationError

    data = dict(data or {})
    parsed = [parse_override(text) for text in overrides or []]
    if parsed and "workload" not in data and any(k.startswith("workload.") for k, _ in parsed):
        # Overriding a field of the default workload: start from the default's fields.
        data["workload"] = Scenario.model_fields["workload"].default.model_dump(exclude_defaults=True)
        data["workload"]["type"] = "trace"
    for key, value in parsed:
        if key == "workload.type" and value != _workload_type(data.get("workload")):
            data["workload"] = {"type": value}
    for key, value in parsed:
        if key != "workload.type" or not isinstance(data.get("workload"), dict):
            _set_path(data, key, value)
    wl = data.get("workload")
    if isinstance(wl, dict) and "type" not in wl:
        # The type may be left out when it is obvious: a trace names its path.
        data["workload"] = {**wl, "type": _workload_type(wl)}
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None


def gpu_config_from_dict(data: Any, source: str, where: str = "gpu") -> GpuConfig:
    """A custom accelerator from a mapping found at ``where`` in ``source`` (a hardware
    profile's ``gpu``, say); errors read as a scenario's do (renamed fields say so)."""
    from pydantic import ValidationError

    try:
        return GpuConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source, where)) from None


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
            + _format_validation_error(err, str(p))
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
