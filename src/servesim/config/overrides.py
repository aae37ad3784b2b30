"""``--set KEY=VALUE``: parsing an override and applying it to a scenario's mapping."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servesim.config.messages import model_at
from servesim.errors import ConfigError


def set_path(d: dict[str, Any], dotted: str, value: Any, default: BaseModel) -> None:
    """Set ``a.b.c`` in nested dicts; a number names an element of a list (``pools.0``).

    ``default`` is the model ``d`` will validate as, with its defaults: a path into a field
    that holds a plain value there (``hardware.gpu`` is a name) says what to write instead.
    """
    keys = dotted.split(".")
    cur: Any = d
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(cur, list):
            where = ".".join(keys[:i])
            if k.startswith("-") and k[1:].isdigit():
                raise ConfigError(
                    f"--set {dotted}: {where} is a list; name an element by its index from 0 "
                    f"(a negative index is not read), e.g. {where}.0"
                )
            if not k.isdigit():
                raise ConfigError(
                    f"--set {dotted}: {where} is a list; name an element by its index, e.g. {where}.0.{k}"
                )
            if int(k) >= len(cur):
                have = f"indices 0 to {len(cur) - 1}" if cur else "no elements"
                raise ConfigError(
                    f"--set {dotted}: {where} has {len(cur)} element(s) ({have}); "
                    f"to add one, set the whole list: --set '{where}=[...]'"
                )
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
            raise ConfigError(_no_list_message(dotted, keys[: i + 1], keys[i + 2 :], value))
        scalar = nxt if nxt is not None else _default_at(default, keys[: i + 1])
        # (a mapping field kept as a tuple of pairs, such as engine.vllm_env, takes keys)
        if scalar is not None and not isinstance(scalar, dict | list | tuple | BaseModel):
            raise ConfigError(_scalar_message(dotted, keys[: i + 1], scalar, type(default)))
        if not isinstance(nxt, dict | list):
            nxt = {}
            cur[k] = nxt
        cur = nxt


def _default_at(default: BaseModel, keys: list[str]) -> Any:
    """The default's value at a dotted path (None where it has none)."""
    obj: Any = default
    for k in keys:
        if not isinstance(obj, BaseModel) or k not in type(obj).model_fields:
            return None
        obj = getattr(obj, k)
    return obj


def _scalar_message(dotted: str, where: list[str], value: Any, root: type[BaseModel]) -> str:
    """What to write instead of ``--set a.b.c=v`` when ``a.b`` holds a plain value."""
    path = ".".join(where)
    head = f"--set {dotted}: {path} is {value!r}, which has no fields"
    model = model_at(root, where)
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
        return (
            f"{head}; without a cluster section the scenario is one replica: write the pools, "
            f"e.g. --set 'cluster.pools=[{{name: main{field}}}]'"
        )
    return f"{head}; set the whole list: --set '{path}=[...]'"


def parse_override(text: str, root: type[BaseModel] | None = None) -> tuple[str, Any]:
    """``engine.max_num_seqs=64`` -> ("engine.max_num_seqs", 64); values parse as YAML scalars.

    With ``root`` (the model the key is a path into), a number given to a text field stays the
    text typed: ``engine.version=0.10`` is "0.10", not YAML's number 0.1."""
    import yaml

    from servesim.config.files import TOO_DEEP, _DuplicateKey, _UniqueKeyLoader

    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, for example engine.max_num_seqs=64")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    if "" in (k.strip() for k in key.split(".")):
        raise ConfigError(f"--set {text!r}: an empty part in the key {key!r}; expected names joined by dots")
    try:
        value = yaml.load(raw, Loader=_UniqueKeyLoader) if raw.strip() else ""  # noqa: S506 - safe
    except _DuplicateKey as dup:
        raise ConfigError(
            f"--set {key}: the value gives key {dup.key!r} twice; each key may appear once"
        ) from None
    except RecursionError:
        raise ConfigError(f"--set {key}: the value is {TOO_DEEP}") from None
    except yaml.YAMLError:
        value = raw
    if root is not None and isinstance(value, int | float) and not isinstance(value, bool):
        keys = key.split(".")
        model = model_at(root, keys[:-1])
        field = model.model_fields.get(keys[-1]) if model is not None else None
        if field is not None and field.annotation in (str, str | None):
            value = raw.strip()
    return key, value
