"""The cluster section: pools, routers, KV link, disaggregation, migration."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict
from servesim.config.engine import EngineConfig
from servesim.config.operations import OperationsConfig
from servesim.config.parts import GpuConfig, LinksConfig, ParallelConfig

# --------------------------------------------------------------------------- cluster

#: What a pool serves, the values of ``PoolConfig.role``.
PoolRole = Literal["colocated", "prefill", "decode"]
RouterName = Literal[
    "round_robin",
    "random",
    "least_outstanding",
    "least_kv",
    "least_work",
    "power_of_two",
    "prefix_affinity",
    "predicted_ttft",
    "vllm_dp",
    "llumnix",
    "predicted_latency",
    "infaas",
]


class PoolConfig(_Strict):
    """Identical replicas (data parallelism): GPU type, parallelism and engine of each."""

    name: str = Field(min_length=1, description="Unique name of the pool (in reports and records).")
    role: PoolRole = Field(
        "colocated", description="colocated serves whole requests; prefill/decode split them."
    )
    num_replicas: int = Field(
        1,
        ge=1,
        description=(
            "Identical replicas in the pool; with parallel.data_parallel_size > 1 each is a server "
            "of that many engines (DP ranks), and the pool runs num_replicas x data_parallel_size."
        ),
    )
    gpu: str | GpuConfig | None = Field(None, description="Catalog name or custom GPU; None: hardware.gpu.")
    parallel: ParallelConfig | None = Field(None, description="None: the scenario's parallel section.")
    engine: EngineConfig | None = Field(None, description="None: the scenario's engine section.")
    links: LinksConfig = Field(LinksConfig(), description="Overrides of the GPU's links.")
    model: str | None = Field(
        None,
        min_length=1,
        description=(
            "The base model this pool serves (a catalog preset or a config.json path, as model.name; "
            "dtypes from the model section); None: model.name. Pools of different models form a "
            "multi-model cluster: each request goes to a replica of its own model (docs/cluster.md)."
        ),
        json_schema_extra={"vllm": "vllm serve MODEL"},
    )
    served_model_name: str | None = Field(
        None,
        min_length=1,
        description=(
            "The name requests give in their model field to reach this pool; None: the pool's model "
            "as written (vLLM's default)."
        ),
        json_schema_extra={"vllm": "--served-model-name"},
    )


class KvLinkConfig(_Strict):
    """The link KV caches cross between replicas (disaggregation, migration)."""

    bandwidth_gb_per_s: float | None = Field(
        None,
        gt=0,
        description=(
            "GB/s one way of one link; None: the sender's per-GPU network bandwidth x min(GPUs of "
            "sender, receiver), as each TP rank sends its shard over its own NIC."
        ),
    )
    latency_us: float | None = Field(
        None, ge=0, description=("One-way latency; None: the catalog's network latency.")
    )
    shared_by: Literal["receiver", "sender", "cluster"] = Field(
        "receiver", description="Transfers into one replica (or out of one, or all) share one link equally."
    )


class OverflowConfig(_Strict):
    """Splitwise's mixed pool (``MixedPoolScheduler`` of Mutinifni/splitwise-sim at 8f99e7d;
    servesim.cluster.overflow): an overloaded prefill pool lends prompts to decode replicas,
    a full decode pool borrows prefill replicas; a lent or borrowed replica serves both phases
    until it is idle, then returns to its pool."""

    enabled: bool = Field(False, description="Let the two pools overflow into each other.")
    prefill_queue_tokens: int = Field(
        8192,
        ge=1,
        json_schema_extra={"unit": "tokens"},
        description=(
            "A prefill replica is overloaded when it has waiting requests and its pending tokens "
            "(prompt tokens still to compute plus one per running request) plus the new prompt pass "
            "this (the artifact's prompt_max_pending_batch_tokens, mixed_pool.yml)."
        ),
    )
    decode_capacity_tokens: int | None = Field(
        None,
        ge=1,
        json_schema_extra={"unit": "tokens"},
        description=(
            "A decode replica is full when the tokens its requests hold at their longest (prompt + "
            "max_tokens of each routed and not finished) plus the new request's reach this; None: "
            "its KV cache's tokens."
        ),
    )


class DisaggConfig(_Strict):
    """Prefill/decode disaggregation (docs/cluster.md)."""

    decode_prefill_fraction: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        json_schema_extra={"unit": "fraction"},
        description=(
            "Balanced disaggregation (MicroServing): the decode replica computes this tail fraction "
            "of the prompt and the first token."
        ),
    )
    colocate_below_tokens: int = Field(
        0,
        ge=0,
        json_schema_extra={"unit": "tokens"},
        description=(
            "Prompts shorter than this skip the prefill pool and are served whole by a decode replica."
        ),
    )
    overflow: OverflowConfig = Field(
        OverflowConfig(), description="Splitwise's mixed pool: the pools lend replicas to each other."
    )


class MigrationConfig(_Strict):
    """Live migration of running requests between replicas of a pool."""

    enabled: bool = Field(False, description="Llumnix-style live migration of running requests.")
    interval_s: float = Field(
        0.5, gt=0, description="How often the replicas are paired, most with least loaded."
    )
    threshold: float = Field(
        0.2,
        gt=0,
        le=1,
        description="load usage: the KV-load gap (fraction of blocks) that migrates.",
        json_schema_extra={"unit": "fraction"},
    )
    load: Literal["usage", "freeness"] = Field(
        "usage",
        description=(
            "The load migration balances: usage (blocks in use plus the queued requests' blocks, over "
            "all blocks; pairs whose gap passes threshold migrate) or freeness (Llumnix's, "
            "servesim.cluster.freeness: free blocks per request after the virtual usages, with "
            "priority_headroom_tokens and draining replicas at -inf; replicas below "
            "freeness_threshold send to replicas above it)."
        ),
    )
    freeness_threshold: float = Field(
        3.0,
        description=(
            "load freeness: replicas freer than this receive, the others send (blocks per request; "
            "Llumnix's MIGRATE_OUT_THRESHOLD, -3 as a load)."
        ),
        json_schema_extra={"unit": "blocks per request"},
    )


class ClusterConfig(_Strict):
    """Pools of replicas behind a router; absent means the single replica of the scenario."""

    pools: list[PoolConfig] = Field(min_length=1, description="The pools of replicas (one at least).")
    router: RouterName = Field("round_robin", description="Picks a replica (servesim.cluster.router).")
    decode_router: RouterName | None = Field(None, description="Router of the decode pool; None: router.")
    staleness_s: float = Field(0.0, ge=0, description="The router sees replica state this long ago.")
    prefix_load_cap: int = Field(
        8,
        ge=0,
        json_schema_extra={"unit": "requests"},
        description=(
            "prefix_affinity: only replicas with at most this many more outstanding requests than the "
            "least loaded compete."
        ),
    )
    priority_headroom_tokens: dict[int, int] = Field(
        default_factory=dict,
        description=(
            "Llumnix's headroom per request priority, e.g. {0: 4096}: a replica running requests of "
            "that priority counts this many more tokens in use in its freeness (the llumnix router, "
            "migration with load freeness), so normal requests keep off it (docs/policies.md, Priorities)."
        ),
    )
    link: KvLinkConfig = Field(KvLinkConfig(), description="The link KV caches cross between replicas.")
    disaggregation: DisaggConfig = Field(DisaggConfig(), description="Prefill/decode split options.")
    migration: MigrationConfig = Field(MigrationConfig(), description="Live migration (off by default).")
    operations: OperationsConfig | None = Field(
        None,
        description=(
            "Autoscaling, failures, power capping and time series (docs/operations.md); None: a fixed fleet."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        roles = {p.role for p in self.pools}
        if ("prefill" in roles) != ("decode" in roles):
            raise ValueError("a disaggregated cluster needs both a prefill and a decode pool")
        if "prefill" in roles and "colocated" in roles:
            raise ValueError(
                "mixing colocated and prefill/decode pools is not supported; use "
                "disaggregation.colocate_below_tokens to serve short prompts on decode replicas"
            )
        if self.operations is not None:
            self._check_operations(self.operations, set(names))
        if self.disaggregation.overflow.enabled:
            self._check_overflow(roles)
        return self

    def _check_overflow(self, roles: set[PoolRole]) -> None:
        """The mixed pool needs a prefill and a decode pool of one model and a fixed fleet."""
        where = "disaggregation.overflow.enabled"
        if "prefill" not in roles:
            raise ValueError(f"{where} needs a prefill and a decode pool (this cluster has {sorted(roles)})")
        if len({p.model for p in self.pools}) > 1 or any(p.served_model_name for p in self.pools):
            raise ValueError(f"{where} does not combine with pools of several models")
        if self.operations is not None:
            raise ValueError(f"{where} does not combine with operations (a fixed fleet only)")
        if self.migration.enabled:
            raise ValueError(f"{where} does not combine with migration.enabled")

    def _check_operations(self, ops: OperationsConfig, names: set[str]) -> None:
        """Every pool an operation names exists; live migration does not mix with failures."""
        named: list[tuple[str, str]] = []
        if ops.autoscaling is not None:
            named += [("autoscaling.pools", s.pool) for s in ops.autoscaling.pools]
            named += [("autoscaling.schedule", n) for n in ops.autoscaling.schedule]
        if ops.failures is not None:
            named += [("failures.events", e.pool) for e in ops.failures.events]
        if ops.power is not None:
            named += [("power.low_priority_pools", n) for n in ops.power.low_priority_pools]
        for where, name in named:
            if name not in names:
                raise ValueError(f"operations.{where}: no pool named {name!r} (pools: {sorted(names)})")
        # Replicas are numbered in start order, those stopped or failed included: a pool that
        # scales, or fails at a rate, may reach any number (a failure of one not there then is a
        # notice at run time); a fixed pool has its own and one replacement per recovering failure.
        f = ops.failures
        sizes = {p.name: p.num_replicas for p in self.pools}
        open_ended = {r.pool for r in ops.autoscaling.pools} if ops.autoscaling is not None else set()
        for e in f.events if f is not None else []:
            sizes[e.pool] += e.recover_after_s is not None
        for e in f.events if f is not None and f.rate_per_hour == 0 else []:
            if e.pool not in open_ended and e.replica >= sizes[e.pool]:
                raise ValueError(
                    f"operations.failures.events: pool {e.pool!r} never has a replica {e.replica} "
                    f"(it has at most {sizes[e.pool]}, numbered from 0)"
                )
        if self.migration.enabled and f is not None:
            raise ValueError(
                "operations.failures and migration.enabled do not combine: migration moves requests "
                "between replicas that stay up (autoscaling and power capping combine with it)"
            )
