"""guidellm's scenario file, read: its profile, rate, limits, seed and synthetic data.

Two layouts are read (``servesim.workload.guidellm`` says what each field does to the
requests sent):

- the flat one of guidellm 0.3 - 0.6 (``BenchmarkGenerativeTextArgs``: ``profile`` (0.3:
  ``rate_type``), ``rate``, ``data``, ``random_seed``, ``max_seconds``, ``max_requests``,
  ``rampup``), ``data`` entries being ``"prompt_tokens=512,output_tokens=128"`` strings or
  mappings;
- the ``spec`` one of guidellm 0.7 (``BenchmarkScenario``: ``spec.profile`` with ``kind``,
  ``rate`` or ``streams`` and ``max_concurrency``; ``spec.data`` of ``kind:
  synthetic_text``; ``spec.constraints`` ``max_duration`` (``seconds``) and
  ``max_requests`` (``count``); ``spec.seed.value``).

A report (guidellm's ``benchmarks.json``) holds its scenario under ``args`` (0.6) or
``config`` (0.7); guidellm reads either, and so does servesim. A field that would shape the
requests in a way servesim does not model is refused with its name.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from servesim.errors import ConfigError

#: guidellm's default seed (``random_seed``, 0.7: ``seed.value``).
DEFAULT_SEED = 42
_LENGTH_KEYS = tuple(f"{w}_tokens{s}" for w in ("prompt", "output") for s in ("", "_stdev", "_min", "_max"))
#: Flat-layout fields that shape no request (where the requests go, how they are reported).
_FLAT_IGNORED = {
    "target",
    "backend",
    "backend_type",
    "backend_kwargs",
    "backend_args",
    "model",
    "processor",
    "processor_args",
    "data_args",
    "data_samples",
    "data_column_mapper",
    "data_preprocessors",
    "data_preprocessors_kwargs",
    "data_finalizer",
    "data_collator",
    "data_sampler",
    "data_num_workers",
    "dataloader_kwargs",
    "outputs",
    "output_dir",
    "output_path",
    "output_extras",
    "output_sampling",
    "sample_requests",
    "prefer_response_metrics",
    "max_errors",
    "max_error_rate",
    "max_global_error_rate",
    "request_type",
    "request_format",
    "disable_progress",
    "display_scheduler_stats",
    "metadata",
    "labels",
    "data_request_formatter",
    "warmup_percent",
    "cooldown_percent",
}
_SPEC_IGNORED = {
    "backend",
    "tokenizer",
    "data_column_mapper",
    "data_preprocessors",
    "data_finalizer",
    "data_loader",
    "outputs",
    "metrics",
}


def read_scenario(path: str | Path) -> dict[str, Any]:
    """guidellm's scenario file (JSON or YAML, as ``guidellm benchmark --scenario`` reads it), as a dict."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such guidellm scenario file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: cannot read: {err}") from None
    try:
        doc = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{p}: line {err.lineno}: not JSON ({err.msg})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: not YAML: {str(err).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{p}: not readable: nested too deeply") from None
    if isinstance(doc, dict):
        for key in ("config", "args"):  # a guidellm report holds its scenario under one of these
            if isinstance(doc.get(key), dict) and ("spec" in doc[key] or "data" in doc[key]):
                doc = doc[key]
                break
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{p}: expected a mapping (guidellm's scenario: profile, rate, data, ...), "
            f"got {type(doc).__name__}"
        )
    return doc


def _num(value: Any, field: str, src: str, *, integer: bool = False) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not value > 0
        or not math.isfinite(value)
    ):
        raise ConfigError(f"{src}: {field} must be a number > 0, got {value!r}")
    if integer and value != int(value):
        raise ConfigError(f"{src}: {field} must be a whole number, got {value!r}")
    return float(value)


def _one(value: Any, field: str, src: str, what: str) -> float | None:
    """A rate or stream count given as one number (or a one-element list); several are several benchmarks."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if isinstance(value, str) and "," in value:
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, list | tuple):
        if len(value) > 1:
            raise ConfigError(
                f"{src}: {field}: {len(value)} {what}s run {len(value)} benchmarks one after "
                f"another; servesim predicts one: give one {what} (a scenario per {what})"
            )
        value = value[0] if value else None
    return None if value is None else _num(value, field, src)


def parse_data(entry: Any, field: str, src: str) -> dict[str, Any]:
    """One ``data`` entry: a ``k=v,...`` string, a JSON string or a mapping of synthetic-text fields."""
    if isinstance(entry, str):
        entry = _data_text(entry, field, src)
    if not isinstance(entry, dict):
        raise ConfigError(
            f"{src}: {field} must be synthetic data (prompt_tokens=..,output_tokens=..), got {entry!r}"
        )
    kind = entry.get("kind", entry.get("type", "synthetic_text"))
    if kind != "synthetic_text":
        raise ConfigError(
            f"{src}: {field}.kind {kind!r} is not modelled; expected synthetic_text "
            "(datasets are loaded by guidellm, not carried by servesim)"
        )
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key in ("kind", "type"):
            continue
        if key == "turns":
            if int(_num(value, f"{field}.turns", src, integer=True)) != 1:
                raise ConfigError(
                    f"{src}: {field}.turns: multi-turn conversations are not modelled; expected 1"
                )
            continue
        if key == "prefix_buckets":
            if value:
                raise ConfigError(f"{src}: {field}.prefix_buckets: shared prefixes are not modelled")
            continue
        if key not in _LENGTH_KEYS:
            raise ConfigError(f"{src}: {field}.{key} is not modelled; expected {', '.join(_LENGTH_KEYS)}")
        if value is not None:
            out[key] = int(_num(value, f"{field}.{key}", src, integer=True))
    for which in ("prompt", "output"):
        if f"{which}_tokens" not in out:
            why = (
                " (without it guidellm leaves max_tokens to the server and the model's EOS ends each "
                "response, which no simulator can know)"
                if which == "output"
                else ""
            )
            raise ConfigError(f"{src}: {field}.{which}_tokens is required{why}")
    return out


def _data_text(entry: str, field: str, src: str) -> Any:
    """A ``data`` entry written as text: a JSON object or ``key=value`` pairs separated by commas."""
    s = entry.strip()
    if s.startswith("{"):
        try:
            return json.loads(s)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{src}: {field}: not JSON ({err.msg})") from None
    if s.count("=") >= 1:
        out = {}
        for item in s.split(","):
            key, eq, value = item.partition("=")
            if not eq:
                raise ConfigError(
                    f"{src}: {field}: expected key=value pairs separated by commas, got {item!r}"
                )
            out[key.strip()] = value.strip()
        return out
    raise ConfigError(
        f"{src}: {field}: {s!r} is a dataset (a file or a Hugging Face name), which "
        "servesim does not read; give synthetic data, e.g. "
        "'prompt_tokens=512,output_tokens=128'"
    )


def _spec_settings(doc: dict[str, Any], src: str) -> dict[str, Any]:
    """The settings of a guidellm 0.7 scenario (``spec`` layout)."""
    spec = _spec(doc, src)
    prof, kind, value = _spec_profile(spec, src)
    cap = prof.get("max_concurrency")
    max_seconds, max_requests = _spec_constraints(spec, src)
    seed = spec.get("seed") or {}
    data = spec.get("data")
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{src}: spec.data must be a non-empty list")
    return {
        "kind": kind,
        "value": value,
        "cap": None if cap is None else int(_num(cap, "spec.profile.max_concurrency", src, integer=True)),
        "rampup": float(prof.get("rampup_duration") or 0.0),
        "seed": int(seed.get("value", DEFAULT_SEED)) if isinstance(seed, dict) else int(seed),
        "data": data,
        "data_field": "spec.data",
        "max_seconds": max_seconds,
        "max_requests": max_requests,
        "layout": "spec",
        "rate_field": "spec.profile.streams" if "streams" in prof else "spec.profile.rate",
        "rampup_field": "spec.profile.rampup_duration",
    }


def _spec(doc: dict[str, Any], src: str) -> dict[str, Any]:
    """The scenario's ``spec``, its one benchmark checked and every field known."""
    bench = doc.get("benchmarks")
    if isinstance(bench, list) and len(bench) > 1:
        raise ConfigError(
            f"{src}: benchmarks: {len(bench)} benchmarks; servesim predicts one (give one entry)"
        )
    if isinstance(bench, list) and bench and bench[0]:
        raise ConfigError(f"{src}: benchmarks[0]: per-benchmark overrides are not read; write them into spec")
    spec = doc.get("spec") or {}
    if not isinstance(spec, dict):
        raise ConfigError(f"{src}: spec must be a mapping")
    bad = [
        k
        for k in spec
        if k.replace("-", "_")
        not in {*_SPEC_IGNORED, "profile", "data", "constraints", "seed", "data_preprocessors"}
    ]
    if bad:
        raise ConfigError(f"{src}: spec.{bad[0]} is not modelled")
    return spec


def _spec_profile(spec: dict[str, Any], src: str) -> tuple[dict[str, Any], str, float | None]:
    """``spec.profile`` as a mapping, its kind (``async`` read as ``constant``) and its one rate
    or stream count."""
    prof = spec.get("profile") or {"kind": "sweep"}
    if isinstance(prof, str):
        prof = {"kind": prof}
    if not isinstance(prof, dict):
        raise ConfigError(f"{src}: spec.profile must be a mapping with a kind")
    kind = str(prof.get("kind", "sweep"))
    if kind == "async":
        kind = "constant"
    if "streams" in prof:
        value = _one(prof.get("streams"), "spec.profile.streams", src, "stream count")
    else:
        value = _one(prof.get("rate"), "spec.profile.rate", src, "rate")
    for key in ("warmup", "cooldown"):
        if prof.get(key):
            raise ConfigError(
                f"{src}: spec.profile.{key}: leaving a phase out of the figures is not modelled"
            )
    seen = {
        "kind",
        "rate",
        "streams",
        "max_concurrency",
        "rampup_duration",
        "warmup",
        "cooldown",
        "random_seed",
    }
    bad = [k for k in prof if k not in seen]
    if bad:
        raise ConfigError(f"{src}: spec.profile.{bad[0]} is not modelled")
    return prof, kind, value


def _spec_constraints(spec: dict[str, Any], src: str) -> tuple[float | None, float | None]:
    """``max_seconds`` and ``max_requests`` from ``spec.constraints`` (None where not given)."""
    max_seconds = max_requests = None
    cons = spec.get("constraints") or []
    if not isinstance(cons, list):
        raise ConfigError(f"{src}: spec.constraints must be a list")
    for k, c in enumerate(cons):
        ck = c.get("kind") if isinstance(c, dict) else None
        if ck == "max_duration":
            max_seconds = _one(c.get("seconds"), f"spec.constraints[{k}].seconds", src, "duration")
        elif ck == "max_requests":
            max_requests = _one(c.get("count"), f"spec.constraints[{k}].count", src, "count")
        elif ck in ("max_errors", "max_error_rate", "max_global_error_rate"):
            continue  # servesim's requests do not fail
        else:
            raise ConfigError(
                f"{src}: spec.constraints[{k}].kind {ck!r} is not modelled; expected "
                "max_duration or max_requests"
            )
    return max_seconds, max_requests


def _flat_settings(doc: dict[str, Any], src: str) -> dict[str, Any]:
    """The settings of a guidellm 0.3 - 0.6 scenario (flat layout)."""
    known = {
        "profile",
        "rate_type",
        "rate",
        "data",
        "random_seed",
        "max_seconds",
        "max_requests",
        "rampup",
        "warmup",
        "cooldown",
        "over_saturation",
    }
    for key in doc:
        if key.replace("-", "_") == "max_concurrency":
            raise ConfigError(
                f"{src}: max_concurrency is not a field of guidellm 0.6's scenario (it ignores "
                "it: its cap is the GUIDELLM__MAX_CONCURRENCY setting, 512 by default); use "
                "0.7's spec.profile.max_concurrency, or profile throughput with its rate"
            )
        k = key.replace("-", "_")
        if k not in known and k not in _FLAT_IGNORED:
            raise ConfigError(f"{src}: {key} is not a guidellm scenario field servesim models")
    d = {k.replace("-", "_"): v for k, v in doc.items()}
    if d.get("over_saturation"):
        raise ConfigError(f"{src}: over_saturation stops a run where the real server saturates; not modelled")
    for key in ("warmup", "cooldown"):
        if d.get(key):
            raise ConfigError(f"{src}: {key}: leaving a phase out of the figures is not modelled")
    kind = str(d.get("profile", d.get("rate_type", "sweep")))
    value = _one(d.get("rate"), "rate", src, "rate")
    cap = value if kind == "throughput" else None  # 0.6's ThroughputProfile: rate[0] is its max_concurrency
    data = d.get("data")
    if data is None or data == []:
        raise ConfigError(f"{src}: data is required (e.g. 'prompt_tokens=512,output_tokens=128')")
    ms = d.get("max_seconds")
    mr = d.get("max_requests")
    return {
        "kind": kind,
        "value": value,
        "cap": None if cap is None else int(_num(cap, "rate", src, integer=True)),
        "rampup": float(d.get("rampup") or 0.0),
        "seed": int(d.get("random_seed", DEFAULT_SEED)),
        "data": data if isinstance(data, list) else [data],
        "data_field": "data",
        "max_seconds": None if ms is None else _num(ms, "max_seconds", src),
        "max_requests": None if mr is None else _num(mr, "max_requests", src, integer=True),
        "layout": "flat",
        "rate_field": "rate",
        "rampup_field": "rampup",
    }


def scenario_settings(doc: dict[str, Any], src: str) -> dict[str, Any]:
    """The profile, rate, limits, seed and data of a scenario, whichever layout it has."""
    return _spec_settings(doc, src) if "spec" in doc else _flat_settings(doc, src)
