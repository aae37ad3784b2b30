"""The reference of every scenario field, generated from the config models.

``render_markdown()`` walks ``Scenario`` and writes one table per section: each field's
name, type, unit, default, the vLLM option it mirrors and its description. The unit and
the vLLM option come from a field's ``json_schema_extra`` (``{"unit": ..., "vllm": ...}``)
or, for the unit, from the suffix of its name (``_s``, ``_gb_per_s``, ...). The file
``docs/scenario_reference.md`` is this function's output, kept in step by a test;
regenerate it with::

    python -m servesim.config.reference docs/scenario_reference.md
"""

from __future__ import annotations

import math
import sys
import types
import typing
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

#: Units read from a field name's suffix (the longest suffix that matches wins).
SUFFIX_UNITS = {
    "_s": "s",
    "_ms": "ms",
    "_us": "µs",
    "_gb_per_s": "GB/s",
    "_tb_per_s": "TB/s",
    "_gb": "GB",
    "_gib": "GiB",
    "_bytes": "bytes",
    "_tflops": "TFLOP/s",
    "_w": "W",
    "_per_hour": "USD/hour",
    "_tokens": "tokens",
}

_INTRO = """\
# Scenario reference

Every field of a scenario file, section by section. A scenario file is UTF-8 text, YAML
(`.yaml`, `.yml`; `.json` is read as YAML) or TOML (`.toml`), whose top level is a mapping
of the sections below; a key given twice is an error, and so is an unknown key. A field
has a default unless marked `required` (those are inside optional parts: a custom GPU, a
pool, a trace's path). `--set KEY=VALUE` overrides any field by its dotted name
(`engine.max_num_seqs=64`; `cluster.pools.0.num_replicas=2` for one element of a list).
Units are in the names (`_s`, `_ms`, `_us`, `_gb_per_s`, ...) or in the unit column;
**vLLM** names the `vllm serve` option (or API field) a setting mirrors.

This page is generated from the config models (`servesim.config`):
`python -m servesim.config.reference docs/scenario_reference.md` rewrites it, and a test
checks that it is up to date.
"""


def unit_of(name: str, info: FieldInfo) -> str:
    """A field's unit: its ``json_schema_extra["unit"]``, else its name's suffix, else ''."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "unit" in extra:
        return str(extra["unit"])
    matches = [s for s in SUFFIX_UNITS if name.endswith(s)]
    return SUFFIX_UNITS[max(matches, key=len)] if matches else ""


def vllm_of(info: FieldInfo) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return str(extra.get("vllm", ""))


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The config models an annotation holds (through ``X | None``, ``list[X]``, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def type_name(annotation: Any) -> str:
    """A short, readable type: ``int``, ``float or null``, ``"fcfs" or "priority"``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " or ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return f"{text} or null" if type(None) in args else text
    if origin is list:
        return f"list of {type_name(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def bounds_of(info: FieldInfo) -> str:
    """``>= 1``, ``> 0, <= 1``: the range a field's ``Field(ge=..., ...)`` allows."""
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    out = []
    for meta in info.metadata:
        for attr, sign in signs.items():
            v = getattr(meta, attr, None)
            if v is not None:
                out.append(f"{sign} {_value(v)}")
        if getattr(meta, "min_length", None):
            out.append(f"at least {meta.min_length}")
    return ", ".join(out)


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Enum):
        return str(v.value)
    if isinstance(v, BaseModel):
        fields = v.model_dump(exclude_defaults=True)
        inner = ", ".join(f"{k}: {_value(x)}" for k, x in fields.items())
        return "{" + inner + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return f"{v:g}" if abs(v) >= 1e6 else str(v)
    if isinstance(v, int) and abs(v) >= 10_000:
        return f"{v:_}"
    return str(v)


def default_of(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return _value(info.default_factory())  # type: ignore[call-arg]
    if info.default is PydanticUndefined:
        return "required"
    return _value(info.default)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _sections(root: type[BaseModel]) -> list[tuple[list[str], type[BaseModel]]]:
    """(paths, model) for the root and every model reachable from it, first use first."""
    seen: dict[type[BaseModel], list[str]] = {}
    order: list[tuple[list[str], type[BaseModel]]] = []

    def visit(path: str, model: type[BaseModel]) -> None:
        if model in seen:
            seen[model].append(path)
            return
        seen[model] = [path]
        order.append((seen[model], model))
        for name, info in model.model_fields.items():
            sub = f"{path}.{name}" if path else name
            if typing.get_origin(info.annotation) is list or "list[" in str(info.annotation):
                sub += ".N"
            for m in _models(info.annotation):
                visit(sub, m)

    visit("", root)
    return order


def render_markdown() -> str:
    """The whole reference page (Markdown)."""
    from servesim.config.scenario import Scenario

    out = [_INTRO]
    for paths, model in _sections(Scenario):
        title = model.__name__
        out.append(f"\n## {title}\n")
        where = ", ".join(f"`{p}`" for p in paths) if paths[0] else "the top level of the file"
        doc = " ".join((model.__doc__ or "").split("\n\n")[0].split())
        out.append(f"At {where}. {doc}".rstrip() + "\n")
        out.append("| field | type | unit | default | vLLM | description |")
        out.append("|---|---|---|---|---|---|")
        for name, info in model.model_fields.items():
            vllm = vllm_of(info)
            bounds = bounds_of(info)
            kind = type_name(info.annotation) + (f" ({bounds})" if bounds else "")
            row = [
                f"`{name}`",
                kind,
                unit_of(name, info),
                f"`{default_of(info)}`",
                f"`{vllm}`" if vllm else "",
                info.description or "",
            ]
            out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render_markdown()
    if argv:
        with open(argv[0], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
