"""Scenario: the validated, immutable description of one simulation.

Every field has a default, units are in the names, and unknown keys are errors. The
scenario is resolved once (file, then ``--set`` overrides, then validation); derived
values (number of KV blocks, perf-model coefficients) come from pure functions of it and
are never written back.

The parts live in ``parts`` (model, SLOs, run), ``hardware`` (GPU, parallelism, links),
``workloads`` (lengths, synthetic, trace, benchmark), ``arrival``
(arrival processes and rate profiles), ``engine`` (its sub-sections in ``speculative``,
``frontend``, ``kv_offload`` and ``lora``; the resolution of its defaults in
``engine_defaults``; the vLLM versions in ``vllm_version`` and the server's environment
variables in ``vllm_env``), ``cluster`` and ``scenario`` (the whole, and how
it is read); ``files`` reads a scenario file, ``overrides`` applies ``--set``,
``messages`` words validation errors, ``layout`` checks a layout against its model and
``reference`` renders docs/scenario_reference.md. Everything is importable from
``servesim.config``.
"""

from servesim.config.arrival import ArrivalConfig, DelayDist, RateProfileConfig
from servesim.config.cluster import (
    ClusterConfig,
    DisaggConfig,
    KvLinkConfig,
    MigrationConfig,
    OverflowConfig,
    PoolConfig,
    RouterName,
)
from servesim.config.engine import EngineConfig, budget_refusal
from servesim.config.engine_defaults import (
    GIB,
    POLICY_DEFAULTS,
    ResolvedEngine,
    resolve_engine,
    resolve_kv_offload,
    resolve_policy,
)
from servesim.config.frontend import FrontendConfig
from servesim.config.hardware import GpuConfig, HardwareConfig, LinksConfig, ParallelConfig
from servesim.config.kv_offload import KVOffloadConfig
from servesim.config.lora import LoraAdapterConfig, LoraConfig
from servesim.config.overrides import parse_override
from servesim.config.parts import ModelConfig, PercentileLimit, RunConfig, SloConfig
from servesim.config.scenario import (
    Scenario,
    gpu_config_from_dict,
    load_scenario,
    read_gpu_config,
    scenario_from_dict,
)
from servesim.config.speculative import SpeculativeConfig
from servesim.config.tenants import TenantConfig
from servesim.config.workload_kinds import (
    AgentNode,
    AgentWorkload,
    ClientConfig,
    GuidellmWorkload,
    InferencePerfWorkload,
    MixtureWorkload,
    ReasoningWorkload,
    SessionWorkload,
    WorkloadConfig,
    WorkloadKind,
)
from servesim.config.workloads import BenchmarkWorkload, LengthDist, SyntheticWorkload, TraceWorkload

__all__ = [
    "resolve_kv_offload",
    "KVOffloadConfig",
    "GIB",
    "POLICY_DEFAULTS",
    "AgentNode",
    "AgentWorkload",
    "ReasoningWorkload",
    "ArrivalConfig",
    "BenchmarkWorkload",
    "ClientConfig",
    "ClusterConfig",
    "DelayDist",
    "DisaggConfig",
    "EngineConfig",
    "FrontendConfig",
    "GpuConfig",
    "GuidellmWorkload",
    "HardwareConfig",
    "InferencePerfWorkload",
    "KvLinkConfig",
    "LengthDist",
    "LinksConfig",
    "MigrationConfig",
    "OverflowConfig",
    "MixtureWorkload",
    "ModelConfig",
    "ParallelConfig",
    "PercentileLimit",
    "PoolConfig",
    "RateProfileConfig",
    "RouterName",
    "RunConfig",
    "Scenario",
    "SessionWorkload",
    "SloConfig",
    "SpeculativeConfig",
    "SyntheticWorkload",
    "LoraAdapterConfig",
    "LoraConfig",
    "TenantConfig",
    "TraceWorkload",
    "WorkloadConfig",
    "WorkloadKind",
    "gpu_config_from_dict",
    "load_scenario",
    "parse_override",
    "read_gpu_config",
    "ResolvedEngine",
    "budget_refusal",
    "resolve_engine",
    "resolve_policy",
    "scenario_from_dict",
]
