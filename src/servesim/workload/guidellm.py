"""The request stream of a guidellm benchmark, from guidellm's own scenario file.

guidellm (vllm-project/guidellm) runs ``guidellm benchmark --scenario FILE``; given that
file (JSON or YAML), this module builds the requests the benchmark would send, so a run can
be predicted before it is made. Two layouts of the file are read:

- the flat one of guidellm 0.3 - 0.6 (``BenchmarkGenerativeTextArgs``: ``profile`` (0.3:
  ``rate_type``), ``rate``, ``data``, ``random_seed``, ``max_seconds``, ``max_requests``,
  ``rampup``), ``data`` entries being ``"prompt_tokens=512,output_tokens=128"`` strings or
  mappings;
- the ``spec`` one of guidellm 0.7 (``BenchmarkScenario``: ``spec.profile`` with ``kind``,
  ``rate`` or ``streams`` and ``max_concurrency``; ``spec.data`` of ``kind:
  synthetic_text``; ``spec.constraints`` ``max_duration`` (``seconds``) and
  ``max_requests`` (``count``); ``spec.seed.value``).

A report (guidellm's ``benchmarks.json``) holds its scenario under ``args`` (0.6) or
``config`` (0.7); guidellm reads either, and so does servesim.

Modelled from guidellm's source (v0.6.1 and v0.7.3; ``scheduler/strategies.py``,
``benchmark/profiles``, ``utils/random.py``, ``data/deserializers/synthetic.py``,
``settings.py``):

- **Rates** (``AsyncConstantStrategy``, ``AsyncPoissonStrategy``): ``constant`` (0.7 also
  ``async``) sends request k (k = 1, 2, ...) at k / rate: evenly spaced, the first one a
  gap after the start, not at it; with ``rampup`` r the rate climbs linearly from 0 over r
  seconds (request 1 at 0, request k <= rate r / 2 at sqrt(2 k r / rate), later ones at r +
  (k - rate r / 2) / rate). ``poisson`` adds ``random.Random(seed).expovariate(rate)``
  gaps from the start. guidellm keeps one such generator per worker process (up to 10),
  all seeded alike, over one shared clock, so its gaps are the seed's sequence repeated in
  each worker and interleaved as the workers ask; servesim draws the sequence once: the
  same rate and gap distribution, not the same instants.
- **Closed loop** (``ConcurrentStrategy``, ``SynchronousStrategy``,
  ``ThroughputStrategy``): ``concurrent`` keeps N requests in flight (N = ``rate`` in 0.6,
  ``streams`` in 0.7), each sent when one finishes; ``synchronous`` is concurrent 1;
  ``throughput`` sends everything at the start under its ``max_concurrency`` (0.6: the
  ``rate``). Sent as servesim's benchmark clients (``Workload.clients``): each request goes
  out as soon as fewer than N are in flight.
- **Concurrency cap**: every strategy without its own limit is capped at guidellm's
  ``max_concurrency`` setting, 512 requests in flight in 0.6 and 10,240 in 0.7 (``0.7:
  profile.max_concurrency`` sets it for constant and poisson); a request due while the
  cap is reached waits for a slot, as a guidellm worker does.
- **Lengths** (``IntegerRangeSampler``, drawn with Python's ``random.Random``, as guidellm
  does, so the lengths are guidellm's own): prompts seeded with ``random_seed`` (42 by
  default), outputs with ``random_seed + 1``; without ``_stdev`` a length is uniform on
  [min, max] (a fixed length when they are equal or absent); with it, normal, clipped to
  [min, max] and rounded, min defaulting to max(1, mean - 5 stdev) and max to mean + 5
  stdev. guidellm sends ``max_tokens`` = the output length with ``ignore_eos``, so each
  request generates exactly its output length. The server sees the prompt plus what its
  tokenizer or chat template adds (``num_special_tokens``; guidellm's default endpoint is
  ``/v1/chat/completions``, whose template adds more than a BOS); guidellm builds prompts
  of Faker text cut to the length and decoded, which the server's re-tokenization can move
  by a few tokens: not modelled.
- **Limits**: ``max_requests`` sends that many; ``max_seconds`` sends, in an open-loop
  profile, the requests due before it. guidellm also cancels the requests still in flight
  at ``max_seconds``; servesim lets them finish. A closed-loop profile's request count
  under ``max_seconds`` depends on the server's speed, so it needs ``max_requests``.

Refused with the field named: ``sweep`` and several rates or streams (several benchmarks:
give one rate), ``rampup`` outside ``constant``, trace replay, datasets other than
synthetic text (files, Hugging Face), multi-turn conversations, prefix buckets, and
``over_saturation`` (it stops a run where the real server saturates).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from servesim.errors import ConfigError
from servesim.workload.base import BenchmarkClients, Workload
from servesim.workload.limits import check_memory
from servesim.workload.notices import add_notice, notice

#: guidellm's default seed (``random_seed``, 0.7: ``seed.value``).
DEFAULT_SEED = 42
#: guidellm's ``settings.max_concurrency``: requests in flight at most, where a strategy sets no limit.
DEFAULT_MAX_CONCURRENCY = {"flat": 512, "spec": 10240}
_OPEN = ("constant", "poisson")
_CLOSED = ("concurrent", "synchronous", "throughput")
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


def _parse_data(entry: Any, field: str, src: str) -> dict[str, Any]:
    """One ``data`` entry: a ``k=v,...`` string, a JSON string or a mapping of synthetic-text fields."""
    if isinstance(entry, str):
        s = entry.strip()
        if s.startswith("{"):
            try:
                entry = json.loads(s)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{src}: {field}: not JSON ({err.msg})") from None
        elif s.count("=") >= 1:
            entry = {}
            for item in s.split(","):
                key, eq, value = item.partition("=")
                if not eq:
                    raise ConfigError(
                        f"{src}: {field}: expected key=value pairs separated by commas, got {item!r}"
                    )
                entry[key.strip()] = value.strip()
        else:
            raise ConfigError(
                f"{src}: {field}: {s!r} is a dataset (a file or a Hugging Face name), which "
                "servesim does not read; give synthetic data, e.g. "
                "'prompt_tokens=512,output_tokens=128'"
            )
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


def _spec_settings(doc: dict[str, Any], src: str) -> dict[str, Any]:
    """The settings of a guidellm 0.7 scenario (``spec`` layout)."""
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
    cap = prof.get("max_concurrency")
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


def integer_lengths(
    average: int, stdev: int | None, lo: int | None, hi: int | None, seed: int, count: int
) -> np.ndarray:
    """``IntegerRangeSampler``: ``count`` lengths drawn as guidellm draws them (Python's ``random``)."""
    if lo is None:
        lo = max(1, average - 5 * stdev if stdev else average)
    if hi is None:
        hi = average + 5 * stdev if stdev else average
    rng = random.Random(seed)  # noqa: S311 - guidellm's own generator, for its own draws
    if lo == hi:
        return np.full(count, lo, np.int64)
    if not stdev:
        return np.array([rng.randint(lo, hi) for _ in range(count)], np.int64)
    return np.array([round(max(lo, min(hi, rng.gauss(average, stdev)))) for _ in range(count)], np.int64)


def constant_times(rate: float, count: int, rampup: float = 0.0) -> np.ndarray:
    """``AsyncConstantStrategy.next_request_time`` for requests 1 .. ``count``, from the start."""
    k = np.arange(1, count + 1, dtype=np.float64)
    if rampup <= 0:
        return k / rate
    n_ramp = rate * rampup / 2.0
    t = np.where(k <= n_ramp, np.sqrt(2.0 * k * rampup / rate), rampup + (k - n_ramp) / rate)
    t[0] = 0.0
    return t


def poisson_times(rate: float, seed: int, count: int | None, until_s: float | None) -> np.ndarray:
    """``AsyncPoissonStrategy``: cumulative ``random.Random(seed).expovariate(rate)`` gaps."""
    rng = random.Random(seed)  # noqa: S311
    out: list[float] = []
    t = 0.0
    while count is None or len(out) < count:
        t += rng.expovariate(rate)
        if until_s is not None and t >= until_s:
            break
        out.append(t)
    return np.array(out, np.float64)


def generate_guidellm(
    path: str | Path, seed: int = 0, num_special_tokens: int = 1, rate_scale: float = 1.0
) -> Workload:
    """The requests guidellm sends for the scenario at ``path`` (see the module's docstring).
    ``seed`` is added to the scenario's own ``random_seed`` (0: guidellm's draws exactly)."""
    src = str(path)
    st = scenario_settings(read_scenario(path), src)
    kind, value = st["kind"], st["value"]
    if kind == "sweep":
        raise ConfigError(
            f"{src}: profile sweep runs several benchmarks (synchronous, throughput, then "
            "constant rates between their measured throughputs); servesim predicts one: give "
            f"profile constant (or poisson) and one {st['rate_field']}"
        )
    if kind == "replay" or kind == "trace":
        raise ConfigError(
            f"{src}: profile {kind}: trace replay is not modelled here; use workload type trace"
        )
    if kind not in (*_OPEN, *_CLOSED):
        raise ConfigError(
            f"{src}: profile {kind!r} is not a guidellm profile servesim models; expected one of "
            f"{', '.join((*_OPEN, *_CLOSED))}"
        )
    if st["rampup"] and kind != "constant":
        raise ConfigError(f"{src}: {st['rampup_field']}: a ramp-up is modelled for profile constant only")
    if len(st["data"]) > 1:
        raise ConfigError(f"{src}: {st['data_field']}: {len(st['data'])} datasets; servesim reads one")
    lengths = _parse_data(st["data"][0], f"{st['data_field']}[0]", src)
    max_s, max_n = st["max_seconds"], st["max_requests"]
    if max_s is None and max_n is None:
        raise ConfigError(
            f"{src}: give max_seconds or max_requests (synthetic data never runs out, so "
            "guidellm would run until stopped)"
        )
    expected = math.inf if max_n is None else max_n  # refused before any is drawn if too many
    if kind in _OPEN and value is not None and max_s is not None:
        expected = min(expected, max_s * value * rate_scale)
    if math.isfinite(expected):
        check_memory(
            expected, f"{src}: max_requests {max_n:g}" if expected == max_n else f"{src}: max_seconds"
        )
    meta: dict[str, Any] = {}
    cap: int | None = st["cap"]
    if kind in _OPEN:
        if value is None:
            raise ConfigError(f"{src}: profile {kind} needs {st['rate_field']} (requests/s)")
        rate = value * rate_scale
        if kind == "constant":
            n = (
                int(max_n)
                if max_n is not None
                else int(math.ceil(max_s * rate)) + 2 + int(rate * st["rampup"])
            )
            times = constant_times(rate, n, st["rampup"])
        else:
            times = poisson_times(rate, st["seed"] + seed, None if max_n is None else int(max_n), max_s)
        if max_s is not None:
            times = times[times < max_s]
        if max_n is not None:
            times = times[: int(max_n)]
        if cap is None:
            cap = DEFAULT_MAX_CONCURRENCY[st["layout"]]
        label = f"{kind} {rate:g}/s"
    else:
        if rate_scale != 1.0:
            raise ConfigError(
                f"{src}: workload.rate_scale: profile {kind} sends each request when a "
                "stream is free, it has no rate to scale"
            )
        if kind == "synchronous":
            cap = 1
        elif kind == "concurrent":
            if value is None:
                raise ConfigError(
                    f"{src}: profile concurrent needs {st['rate_field']} (the number of streams)"
                )
            cap = int(value)
        elif cap is None:
            cap = DEFAULT_MAX_CONCURRENCY[st["layout"]]
        if max_n is None:
            raise ConfigError(
                f"{src}: max_seconds alone: under profile {kind} the number of requests sent in "
                f"{max_s:g} s depends on the server's speed; give max_requests as well (the "
                "count a run of that length sent)"
            )
        if max_s is not None:
            add_notice(
                meta,
                notice(
                    "max_seconds_closed_loop",
                    f"{src}: max_seconds {max_s:g}: guidellm stops "
                    f"at whichever of max_seconds and max_requests comes first; servesim sends "
                    f"all {int(max_n):,} requests",
                    1,
                    src,
                ),
            )
        times = np.zeros(int(max_n))
        label = f"{kind}" + (f" {cap}" if kind != "synchronous" else "")
    n = len(times)
    if n == 0:
        raise ConfigError(f"{src}: no request is due within max_seconds {max_s:g}")
    base = st["seed"] + seed
    prompt = integer_lengths(
        lengths["prompt_tokens"],
        lengths.get("prompt_tokens_stdev"),
        lengths.get("prompt_tokens_min"),
        lengths.get("prompt_tokens_max"),
        base,
        n,
    )
    output = integer_lengths(
        lengths["output_tokens"],
        lengths.get("output_tokens_stdev"),
        lengths.get("output_tokens_min"),
        lengths.get("output_tokens_max"),
        base + 1,
        n,
    )
    meta["guidellm"] = {"profile": kind, "layout": st["layout"], "max_concurrency": cap, "seed": base}
    wl = Workload(
        arrival_s=times.astype(np.float64),
        num_prompt_tokens=np.maximum(prompt, 1) + num_special_tokens,
        num_output_tokens=np.maximum(output, 1),
        clients=BenchmarkClients(cap),
        source=f"guidellm {src} ({label}, {n:,} requests)",
        meta=meta,
    )
    wl.validate()
    return wl
