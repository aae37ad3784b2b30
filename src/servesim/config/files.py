"""Reading a scenario file's text into a plain mapping, refusing what is not one.

A scenario file is UTF-8 text in YAML (``.yaml``, ``.yml``; ``.json`` is read as YAML,
of which it is a subset) or TOML (``.toml``) whose top level is a mapping. A key given
twice is an error naming the key and its line (PyYAML keeps the last value silently;
tomllib refuses, with a message that does not name the key). Every failure is one
``ConfigError`` line that names the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from servesim.errors import ConfigError

YAML_SUFFIXES = (".yaml", ".yml", ".json")
SUFFIXES = (*YAML_SUFFIXES, ".toml")
_EXPECTED = "a YAML (.yaml, .yml) or TOML (.toml) scenario file"
_MAX_BYTES = 64 << 20  # a scenario is a page of text; this is surely not one


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping key given twice is an error."""


def _construct_unique_mapping(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *anchor' merges are keys of their own kind
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key; the base constructor says so
            break
        if first is not None:
            raise _DuplicateKey(key, line, first)
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(key, line, first)
        self.key, self.line, self.first = key, line, first


#: A file nested past Python's recursion limit: its reader cannot hold it.
TOO_DEEP = "nested too deeply to read (hundreds of levels of lists or mappings); a scenario nests a few"


def load_yaml_text(text: str, source: str) -> Any:
    """YAML text as Python data; a duplicate key or a syntax error is a ``ConfigError``."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        raise ConfigError(
            f"{source}: line {dup.line}: duplicate key {dup.key!r} (first given on "
            f"line {dup.first}); each key may appear once"
        ) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = " ".join(str(x) for x in (err.context, err.problem) if x)
        raise ConfigError(f"{source}: {where}invalid YAML: {what}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: invalid YAML: {err}") from None
    except RecursionError:  # the parser recurses once per level of brackets or indentation
        raise ConfigError(f"{source}: {TOO_DEEP}") from None


def load_toml_text(text: str, source: str) -> dict[str, Any]:
    """TOML text as a dict; errors name the line (and the key, for a duplicate)."""
    import tomllib

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{source}: {TOO_DEEP}") from None
    except tomllib.TOMLDecodeError as err:
        msg = str(err)
        at = re.search(r"\s*\(at line (\d+), column \d+\)$", msg) or re.search(
            r"\s*\(at end of document\)$", msg
        )
        bare = msg[: at.start()] if at else msg
        line = int(at.group(1)) if at and at.groups() else None
        where = f"line {line}: " if line else ""
        if bare.startswith("Cannot overwrite a value") and line:
            key = _toml_key_at(text, line)
            raise ConfigError(f"{source}: {where}duplicate key {key!r}; each key may appear once") from None
        twice = re.match(r"Cannot declare \((.*)\) twice", bare)
        if twice:
            table = ".".join(x.strip().strip("'\"") for x in twice.group(1).split(",") if x.strip())
            raise ConfigError(
                f"{source}: {where}table [{table}] is declared twice; each table may appear once"
            ) from None
        raise ConfigError(f"{source}: {where}invalid TOML: {bare}") from None


def _toml_key_at(text: str, line: int) -> str:
    """The dotted key assigned on ``line`` (1-based), prefixed by the table it is in."""
    lines = text.splitlines()
    key = lines[line - 1].split("=", 1)[0].strip() if line <= len(lines) else "?"
    for prev in reversed(lines[: line - 1]):
        head = re.match(r"\s*\[+([^\]]+)\]+", prev)
        if head:
            return f"{head.group(1).strip()}.{key}"
    return key


def read_scenario_file(path: Path) -> dict[str, Any]:
    """The mapping a scenario file holds, or a one-line ``ConfigError`` saying why not."""
    if not path.exists():
        raise ConfigError(f"{path}: no such scenario file")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; expected {_EXPECTED}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        got = f"extension {path.suffix!r}" if path.suffix else "no extension"
        raise ConfigError(f"{path}: {got}; expected {_EXPECTED}")
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise ConfigError(
                f"{path}: {path.stat().st_size:,} bytes is too large for a scenario; expected {_EXPECTED}"
            )
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{path}: UTF-16 text; expected {_EXPECTED}, saved as UTF-8")
    if b"\x00" in raw:
        raise ConfigError(f"{path}: a binary file (it holds NUL bytes); expected {_EXPECTED}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {err.start}: 0x{raw[err.start]:02x}); "
            f"expected {_EXPECTED}, saved as UTF-8"
        ) from None
    data = load_toml_text(text, str(path)) if suffix == ".toml" else load_yaml_text(text, str(path))
    if data is None:
        raise ConfigError(
            f"{path}: the file is empty; expected a mapping of scenario sections "
            "(model, hardware, parallel, engine, workload, slo, run, cluster); "
            "write {} for the default scenario"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level is a {_kind(data)}; expected a mapping of scenario "
            "sections (model, hardware, parallel, engine, workload, slo, run, cluster)"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(
            f"{path}: top-level key {bad[0]!r} is not a name; expected section names "
            "(model, hardware, parallel, engine, workload, slo, run, cluster)"
        )
    return data


def _kind(x: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(x), type(x).__name__
    )
