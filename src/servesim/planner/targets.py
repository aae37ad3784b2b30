"""SLO targets: does one run meet the scenario's objectives, and by how much?

A scenario's ``slo`` holds per-request **limits** (``ttft_s``, ``tpot_s``, ``e2e_s``) and
two kinds of **targets** over a run's requests:

- ``attainment``: ``{metric: fraction}``. The fraction of *all* requests of the run whose
  metric is at most its limit must be at least ``fraction``; ``all`` counts the requests
  meeting every limit at once. This is DistServe's SLO attainment (and vLLM's goodput
  definition, ``vllm bench serve --goodput``): a request is good when it meets every
  objective. A request that did not finish (unfinished at the end of the run, or rejected)
  misses every limit; a finished request with one output token has no TPOT and meets a
  TPOT limit (``metrics.stats.meets_limit``, the same rule as the summary's attainment).
- ``percentiles``: ``[{metric, p, max_s}]``. The p-th percentile of the metric over all
  requests must be at most ``max_s``. Percentiles are the inverted CDF used everywhere in
  servesim (the smallest sample with at least p% of the samples at or below it), and a
  request that did not finish counts as infinitely late, so a P99 limit is missed as soon
  as more than 1% of the requests did not finish. TPOT leaves out finished requests with
  one output token (they have no TPOT, as in ``vllm bench serve``); ``itl_s`` is over the
  per-token gaps of the run, weighted by count, which records no gap for a request that
  never produced a second token.

With limits set but no target, the target is ``{all: 0.9}`` (DEFAULT_ATTAINMENT; the 90%
attainment DistServe plans for). With no limit and no percentile, the scenario has no SLO
and ``has_slo`` is False.

The **verdict** meets when every target does. Each target has a **margin**, relative and
signed (>= 0 exactly when it is met), so targets of different kinds rank on one scale:

    attainment:  (attained - target) / target                 in [-1, 1/target - 1]
    percentile:  (max_s - value) / max(max_s, value)           in [-1, 1); -1 when infinite

The verdict's margin is the smallest target margin: how far the closest candidate is from
meeting all its targets.

``check_result`` works on a run's records (exact). ``check_summary`` works on a stored
summary (``summary.json``, a result cache): attainment targets are exact there, but the
summary keeps only P50/P90/P95/P99/max of finished requests, so a percentile target at
another percentile, or with requests unfinished, is judged on the nearest stored percentile
at or above the one needed: an upper bound of the true value, so the verdict never says
"meets" wrongly (``exact`` is False on such a target).

With ``slo.confidence`` (0.8) every latency is judged at the high end of its calibrated
prediction interval (``metrics.intervals.upper_factors``): percentiles are multiplied by the
factor, per-request limits divided by it; from a summary, an attainment target becomes a
bound on stored percentiles (``_attainment_bound``), never "meets" wrongly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from servesim.config import SloConfig
from servesim.metrics.records import RequestStatus, Result
from servesim.metrics.stats import PERCENTILES, meets_limit, weighted_percentile

DEFAULT_ATTAINMENT = 0.9


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """One target against one run.

    ``value``: the attained fraction (attainment) or the percentile in seconds (percentile;
    ``inf`` when it falls among requests that did not finish). ``num_met`` of ``num_total``
    requests are within the limit (None for ITL, which counts gaps, not requests).
    """

    kind: Literal["attainment", "percentile"]
    metric: str
    target: float  # attainment: the fraction required; percentile: max_s
    value: float
    meets: bool
    margin: float
    limit_s: float | None = None  # attainment: the per-request limit (None for "all")
    p: float | None = None  # percentile: which one, in percent
    num_met: int | None = None
    num_total: int = 0
    exact: bool = True

    @property
    def required_fraction(self) -> float:
        """The share of requests that must be within the limit for the target to hold."""
        return self.target if self.kind == "attainment" else (self.p or 100.0) / 100.0

    def target_text(self) -> str:
        """The target alone: ``ttft_s attainment >= 0.9`` / ``P99 ttft_s <= 5 s``."""
        if self.kind == "attainment":
            return f"{self.metric} attainment >= {self.target:g}"
        return f"P{self.p:g} {self.metric} <= {self.target:g} s"

    def describe(self) -> str:
        """``ttft_s attainment 0.87 < 0.9`` / ``P99 ttft_s 6.1 s > 5 s``."""
        ok = ">=" if self.meets else "<"
        if self.kind == "attainment":
            return f"{self.metric} attainment {self.value:.3g} {ok} {self.target:g}"
        ok = "<=" if self.meets else ">"
        return f"P{self.p:g} {self.metric} {self.value:.3g} s {ok} {self.target:g} s"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not math.isfinite(out["value"]):
            out["value"] = None  # JSON has no infinity: None = among the unfinished
        return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """A run against all its SLO targets."""

    meets: bool
    margin: float
    checks: tuple[TargetCheck, ...]
    num_requests: int
    num_finished: int

    def describe(self) -> str:
        """One line: ``meets`` or ``misses``, then each target."""
        head = "meets" if self.meets else "misses"
        return f"{head}: " + "; ".join(c.describe() for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "meets": self.meets,
            "margin": self.margin,
            "num_requests": self.num_requests,
            "num_finished": self.num_finished,
            "checks": [c.to_dict() for c in self.checks],
        }


# --------------------------------------------------------------------------- targets


def has_slo(slo: SloConfig | None) -> bool:
    """Whether ``slo`` sets anything to check: a limit or a percentile limit."""
    return slo is not None and bool(slo.limits() or slo.percentiles)


def attainment_targets(slo: SloConfig) -> dict[str, float]:
    """The attainment targets in force: the configured ones, else ``{all: 0.9}`` when a
    limit is set (DEFAULT_ATTAINMENT), else none."""
    if slo.attainment:
        return {str(k): v for k, v in slo.attainment.items()}
    return {"all": DEFAULT_ATTAINMENT} if slo.limits() else {}


def _attainment_check(metric: str, target: float, num_met: int, n: int, limit: float | None) -> TargetCheck:
    value = num_met / n if n else 0.0
    return TargetCheck(
        "attainment",
        metric,
        target,
        value,
        value >= target,
        (value - target) / target,
        limit_s=limit,
        num_met=num_met,
        num_total=n,
    )


def _percentile_margin(value: float, max_s: float) -> float:
    return -1.0 if not math.isfinite(value) else (max_s - value) / max(max_s, value)


def _verdict(checks: list[TargetCheck], n: int, num_finished: int) -> Verdict:
    if not checks:
        raise ValueError("the scenario has no SLO target to check (see has_slo)")
    return Verdict(
        all(c.meets for c in checks), min(c.margin for c in checks), tuple(checks), n, num_finished
    )


# --------------------------------------------------------------------------- from records


def _population(result: Result, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights) of ``metric`` over the run, the unfinished as +inf (see module doc)."""
    if metric == "itl_s":
        return (np.asarray(result.itl.gap_s, np.float64), np.asarray(result.itl.count, np.int64))
    rec = result.records
    value = np.asarray(getattr(rec, metric), np.float64)
    finished = rec.status == RequestStatus.FINISHED
    value = np.where(finished, value, np.inf)
    if metric == "tpot_s":
        value = value[~(finished & np.isnan(value))]  # one output token: no TPOT
    return value, np.ones(value.shape, np.int64)


def check_result(slo: SloConfig, result: Result) -> Verdict:
    """The verdict of a run on its per-request records (``result.records``, ``result.itl``).

    A benchmark workload's ready check and warm-ups are left out, as in the summary.
    """
    from servesim.metrics.benchmark import measured_run

    run = measured_run(result)
    rec = run.records
    n = len(rec)
    checks = []
    limits = slo.limits()
    up = _upper(slo, result.summary)
    for metric, target in attainment_targets(slo).items():
        if metric == "all":
            ok = np.ones(n, bool)
            for m, limit in limits.items():
                ok &= meets_limit(rec, m, limit / up[m])
            checks.append(_attainment_check("all", target, int(ok.sum()), n, None))
        else:
            ok = meets_limit(rec, metric, limits[metric] / up[metric])
            checks.append(_attainment_check(metric, target, int(ok.sum()), n, limits[metric]))
    for pl in slo.percentiles:
        sk = run.itl.sketched() if pl.metric == "itl_s" else None
        if sk is not None:  # a long run: the ITL pairs are in a sketch (1% relative error)
            values, weights = np.zeros(1), np.asarray([round(sk.count)], np.int64)
            value = sk.percentiles((pl.p,))[0] * up[pl.metric]
        else:
            values, weights = _population(run, pl.metric)
            value = weighted_percentile(values, weights, pl.p) * up[pl.metric] if values.size else math.inf
        if math.isnan(value):
            value = math.inf
        within = None if pl.metric == "itl_s" else int((values * up[pl.metric] <= pl.max_s).sum())
        checks.append(
            TargetCheck(
                "percentile",
                pl.metric,
                pl.max_s,
                value,
                value <= pl.max_s,
                _percentile_margin(value, pl.max_s),
                p=pl.p,
                num_met=within,
                num_total=int(weights.sum()),
            )
        )
    return _verdict(checks, n, int((rec.status == RequestStatus.FINISHED).sum()))


def _upper(slo: SloConfig, summary: dict[str, Any] | None) -> dict[str, float]:
    """metric -> the factor a latency is judged at: 1, or with ``slo.confidence`` its
    interval's high end over the prediction (``metrics.intervals.upper_factors``)."""
    if slo.confidence is None:
        return dict.fromkeys(("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s"), 1.0)
    from servesim.metrics.intervals import upper_factors

    return upper_factors(summary or {})


# --------------------------------------------------------------------------- from a summary


def _summary_percentile(summary: dict[str, Any], metric: str, p: float) -> tuple[float, bool]:
    """(an upper bound of the p-th percentile over all requests, whether it is exact)."""
    counts, dist = summary["counts"], summary["latency"][metric]
    num_unfinished = 0 if metric == "itl_s" else counts["num_requests"] - counts["num_finished"]
    count = dist["count"] or 0
    total = count + num_unfinished
    if total == 0 or p * total > 100 * count:  # the percentile falls among the unfinished
        return math.inf, True
    q = p * total / count  # the same rank among the finished alone, in percent
    stored = [(float(k), dist[f"p{k}"]) for k in PERCENTILES] + [(100.0, dist["max"])]
    for at, value in stored:
        if at >= q - 1e-9 and value is not None:
            return float(value), abs(at - q) <= 1e-9
    return math.inf, False


def check_summary(slo: SloConfig, summary: dict[str, Any]) -> Verdict:
    """The verdict of a run from its summary (``servesim.metrics.summary.summarize``).

    The summary's attainment was computed with its scenario's limits; ``slo`` must have the
    same limits (a ValueError otherwise). Percentile targets: see the module docstring.
    """
    stored = summary["slo"]["limits"]
    limits, targets = slo.limits(), attainment_targets(slo)
    if targets and {m: v for m, v in stored.items() if v is not None} != limits:
        raise ValueError(f"the summary's SLO limits {stored} are not these ({limits})")
    n = int(summary["counts"]["num_requests"])
    checks = []
    up = _upper(slo, summary)
    for metric, target in targets.items():
        if slo.confidence is not None:
            checks.append(_attainment_bound(summary, metric, target, limits, up))
            continue
        num_met = round((summary["slo"]["attainment"][metric] or 0.0) * n)
        checks.append(_attainment_check(metric, target, num_met, n, limits.get(metric)))
    for pl in slo.percentiles:
        value, exact = _summary_percentile(summary, pl.metric, pl.p)
        value *= up[pl.metric]
        checks.append(
            TargetCheck(
                "percentile",
                pl.metric,
                pl.max_s,
                value,
                value <= pl.max_s,
                _percentile_margin(value, pl.max_s),
                p=pl.p,
                exact=exact,
                num_total=n if pl.metric != "itl_s" else int(summary["latency"]["itl_s"]["count"] or 0),
            )
        )
    return _verdict(checks, n, int(summary["counts"]["num_finished"]))


def _attainment_bound(
    summary: dict[str, Any], metric: str, target: float, limits: dict[str, float], up: dict[str, float]
) -> TargetCheck:
    """An attainment target at the interval's high end, from a summary's stored percentiles:
    met when, for each limit it counts, the stored percentile at or above the share required
    (for ``all``, 1 - (1 - target) / number of limits each: a union bound) times the factor
    is within the limit. Never "meets" wrongly; ``value`` is the target when met, else 0."""
    metrics = list(limits) if metric == "all" else [metric]
    p = 100.0 * (1.0 - (1.0 - target) / len(metrics))
    worst = min(
        (limits[m] - v * up[m]) / limits[m] for m in metrics for v in [_summary_percentile(summary, m, p)[0]]
    )
    ok = worst >= 0
    n = int(summary["counts"]["num_requests"])
    return TargetCheck(
        "attainment",
        metric,
        target,
        target if ok else 0.0,
        ok,
        max(-1.0, worst) if math.isfinite(worst) else -1.0,
        limit_s=limits.get(metric),
        num_total=n,
        exact=False,
    )
