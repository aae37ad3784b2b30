"""The request stream of a guidellm benchmark, from guidellm's own scenario file.

guidellm (vllm-project/guidellm) runs ``guidellm benchmark --scenario FILE``; given that
file (JSON or YAML), this module builds the requests the benchmark would send, so a run can
be predicted before it is made. The file's two layouts (the flat one of guidellm 0.3 - 0.6,
the ``spec`` one of 0.7), and a report's copy of it, are read in
``servesim.workload.guidellm_scenario``.

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

import math
import random
from pathlib import Path
from typing import Any

import numpy as np

from servesim.errors import ConfigError
from servesim.workload.base import BenchmarkClients, Workload
from servesim.workload.guidellm_scenario import parse_data, read_scenario, scenario_settings
from servesim.workload.limits import check_memory
from servesim.workload.notices import add_notice, notice

#: guidellm's ``settings.max_concurrency``: requests in flight at most, where a strategy sets no limit.
DEFAULT_MAX_CONCURRENCY = {"flat": 512, "spec": 10240}
_OPEN = ("constant", "poisson")
_CLOSED = ("concurrent", "synchronous", "throughput")


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
    _check_profile(st, src)
    lengths = parse_data(st["data"][0], f"{st['data_field']}[0]", src)
    _check_limits(st, src, rate_scale)
    meta: dict[str, Any] = {}
    if st["kind"] in _OPEN:
        times, cap, label = _open_loop(st, src, seed, rate_scale)
    else:
        times, cap, label = _closed_loop(st, src, rate_scale, meta)
    n = len(times)
    if n == 0:
        raise ConfigError(f"{src}: no request is due within max_seconds {st['max_seconds']:g}")
    base = st["seed"] + seed
    prompt = _lengths(lengths, "prompt", base, n)
    output = _lengths(lengths, "output", base + 1, n)
    meta["guidellm"] = {"profile": st["kind"], "layout": st["layout"], "max_concurrency": cap, "seed": base}
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


def _check_profile(st: dict[str, Any], src: str) -> None:
    """Refuse the profiles that are not one benchmark of a modelled strategy, with the field named."""
    kind = st["kind"]
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


def _check_limits(st: dict[str, Any], src: str, rate_scale: float) -> None:
    """A run must stop: max_seconds or max_requests; and what it sends must fit in memory
    (refused before any request is drawn)."""
    kind, value = st["kind"], st["value"]
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


def _open_loop(st: dict[str, Any], src: str, seed: int, rate_scale: float) -> tuple[np.ndarray, int, str]:
    """``constant`` or ``poisson``: the send times due before the limits, the concurrency cap
    and the run's label."""
    kind, value = st["kind"], st["value"]
    max_s, max_n = st["max_seconds"], st["max_requests"]
    if value is None:
        raise ConfigError(f"{src}: profile {kind} needs {st['rate_field']} (requests/s)")
    rate = value * rate_scale
    if kind == "constant":
        n = int(max_n) if max_n is not None else int(math.ceil(max_s * rate)) + 2 + int(rate * st["rampup"])
        times = constant_times(rate, n, st["rampup"])
    else:
        times = poisson_times(rate, st["seed"] + seed, None if max_n is None else int(max_n), max_s)
    if max_s is not None:
        times = times[times < max_s]
    if max_n is not None:
        times = times[: int(max_n)]
    cap: int = DEFAULT_MAX_CONCURRENCY[st["layout"]] if st["cap"] is None else st["cap"]
    return times, cap, f"{kind} {rate:g}/s"


def _closed_loop(
    st: dict[str, Any], src: str, rate_scale: float, meta: dict[str, Any]
) -> tuple[np.ndarray, int, str]:
    """``synchronous``, ``concurrent`` or ``throughput``: every request due at 0 under the
    strategy's concurrency, the cap and the run's label (a notice in ``meta`` where
    max_seconds is not applied)."""
    kind, value = st["kind"], st["value"]
    max_s, max_n = st["max_seconds"], st["max_requests"]
    if rate_scale != 1.0:
        raise ConfigError(
            f"{src}: workload.rate_scale: profile {kind} sends each request when a "
            "stream is free, it has no rate to scale"
        )
    cap: int | None = st["cap"]
    if kind == "synchronous":
        cap = 1
    elif kind == "concurrent":
        if value is None:
            raise ConfigError(f"{src}: profile concurrent needs {st['rate_field']} (the number of streams)")
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
    label = f"{kind}" + (f" {cap}" if kind != "synchronous" else "")
    return np.zeros(int(max_n)), cap, label


def _lengths(lengths: dict[str, Any], which: str, seed: int, count: int) -> np.ndarray:
    """The prompt or output lengths (``which``) of ``count`` requests, drawn with ``seed``."""
    return integer_lengths(
        lengths[f"{which}_tokens"],
        lengths.get(f"{which}_tokens_stdev"),
        lengths.get(f"{which}_tokens_min"),
        lengths.get(f"{which}_tokens_max"),
        seed,
        count,
    )
