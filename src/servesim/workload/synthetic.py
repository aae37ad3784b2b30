"""Synthetic workloads: an arrival process and two length distributions.

Arrival times are the partial sums of i.i.d. inter-arrival gaps, so the first request
arrives one gap after t=0 (as the vLLM CPU recorder does); ``burst`` puts every request at
t=0. Arrivals, prompt lengths, output lengths and prefix groups each draw from their own
child of one ``SeedSequence``: changing the length distribution leaves the arrival times
unchanged (common random numbers across compared scenarios). A rate profile maps the
arrival times through the inverse of its integral (time rescaling, ``rate_profile.py``).
"""

from __future__ import annotations

import math

import numpy as np

from servesim.config import ArrivalConfig, DelayDist, LengthDist, SyntheticWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import Workload
from servesim.workload.limits import check_memory
from servesim.workload.notices import clipped, notice
from servesim.workload.rate_profile import RateProfile


def generate_synthetic(cfg: SyntheticWorkload, seed: int = 0) -> Workload:
    """Requests of ``cfg``; ``seed`` is added to ``cfg.seed``. Deterministic given the seed."""
    total_seed = cfg.seed + seed
    if total_seed < 0:
        raise WorkloadError(
            f"workload.seed ({cfg.seed}) + run.seed ({seed}) = {total_seed}: expected a seed >= 0"
        )
    # Six child streams (the first four as before tenants existed, the fifth as before
    # priorities: the same draws).
    arrival_rng, prompt_rng, output_rng, group_rng, tenant_rng, priority_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(total_seed).spawn(6)
    )
    arrival = arrival_times(cfg.arrival, cfg.num_requests, cfg.duration_s, arrival_rng)
    n = len(arrival)
    if n == 0:
        raise _no_arrivals(cfg)
    found: list[dict] = []  # notices: lengths clipped to [min, max]
    prompt = sample_lengths(cfg.prompt_len, n, prompt_rng, "workload.prompt_len", found)
    output = sample_lengths(cfg.output_len, n, output_rng, "workload.output_len", found)
    group, prefix_len = _prefix_groups(cfg, prompt, group_rng, found)
    a = cfg.arrival
    tenant, names = _tenants(cfg, n, tenant_rng)
    priority = _priorities(cfg, n, priority_rng)
    return Workload(
        arrival_s=arrival,
        num_prompt_tokens=prompt,
        num_output_tokens=output,
        prefix_group=group,
        prefix_len=prefix_len,
        tenant=tenant,
        priority=priority,
        num_samples=np.full(n, cfg.n, np.int64) if cfg.n > 1 else None,
        prune_at_token=cfg.best_of_prune_at or 0,
        num_kept_samples=cfg.best_of_keep,
        source=f"synthetic({a.process}, rate={a.rate:g}/s, seed={total_seed})",
        meta={
            "seed": total_seed,
            "process": a.process,
            "rate": a.rate,
            "cv": a.cv,
            "notices": found,
            **({"tenant_names": names} if names else {}),
        },
    )


def _no_arrivals(cfg: SyntheticWorkload) -> WorkloadError:
    """The error of a run whose arrival process gives no request before ``duration_s``."""
    profile = cfg.arrival.rate_profile
    expected = (
        ""
        if profile is None or cfg.duration_s is None
        else f" x arrival.rate_profile (expected arrivals "
        f"{cfg.arrival.rate * float(RateProfile.from_config(profile).cumulative(cfg.duration_s)):.3g})"
    )
    return WorkloadError(
        f"workload: no arrival before duration_s={cfg.duration_s} at rate "
        f"{cfg.arrival.rate}/s{expected}; raise duration_s or arrival.rate"
    )


def _prefix_groups(
    cfg: SyntheticWorkload, prompt: np.ndarray, rng: np.random.Generator, found: list[dict]
) -> tuple[np.ndarray | None, int]:
    """Each request's shared-prefix group and the prefix length (None, 0 without groups);
    a notice in ``found`` where prompts are shorter than the prefix or half the setting is given."""
    n = len(prompt)
    group, prefix_len = None, 0
    if cfg.prefix_groups > 0 and cfg.prefix_len > 0:
        # Shared prefixes are the first min(prefix_len, prompt) tokens of the prompt, whose
        # length is the sampled total (the convention of the vLLM CPU recorder).
        group = rng.integers(0, cfg.prefix_groups, size=n, dtype=np.int64)
        prefix_len = cfg.prefix_len
        short = int((prompt < prefix_len).sum())
        if short:
            found.append(
                notice(
                    "prefix_beyond_prompt",
                    f"workload.prefix_len: {short:,} of {n:,} prompts are shorter than the shared "
                    f"prefix ({prefix_len:,} tokens); their whole prompt is the shared part",
                    short,
                )
            )
    elif (cfg.prefix_groups > 0) != (cfg.prefix_len > 0):
        given, missing = (
            ("prefix_groups", "prefix_len") if cfg.prefix_groups else ("prefix_len", "prefix_groups")
        )
        found.append(
            notice(
                "prefix_unused",
                f"workload.{given} ({getattr(cfg, given)}) has no effect with workload.{missing} 0: "
                "no prompts share a prefix",
            )
        )
    return group, prefix_len


def _tenants(cfg: SyntheticWorkload, n: int, rng: np.random.Generator) -> tuple[np.ndarray | None, list[str]]:
    """Each request's tenant, drawn with probability share / total, and the tenants' names."""
    if not cfg.tenant_shares:
        return None, []
    names = list(cfg.tenant_shares)
    p = np.array([cfg.tenant_shares[k] for k in names], np.float64)
    return rng.choice(len(names), size=n, p=p / p.sum()).astype(np.int64), names


def _priorities(cfg: SyntheticWorkload, n: int, rng: np.random.Generator) -> np.ndarray | None:
    """Each request's priority, drawn with probability share / total (None: no priorities)."""
    if not cfg.priority_shares:
        return None
    values = np.array(list(cfg.priority_shares), np.int64)
    q = np.array(list(cfg.priority_shares.values()), np.float64)
    return values[rng.choice(len(values), size=n, p=q / q.sum())]


# --------------------------------------------------------------------------- arrivals


def inter_arrival_gaps(arrival: ArrivalConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` gaps in seconds, mean ``1/rate``.

    gamma: shape k = 1/cv^2 and scale = 1/(rate k), so mean = k * scale = 1/rate and
    CV = 1/sqrt(k) = cv; cv = 1 is the exponential (Poisson) case. weibull: the shape k
    whose CV is cv (``weibull_shape``) and scale 1/(rate Gamma(1 + 1/k)), so mean 1/rate.
    """
    if arrival.process == "poisson":
        return rng.exponential(1.0 / arrival.rate, size=n)
    if arrival.process == "gamma":
        shape = 1.0 / arrival.cv**2
        return rng.gamma(shape, 1.0 / (arrival.rate * shape), size=n)
    if arrival.process == "weibull":
        k = weibull_shape(arrival.cv)
        return rng.weibull(k, size=n) / (arrival.rate * math.gamma(1.0 + 1.0 / k))
    if arrival.process == "constant":
        return np.full(n, 1.0 / arrival.rate)
    return np.zeros(n)  # burst


def check_count(
    arrival: ArrivalConfig, count: int | None, duration_s: float | None, count_field: str = "num_requests"
) -> None:
    """Refuse a workload of more arrivals than this machine could hold in memory (``count``,
    or about ``duration_s x arrival.rate``), naming the field, before any is drawn."""
    n = math.inf if count is None else float(count)
    by_count = count is not None  # the count bounds the arrivals (a huge int is no exact float)
    if duration_s is not None and arrival.process != "burst" and arrival.rate_profile is None:
        by_duration = duration_s * arrival.rate
        if by_duration < n:
            n, by_count = by_duration, False
    if math.isfinite(n):  # unbounded: refused elsewhere
        given = (
            f"{count_field}={count:,}"
            if by_count
            else (f"duration_s={duration_s:g} at arrival.rate={arrival.rate:g}/s")
        )
        check_memory(n, given)


def arrival_times(
    arrival: ArrivalConfig,
    num_requests: int | None,
    duration_s: float | None,
    rng: np.random.Generator,
    count_field: str = "num_requests",
) -> np.ndarray:
    """Sorted arrival times: ``num_requests`` of them, or all before ``duration_s``, or,
    with both, whichever limit comes first. ``count_field`` names ``num_requests`` in errors."""
    if num_requests is None and duration_s is None:
        raise WorkloadError("workload: give num_requests or duration_s")
    check_count(arrival, num_requests, duration_s, count_field)
    if arrival.process == "burst":
        if num_requests is None:
            raise WorkloadError(
                "workload.arrival.process=burst puts every request at t=0: give num_requests, "
                "duration_s alone would be unbounded"
            )
        return np.zeros(num_requests)
    limit_s = math.inf if duration_s is None else duration_s
    profile = None if arrival.rate_profile is None else RateProfile.from_config(arrival.rate_profile)
    if profile is not None and duration_s is not None:
        limit_s = float(profile.cumulative(duration_s))  # generate in operational time
    if arrival.process == "constant":
        # i/rate rather than a running sum, so no rounding drift on long runs.
        n = num_requests if num_requests is not None else math.ceil(limit_s * arrival.rate) + 1
        t = np.arange(1, n + 1) / arrival.rate
    elif num_requests is not None:
        t = np.cumsum(inter_arrival_gaps(arrival, num_requests, rng))
    else:
        t = _until(arrival, limit_s, rng)
    t = t[t < limit_s]
    if profile is None:
        return t
    t = profile.inverse(t)  # time rescaling (rate_profile.py)
    if not np.isfinite(t[-1:]).all():
        raise WorkloadError(
            f"workload.arrival.rate_profile ends at multiplier 0 after {int(np.isfinite(t).sum())} "
            f"of {len(t)} requests: give duration_s, or a profile that does not end at 0"
        )
    return t if duration_s is None else t[t < duration_s]


def weibull_shape(cv: float) -> float:
    """The Weibull shape k whose coefficient of variation is ``cv``.

    CV^2 = Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1 decreases in k; solved by bisection on
    log k (k = 1 is the exponential, CV 1).
    """

    def cv_of(k: float) -> float:
        return math.sqrt(math.exp(math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k)) - 1.0)

    lo, hi = math.log(0.02), math.log(200.0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cv_of(math.exp(mid)) > cv else (lo, mid)
    return math.exp(0.5 * (lo + hi))


def _until(arrival: ArrivalConfig, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrivals before ``duration_s``: draw gaps in chunks until the clock passes it (none
    when it is 0: a rate profile at multiplier 0 over the whole run, in operational time)."""
    if duration_s <= 0:
        return np.zeros(0)
    expected = duration_s * arrival.rate
    chunk = int(expected + 6.0 * math.sqrt(expected) * max(arrival.cv, 1.0)) + 16
    parts, last = [], 0.0
    while last < duration_s:
        t = last + np.cumsum(inter_arrival_gaps(arrival, chunk, rng))
        parts.append(t)
        last = float(t[-1])
    t = np.concatenate(parts)
    return t[t < duration_s]


# --------------------------------------------------------------------------- lengths


def sample_lengths(
    dist: LengthDist, n: int, rng: np.random.Generator, name: str = "length", found: list[dict] | None = None
) -> np.ndarray:
    """``n`` token lengths (int64), rounded to the nearest integer and clipped to [min, max].

    ``found``, when given, receives a notice counting the clipped samples (``workload.notices``).

    lognormal takes the mean and std of the length itself: sigma^2 = ln(1 + std^2/mean^2),
    mu = ln(mean) - sigma^2/2. pareto is the classic Pareto with minimum ``scale`` (x_m) and
    shape ``alpha`` (numpy's ``pareto`` is the Lomax form, hence the +1).
    """
    if dist.min > dist.max:
        raise WorkloadError(f"{name}: expected min <= max, found min={dist.min} > max={dist.max}")
    if dist.kind == "constant":
        x = np.full(n, float(dist.value))
    elif dist.kind == "uniform":
        if dist.low > dist.high:
            raise WorkloadError(f"{name}: expected low <= high, found low={dist.low} > high={dist.high}")
        x = rng.integers(dist.low, dist.high, size=n, endpoint=True).astype(np.float64)
    elif dist.kind == "normal":
        x = rng.normal(dist.mean, dist.std, size=n)
    elif dist.kind == "lognormal":
        sigma2 = math.log1p((dist.std / dist.mean) ** 2)
        x = rng.lognormal(math.log(dist.mean) - sigma2 / 2.0, math.sqrt(sigma2), size=n)
    elif dist.kind == "pareto":
        x = dist.scale * (1.0 + rng.pareto(dist.alpha, size=n))
    else:  # trace
        if not dist.trace:
            raise WorkloadError(f"{name}: kind=trace needs 'trace', the file to sample lengths from")
        from servesim.workload.traces import read_lengths

        x = rng.choice(read_lengths(dist.trace, dist.column), size=n, replace=True).astype(np.float64)
    x = np.rint(x)
    if found is not None and (item := clipped(x, dist.min, dist.max, name)) is not None:
        found.append(item)
    return np.clip(x, dist.min, dist.max).astype(np.int64)


def sample_delays(dist: DelayDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` durations in seconds with mean ``mean_s`` (gamma: shape 1/cv^2; lognormal: the
    mean and CV of the duration itself, as ``sample_lengths`` takes them)."""
    m = dist.mean_s
    if dist.kind == "constant" or m == 0:
        return np.full(n, float(m))
    if dist.kind == "exponential":
        return rng.exponential(m, size=n)
    if dist.kind == "gamma":
        shape = 1.0 / dist.cv**2
        return rng.gamma(shape, m / shape, size=n)
    sigma2 = math.log1p(dist.cv**2)
    return rng.lognormal(math.log(m) - sigma2 / 2.0, math.sqrt(sigma2), size=n)
