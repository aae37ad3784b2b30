"""Workloads: trace readers and synthetic generators, all returning a :class:`Workload`.

``load_workload(cfg, seed)`` is the one entry point the simulator needs; the readers and
generators are public for notebooks and tests.
"""

from __future__ import annotations

from servesim.config import (
    AgentWorkload,
    BenchmarkWorkload,
    GuidellmWorkload,
    InferencePerfWorkload,
    MixtureWorkload,
    ReasoningWorkload,
    SessionWorkload,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadKind,
)
from servesim.errors import ConfigError
from servesim.workload.agents import generate_agents
from servesim.workload.base import BenchmarkClients, Workload
from servesim.workload.benchmark import generate_benchmark
from servesim.workload.containers import BUILTIN_TRACES
from servesim.workload.guidellm import generate_guidellm
from servesim.workload.inference_perf import generate_inference_perf
from servesim.workload.mixture import generate_mixture
from servesim.workload.reasoning import generate_reasoning
from servesim.workload.sessions import generate_sessions
from servesim.workload.synthetic import arrival_times, generate_synthetic, sample_lengths
from servesim.workload.traces import load_trace, read_lengths, read_trace, select

__all__ = [
    "BUILTIN_TRACES",
    "BenchmarkClients",
    "Workload",
    "arrival_times",
    "generate_agents",
    "generate_benchmark",
    "generate_guidellm",
    "generate_inference_perf",
    "generate_mixture",
    "generate_reasoning",
    "generate_sessions",
    "generate_synthetic",
    "load_trace",
    "load_workload",
    "read_lengths",
    "read_trace",
    "sample_lengths",
    "select",
]


def load_workload(cfg: WorkloadKind, seed: int = 0) -> Workload:
    """The requests of a workload config.

    Synthetic, benchmark, sessions, mixtures, agents and reasoning: ``seed`` is added to
    ``cfg.seed`` (a run's seed varies the draw). Traces are deterministic and ignore ``seed``.
    """
    if isinstance(cfg, SyntheticWorkload):
        return generate_synthetic(cfg, seed)
    if isinstance(cfg, BenchmarkWorkload):
        return generate_benchmark(cfg, seed)
    if isinstance(cfg, TraceWorkload):
        return load_trace(cfg)
    if isinstance(cfg, SessionWorkload):
        return generate_sessions(cfg, seed)
    if isinstance(cfg, MixtureWorkload):
        return generate_mixture(cfg, seed)
    if isinstance(cfg, AgentWorkload):
        return generate_agents(cfg, seed)
    if isinstance(cfg, ReasoningWorkload):
        return generate_reasoning(cfg, seed)
    if isinstance(cfg, InferencePerfWorkload):
        return _first(
            generate_inference_perf(cfg.config, cfg.seed + seed, cfg.num_special_tokens, cfg.rate_scale),
            cfg.limit,
        )
    if isinstance(cfg, GuidellmWorkload):
        return _first(
            generate_guidellm(cfg.config, cfg.seed + seed, cfg.num_special_tokens, cfg.rate_scale), cfg.limit
        )
    raise TypeError(
        f"expected a SyntheticWorkload, TraceWorkload or BenchmarkWorkload, got {type(cfg).__name__}"
    )


def _first(wl: Workload, limit: int | None) -> Workload:
    """The first ``limit`` requests of an open-loop generated workload (all of them: None)."""
    if limit is None or limit >= len(wl):
        return wl
    if wl.is_closed_loop:
        raise ConfigError(
            "workload.limit: a closed loop of clients is cut by its own request count "
            "(max_requests), not by limit"
        )
    out = select(wl, limit=limit)
    if "stage" in out.meta:
        out.meta["stage"] = out.meta["stage"][:limit]
    return out
