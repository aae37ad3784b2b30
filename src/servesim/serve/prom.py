"""Prometheus metrics under vLLM's names (vLLM V1's ``v1/metrics/loggers.py``).

Latencies are in simulated seconds (at ``--speed`` 1, wall seconds), measured where the
engine sees them: TTFT from arrival to the first token, inter-token latency per gap (vLLM
observes ``vllm:time_per_output_token_seconds`` per gap too, as the deprecated alias of
``vllm:inter_token_latency_seconds``), end-to-end latency per finished request. The gauges
are read at scrape time, one series per replica (label ``engine``, its index).
``vllm:kv_cache_usage_perc`` is a fraction in [0, 1], as vLLM's is despite its name;
``vllm:gpu_cache_usage_perc`` is its older name. Each server has its own registry.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servesim.engine.replica import Replica
from servesim.serve.driver import LiveSim, Stream

# vLLM V1's buckets (seconds).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)

LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class ServeMetrics:
    """The server's metrics, fed by the live simulation's token and finish observers."""

    def __init__(self, sim: LiveSim, model_name: str) -> None:
        self.registry = reg = CollectorRegistry()
        labels = ["model_name"]
        self.model = model_name
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token (simulated s).",
                              labels, buckets=TTFT_BUCKETS, registry=reg)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency (simulated s).",
                             labels, buckets=ITL_BUCKETS, registry=reg)
        self.tpot = Histogram("vllm:time_per_output_token_seconds",
                              "Time per output token, per gap (deprecated alias of inter_token_latency).",
                              labels, buckets=ITL_BUCKETS, registry=reg)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency (simulated s).",
                             labels, buckets=E2E_BUCKETS, registry=reg)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=reg)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generation tokens processed.", labels,
                                         registry=reg)
        # Not vLLM's: how late the server hands a token to its connection, behind the simulated
        # time of the step that made it (0 when the machine keeps up with --speed).
        self.lag = Histogram("servesim:token_release_lag_seconds",
                             "Wall delay (x speed) between a token's simulated time and its release.",
                             labels, buckets=LAG_BUCKETS, registry=reg)
        self.sim = sim
        self.finished = Counter("vllm:request_success", "Finished requests.", labels + ["finished_reason"],
                                registry=reg)
        for metric in (self.ttft, self.itl, self.tpot, self.e2e, self.prompt_tokens, self.generation_tokens,
                       self.lag):
            metric.labels(model_name)  # exported from the start, as vLLM's are
        self.finished.labels(model_name, "length")
        glabels = ["model_name", "engine"]
        gauges = {
            "vllm:num_requests_running": ("Requests in the running batch.",
                                          lambda r: len(r.scheduler.running)),
            "vllm:num_requests_waiting": ("Requests waiting to be scheduled.",
                                          lambda r: len(r.scheduler.waiting)),
            "vllm:kv_cache_usage_perc": ("KV-cache usage, a fraction (1 = full).", lambda r: r.kv.usage),
            "vllm:gpu_cache_usage_perc": ("KV-cache usage (older name).", lambda r: r.kv.usage),
        }
        for name, (doc, read) in gauges.items():
            g = Gauge(name, doc, glabels, registry=reg)
            for rep in sim.cluster.replicas:
                g.labels(model_name, str(rep.id)).set_function(_reader(read, rep))
        sim.on_tokens = self.on_tokens
        sim.on_finished = self.on_finished

    def on_tokens(self, s: Stream, k: int, now: float) -> None:
        """``k`` tokens of ``s`` came out of the step that ended at ``now`` (one ITL sample a
        step, as vLLM observes one per request per iteration)."""
        m = self.model
        self.generation_tokens.labels(m).inc(k)
        self.lag.labels(m).observe(self.sim.now() - now)
        if s.last_token_s < 0:  # its first token
            self.ttft.labels(m).observe(now - s.arrival_s)
            self.prompt_tokens.labels(m).inc(s.req.num_prompt_tokens)
        else:
            self.itl.labels(m).observe(now - s.last_token_s)
            self.tpot.labels(m).observe(now - s.last_token_s)

    def on_finished(self, s: Stream) -> None:
        self.e2e.labels(self.model).observe(s.req.finished_s - s.arrival_s)
        self.finished.labels(self.model, "length").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _reader(read: Callable[[Replica], float], rep: Replica) -> Callable[[], float]:
    return lambda: float(read(rep))
