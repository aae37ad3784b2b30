"""Validation errors as people read them: one line each, naming the file and the field.

Pydantic's messages are kept where they are clear; an unknown key suggests the field
meant (or says it was renamed, or that it belongs to the other workload type), a union
reports only the branch the input meant, and our own validators' messages lose their
"Value error, " prefix.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel

from servesim.config.workload_kinds import (
    AgentWorkload,
    GuidellmWorkload,
    InferencePerfWorkload,
    MixtureWorkload,
    ReasoningWorkload,
    SessionWorkload,
)
from servesim.config.workloads import SyntheticWorkload, TraceWorkload

#: Fields renamed so that their unit reads one way: old name -> (new name, unit).
RENAMED = {
    "interconnect_gbps": ("interconnect_gb_per_s", "GB/s"),
    "intra_node_gbps": ("intra_node_gb_per_s", "GB/s"),
    "inter_node_gbps": ("inter_node_gb_per_s", "GB/s"),
    "bandwidth_gbps": ("bandwidth_gb_per_s", "GB/s"),
    "pcie_gbps": ("pcie_gb_per_s", "GB/s"),
    "mem_bw_tbps": ("mem_bw_tb_per_s", "TB/s"),
    "swap_space_gb": ("swap_space_gib", "GiB, 2^30 bytes, as vLLM's --swap-space"),
}
#: Short names other tools give a field (vLLM's ``-tp``/``-pp``/``-dp``, Ray and DeepSpeed
#: configs' ``tp_size``): the field they mean, suggested where that field exists.
ALIASES = {
    "tp": "tensor_parallel_size",
    "tp_size": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "dp": "data_parallel_size",
    "dp_size": "data_parallel_size",
    "ep": "expert_parallel_size",
    "ep_size": "expert_parallel_size",
}
#: Past this many fields a section's unknown-key message names none of them.
_LIST_KNOWN_UP_TO = 12
_WORKLOAD_TYPES: dict[str, type[BaseModel]] = {
    "synthetic": SyntheticWorkload,
    "trace": TraceWorkload,
    "sessions": SessionWorkload,
    "mixture": MixtureWorkload,
    "agents": AgentWorkload,
    "reasoning": ReasoningWorkload,
    "inference-perf": InferencePerfWorkload,
    "guidellm": GuidellmWorkload,
}
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
                    kept.append({**e, "loc": loc[:i] + loc[i + 1 :]})
                break
        else:
            kept.append(e)
    return kept or errors


def format_validation_error(err: Any, source: str, root: type[BaseModel], prefix: str = "") -> str:
    """One line per error: ``source: dotted.field: what was wrong``. ``root`` is the model
    validated (the locations are its fields); ``prefix`` heads the dotted names of a part
    validated on its own (``gpu`` for a profile's GpuConfig)."""
    lines = []
    errors = _union_branches(err.errors())
    renamed_to = {
        (*map(str, e["loc"][:-1]), RENAMED[str(e["loc"][-1])][0])
        for e in errors
        if e["type"] == "extra_forbidden" and e["loc"] and str(e["loc"][-1]) in RENAMED
    }
    for e in errors:
        raw_loc = [str(p) for p in e["loc"]]
        if e["type"] == "missing" and tuple(raw_loc) in renamed_to:
            continue  # given under its old name, which the line about the rename says
        # union tags (workload types) are dropped from the dotted name, except where the last
        # part is an unknown key that happens to be named like one (``workload: {trace: ...}``)
        key = raw_loc[-1:] if e["type"] == "extra_forbidden" else []
        parts = [p for p in raw_loc[: len(raw_loc) - len(key)] if p not in _WORKLOAD_TYPES] + key
        loc = ".".join([prefix] * bool(prefix) + parts)
        msg = e["msg"]
        if e["type"] == "value_error" and "error" in e.get("ctx", {}):
            msg = str(e["ctx"]["error"])  # our own validators' messages, without "Value error, "
        if e["type"] == "extra_forbidden":
            msg = _unknown_key_message(raw_loc, root)
        if e["type"] == "bool_for_number":  # raised by the model: the field is in its context
            loc = ".".join([p for p in (loc, str(e["ctx"]["field"])) if p])
            e = {**e, "input": e["ctx"]["value"]}
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


def _unknown_key_message(loc: list[str], root: type[BaseModel]) -> str:
    key = loc[-1] if loc else ""
    if key in RENAMED:
        new, unit = RENAMED[key]
        return f"was renamed to {new} ({unit})"
    in_workload = "workload" in root.model_fields and len(loc) == 3 and loc[0] == "workload"
    if in_workload and loc[1] in _WORKLOAD_TYPES:
        other = "trace" if loc[1] == "synthetic" else "synthetic"
        if key in _WORKLOAD_TYPES[other].model_fields:
            return (
                f"a field of {other} workloads, and this workload is a {loc[1]} one; "
                f"set workload.type: {other} (--set workload.type={other}) to switch"
            )
    known = sorted(getattr(model_at(root, loc[:-1]), "model_fields", {}))
    if ALIASES.get(key) in known:
        return f"unknown key; did you mean {ALIASES[key]}?"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6) if known else []
    if close:
        return f"unknown key; did you mean {close[0]}?"
    if known and len(known) <= _LIST_KNOWN_UP_TO:
        return f"unknown key (known: {', '.join(known)})"
    return "unknown key"


def model_at(root: type[BaseModel], loc: list[str]) -> Any:
    """The config model at a location (list indices and union tags, as pydantic writes
    them, are skipped); None where there is no single model."""
    model: Any = root
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
    rest = loc[loc.index(after) + 1 :]
    for m in models:
        tag = getattr(m.model_fields.get("type"), "default", None)
        if rest and rest[0] in (m.__name__, tag):
            return m
    return None
