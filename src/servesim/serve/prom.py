"""Prometheus metrics under vLLM's names (vLLM V1's ``v1/metrics/loggers.py``).

Latencies are in simulated seconds (at ``--speed`` 1, wall seconds), measured where the
engine sees them: TTFT from arrival to the first token, inter-token latency per gap (vLLM
observes ``vllm:time_per_output_token_seconds`` per gap too, as the deprecated alias of
``vllm:inter_token_latency_seconds``), end-to-end latency per finished request. The gauges
are read at scrape time, one series per replica (label ``engine``, its index).
``vllm:kv_cache_usage_perc`` is a fraction in [0, 1], as vLLM's is despite its name;
``vllm:gpu_cache_usage_perc`` is its older name. Each server has its own registry.

A finished request's phases, as vLLM's ``IterationStats.update_from_finished_request``:
queue time from reaching the engine to its first schedule (``vllm:request_queue_time_seconds``),
prefill time from then to its first token, decode time from its first token to its last,
inference time from its first schedule to its last token. A request whose client went away
counts once in ``vllm:request_success_total{finished_reason="abort"}`` (vLLM's label of an
aborted request; its latencies are not observed). Per replica (label ``engine``), read at
scrape time from the engine: ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` in tokens (servesim counts a request's prompt once, at its
first admission; vLLM counts each lookup, a resumption after preemption too) and
``vllm:num_preemptions_total``.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

from servesim.engine.replica import Replica
from servesim.serve.driver import LiveSim, Stream

# vLLM V1's buckets (seconds).
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)

#: vLLM's request_latency_buckets: E2E latency and the phases (queue, prefill, decode, inference).
REQUEST_BUCKETS = E2E_BUCKETS
#: vLLM's FinishReason labels (servesim's requests finish by length, or abort).
FINISH_REASONS = ("stop", "length", "abort")

LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class ServeMetrics:
    """The server's metrics, fed by the live simulation's token and finish observers."""

    def __init__(self, sim: LiveSim, model_name: str) -> None:
        self.registry = reg = CollectorRegistry()
        self.model = model_name
        self.ttft = _histogram(
            "vllm:time_to_first_token_seconds", "Time to first token (simulated s).", TTFT_BUCKETS, reg
        )
        self.itl = _histogram(
            "vllm:inter_token_latency_seconds", "Inter-token latency (simulated s).", ITL_BUCKETS, reg
        )
        self.tpot = _histogram(
            "vllm:time_per_output_token_seconds",
            "Time per output token, per gap (deprecated alias of inter_token_latency).",
            ITL_BUCKETS,
            reg,
        )
        self.e2e = _histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency (simulated s).", E2E_BUCKETS, reg
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", _LABELS, registry=reg)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", _LABELS, registry=reg
        )
        # Not vLLM's: how late the server hands a token to its connection, behind the simulated
        # time of the step that made it (0 when the machine keeps up with --speed).
        self.lag = _histogram(
            "servesim:token_release_lag_seconds",
            "Wall delay (x speed) between a token's simulated time and its release.",
            LAG_BUCKETS,
            reg,
        )
        phase = _phase_histograms(reg)
        self.queue_time, self.prefill_time = phase["queue"], phase["prefill"]
        self.decode_time, self.inference_time = phase["decode"], phase["inference"]
        self.sim = sim
        self.finished = Counter(
            "vllm:request_success", "Finished requests.", [*_LABELS, "finished_reason"], registry=reg
        )
        for metric in (
            self.ttft,
            self.itl,
            self.tpot,
            self.e2e,
            self.prompt_tokens,
            self.generation_tokens,
            self.lag,
            *phase.values(),
        ):
            metric.labels(model_name)  # exported from the start, as vLLM's are
        for reason in FINISH_REASONS:
            self.finished.labels(model_name, reason)
        # request idx -> (queued, first scheduled, first token), simulated s, from its first token
        self.first: dict[int, tuple[float, float, float]] = {}
        _add_replica_gauges(sim, model_name, reg)
        reg.register(_EngineCounters(sim, model_name))
        sim.on_tokens = self.on_tokens
        sim.on_finished = self.on_finished
        sim.on_aborted = self.on_aborted

    def on_tokens(self, s: Stream, k: int, now: float) -> None:
        """``k`` tokens of ``s`` came out of the step that ended at ``now`` (one ITL sample a
        step, as vLLM observes one per request per iteration)."""
        m = self.model
        self.generation_tokens.labels(m).inc(k)
        self.lag.labels(m).observe(self.sim.now() - now)
        if s.last_token_s < 0:  # its first token
            self.ttft.labels(m).observe(now - s.arrival_s)
            self.prompt_tokens.labels(m).inc(s.req.num_prompt_tokens)
            # queued_s now is where it first reached an engine (a disaggregated request reaches
            # the decode replica's queue later, after its first token)
            r = s.req
            self.first[r.idx] = (r.queued_s, r.first_scheduled_s, now)
        else:
            self.itl.labels(m).observe(now - s.last_token_s)
            self.tpot.labels(m).observe(now - s.last_token_s)

    def on_finished(self, s: Stream) -> None:
        m = self.model
        self.e2e.labels(m).observe(s.req.finished_s - s.arrival_s)
        self.finished.labels(m, "length").inc()
        times = self.first.pop(s.req.idx, None)
        if times is not None:
            queued, scheduled, first = times
            last = s.last_token_s
            self.queue_time.labels(m).observe(max(0.0, scheduled - queued))
            self.prefill_time.labels(m).observe(first - scheduled)
            self.decode_time.labels(m).observe(last - first)
            self.inference_time.labels(m).observe(last - scheduled)

    def on_aborted(self, s: Stream) -> None:
        """The client of ``s`` went away before its last token."""
        self.first.pop(s.req.idx, None)
        self.finished.labels(self.model, "abort").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


_LABELS = ["model_name"]


def _histogram(name: str, doc: str, buckets: tuple[float, ...], reg: CollectorRegistry) -> Histogram:
    return Histogram(name, doc, _LABELS, buckets=buckets, registry=reg)


def _phase_histograms(reg: CollectorRegistry) -> dict[str, Histogram]:
    """A finished request's phases (queue, prefill, decode, inference), as vLLM's."""
    return {
        name: Histogram(
            f"vllm:request_{name}_time_seconds", doc, _LABELS, buckets=REQUEST_BUCKETS, registry=reg
        )
        for name, doc in (
            ("queue", "Time spent in WAITING phase for request (simulated s)."),
            ("prefill", "Time spent in PREFILL phase for request (simulated s)."),
            ("decode", "Time spent in DECODE phase for request (simulated s)."),
            ("inference", "Time spent in RUNNING phase for request (simulated s)."),
        )
    }


def _add_replica_gauges(sim: LiveSim, model_name: str, reg: CollectorRegistry) -> None:
    """vLLM's scheduler and KV-cache gauges, one series per replica (label ``engine``), read
    at scrape time."""
    gauges: dict[str, tuple[str, Callable[[Replica], float]]] = {
        "vllm:num_requests_running": (
            "Requests in the running batch.",
            lambda r: len(r.scheduler.running),
        ),
        "vllm:num_requests_waiting": (
            "Requests waiting to be scheduled.",
            lambda r: len(r.scheduler.waiting),
        ),
        "vllm:kv_cache_usage_perc": ("KV-cache usage, a fraction (1 = full).", lambda r: r.kv.usage),
        "vllm:gpu_cache_usage_perc": ("KV-cache usage (older name).", lambda r: r.kv.usage),
    }
    for name, (doc, read) in gauges.items():
        g = Gauge(name, doc, [*_LABELS, "engine"], registry=reg)
        for rep in sim.cluster.replicas:
            g.labels(model_name, str(rep.id)).set_function(_reader(read, rep))


def _reader(read: Callable[[Replica], float], rep: Replica) -> Callable[[], float]:
    return lambda: float(read(rep))


class _EngineCounters:
    """vLLM's per-engine counters, read from each replica's scheduler at scrape time."""

    SPECS: tuple[tuple[str, str, Callable[[Replica], int]], ...] = (
        (
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            lambda r: r.kv.num_query_tokens,  # declared by engine.scheduler.KVCache
        ),
        (
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            lambda r: r.kv.num_hit_tokens,
        ),
        (
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            lambda r: r.scheduler.num_preemptions,  # every Scheduler counts them
        ),
    )

    def __init__(self, sim: LiveSim, model_name: str) -> None:
        self.sim, self.model = sim, model_name

    def collect(self):
        for name, doc, read in self.SPECS:
            family = CounterMetricFamily(name, doc, labels=["model_name", "engine"])
            for rep in self.sim.cluster.replicas:
                family.add_metric([self.model, str(rep.id)], float(read(rep)))
            yield family
