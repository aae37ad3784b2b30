"""The search space: candidate deployments built from a base scenario and its ``plan:`` ranges.

A candidate is one complete, validated ``Scenario`` (what ``servesim simulate`` would run)
plus the shape that names it: GPU, colocated or disaggregated, each pool's replicas and
TP/PP/EP/DP, and the engine knobs. Candidates are numbered in a fixed enumeration order, so
the same plan always yields the same ids; every result is reported by id.

Two ways in: a plan file (a scenario file with a ``plan:`` section, ``load_plan``), or the
short form of the command line (``plan_from_options``: model, GPUs, a GPU budget, prompt
and output lengths or a trace, SLOs and a target rate), answered like NVIDIA
AIConfigurator's ``cli default`` (aggregated vs disaggregated) but by simulation.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servesim.config import KVOffloadConfig, ParallelConfig, Scenario, scenario_from_dict
from servesim.config.cluster import PoolRole
from servesim.config.files import read_scenario_file
from servesim.config.messages import format_validation_error
from servesim.config.plan import PlanConfig
from servesim.errors import ConfigError


@dataclass(frozen=True, slots=True)
class PoolShape:
    """One pool of a candidate: its role, replicas and each replica's layout."""

    role: PoolRole
    num_replicas: int
    tp: int
    pp: int = 1
    ep: int = 1
    dp: int = 1  # data-parallel ranks of each replica (a vLLM server of dp x tp GPUs)

    @property
    def num_gpus(self) -> int:
        return self.num_replicas * self.tp * self.pp * self.dp

    def label(self) -> str:
        ep = f"ep{self.ep}" if self.ep > 1 else ""
        pp = f"pp{self.pp}" if self.pp > 1 else ""
        dp = f"dp{self.dp}" if self.dp > 1 else ""
        return f"{self.num_replicas}x tp{self.tp}{pp}{dp}{ep}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One deployment of the search: its id (enumeration order), shape and scenario."""

    id: int
    gpu: str
    mode: str  # colocated | disaggregated
    pools: tuple[PoolShape, ...]
    knobs: tuple[tuple[str, Any], ...]  # engine knobs and router, as (name, value)
    scenario: Scenario
    shown: tuple[str, ...] = ()  # the knobs the plan varies (in the label)

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    def label(self) -> str:
        pools = " + ".join(
            f"{p.role[0].upper()} {p.label()}" if p.role != "colocated" else p.label() for p in self.pools
        )
        knobs = " ".join(f"{k}={v}" for k, v in self.knobs if k in self.shown and v is not None)
        return f"{self.gpu} {pools}" + (f" {knobs}" if knobs else "")

    def describe(self) -> dict[str, Any]:
        """The shape as flat columns (candidates.parquet)."""
        out: dict[str, Any] = {
            "id": self.id,
            "label": self.label(),
            "gpu": self.gpu,
            "mode": self.mode,
            "num_gpus": self.num_gpus,
        }
        for p in self.pools:
            key = "" if p.role == "colocated" else f"{p.role}_"
            out.update(
                {
                    f"{key}replicas": p.num_replicas,
                    f"{key}tp": p.tp,
                    f"{key}pp": p.pp,
                    f"{key}ep": p.ep,
                    f"{key}dp": p.dp,
                }
            )
        out.update(dict(self.knobs))
        return out


# --------------------------------------------------------------------------- reading a plan


def load_plan(path: str | Path, overrides: list[str] | None = None) -> tuple[Scenario, PlanConfig]:
    """A plan file: the scenario fields are the base, the ``plan:`` section the ranges.

    ``--set plan.X=...`` overrides reach the plan section, the others the scenario.
    """
    from servesim.config.scenario import _resolve_relative_paths

    p = Path(path)
    data = read_scenario_file(p)
    section = data.pop("plan", None)
    if section is None:
        raise ConfigError(
            f"{p}: no plan: section; a plan file is a scenario with a plan: section "
            "of the ranges to search (docs/planning.md)"
        )
    plan_sets = [o for o in overrides or [] if o.startswith("plan.")]
    base = scenario_from_dict(data, str(p), [o for o in overrides or [] if not o.startswith("plan.")])
    return _resolve_relative_paths(base, p.parent), plan_config(section, str(p), plan_sets)


def plan_config(section: Any, source: str, overrides: list[str] | None = None) -> PlanConfig:
    """Validate a ``plan:`` mapping (after ``--set plan.X=V`` overrides) or say which field is wrong."""
    from pydantic import ValidationError

    from servesim.config.overrides import parse_override, set_path

    if not isinstance(section, dict):
        raise ConfigError(f"{source}: plan: expected a mapping of ranges, found {type(section).__name__}")
    data = dict(section)
    for text in overrides or []:
        key, value = parse_override(text)
        set_path(data, key.removeprefix("plan."), value, PlanConfig())
    try:
        return PlanConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source, PlanConfig, "plan")) from None


def plan_from_options(
    model: str,
    gpus: list[str],
    total_gpus: int,
    *,
    rate: float,
    isl: int | None = None,
    osl: int | None = None,
    trace: str | None = None,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    num_requests: int = 400,
    max_model_len: int | None = None,
    modes: tuple[str, ...] = ("colocated", "disaggregated"),
    seed: int = 0,
    confidence: float | None = None,
) -> tuple[Scenario, PlanConfig]:
    """The short form: a base scenario from the options and the default ranges for them
    (``confidence``: ``slo.confidence``, the SLO held at the prediction interval's high end)."""
    if (trace is None) == (isl is None or osl is None):
        raise ConfigError("plan: give either --isl and --osl (synthetic requests) or --trace, not both")
    if ttft_s is None and tpot_s is None:
        raise ConfigError("plan: give at least one SLO (--ttft or --tpot)")
    if trace is not None:
        workload: dict[str, Any] = {
            "type": "trace",
            "path": trace,
            "limit": num_requests,
            "rate_scale": rate / native_rate(trace, num_requests),
        }
    else:
        assert isl is not None and osl is not None  # checked above: --isl and --osl, or --trace
        workload = {
            "type": "synthetic",
            "num_requests": num_requests,
            "arrival": {"rate": rate},
            "prompt_len": {"kind": "constant", "value": isl, "max": max(isl, 1_000_000)},  # unclipped
            "output_len": {"kind": "constant", "value": osl, "max": max(osl, 1_000_000)},
        }
    data = {
        "name": f"plan-{Path(model).stem}",
        "model": {"name": model},
        "workload": workload,
        "slo": {"ttft_s": ttft_s, "tpot_s": tpot_s, "confidence": confidence},
        "run": {"seed": seed, "record_steps": False},
        "engine": {"max_model_len": max_model_len} if max_model_len else {},
    }
    base = scenario_from_dict(data, "plan options")
    return base, plan_config(
        {"gpus": gpus, "max_total_gpus": total_gpus, "modes": list(modes)}, "plan options"
    )


def native_rate(trace: str, limit: int | None) -> float:
    """Mean arrival rate (requests/s) of the first ``limit`` requests of a trace."""
    from servesim.config import TraceWorkload
    from servesim.workload import load_workload

    wl = load_workload(TraceWorkload(path=trace, limit=limit))
    span = float(wl.arrival_s[-1] - wl.arrival_s[0]) if len(wl) > 1 else 0.0
    if span <= 0:
        raise ConfigError(f"{trace}: its requests all arrive at once; a target rate cannot be set from it")
    return (len(wl) - 1) / span


# --------------------------------------------------------------------------- enumeration


def _replica_counts(plan: PlanConfig, gpus_per_replica: int) -> list[int]:
    most = plan.max_total_gpus // gpus_per_replica
    if plan.replicas is not None:
        return [r for r in plan.replicas if r <= most]
    counts = [r for r in (1 << k for k in range(most.bit_length())) if r <= most]
    return sorted({*counts, most}) if most else []


def _pool_shapes(plan: PlanConfig, layouts: list[tuple[int, int, int, int]]) -> list[tuple[PoolShape, ...]]:
    """Colocated shapes: each layout times each replica count."""
    return [
        (PoolShape("colocated", r, tp, pp, ep, dp),)
        for tp, pp, ep, dp in layouts
        for r in _replica_counts(plan, tp * pp * dp)
    ]


def _disagg_shapes(
    plan: PlanConfig, pre: list[tuple[int, int, int, int]], dec: list[tuple[int, int, int, int]]
) -> list[tuple[PoolShape, ...]]:
    """Disaggregated shapes: each prefill and decode layout, each ratio scaled while it fits."""
    out: list[tuple[PoolShape, ...]] = []
    for (ptp, ppp, pep, _), (dtp, dpp, dep, _) in itertools.product(pre, dec):
        seen = set()
        for a, b in plan.ratios():
            k = 1
            while (k * a * ptp * ppp + k * b * dtp * dpp) <= plan.max_total_gpus:
                if (k * a, k * b) not in seen:
                    seen.add((k * a, k * b))
                    out.append(
                        (
                            PoolShape("prefill", k * a, ptp, ppp, pep),
                            PoolShape("decode", k * b, dtp, dpp, dep),
                        )
                    )
                k += 1
    return out


def _layouts(
    tps: list[int], plan: PlanConfig, dps: list[int] | None = None
) -> list[tuple[int, int, int, int]]:
    """(tp, pp, ep, dp) of each replica layout: EP over all the server's GPUs (dp x tp) when
    tried; data-parallel ranks without pipeline stages (vLLM refuses DP with PP here)."""
    return [
        (tp, pp, tp * dp if ep else 1, dp)
        for tp in tps
        for pp in plan.pipeline_parallel_sizes
        for dp in (dps or [1])
        if dp == 1 or pp == 1
        for ep in plan.expert_parallel
    ]


def _data_parallel_sizes(base: Scenario, plan: PlanConfig) -> list[int]:
    """The plan's DP sizes, refused for a dense model (its ranks would be plain replicas)."""
    if all(d == 1 for d in plan.data_parallel_sizes):
        return [1]
    from servesim.catalog.hf_config import load_model

    if not load_model(base.model.name).is_moe:
        raise ConfigError(
            f"plan.data_parallel_sizes {plan.data_parallel_sizes}: {base.model.name} is a "
            "dense model, whose data-parallel ranks share nothing and are replicas: search "
            "plan.replicas instead (data-parallel ranks pay off for MoE models)"
        )
    return plan.data_parallel_sizes


def enumerate_candidates(base: Scenario, plan: PlanConfig) -> list[Candidate]:
    """Every candidate of the plan, in a fixed order (ids 0, 1, ...), GPU budget applied."""
    from servesim.catalog.gpus import get_gpu

    # Catalog names (an alias such as 'h100' becomes 'H100-SXM'; an unknown name is an error).
    gpus = (
        [get_gpu(g).name for g in plan.gpus]
        if plan.gpus
        else [base.hardware.gpu if isinstance(base.hardware.gpu, str) else base.hardware.gpu.name]
    )
    shapes: list[tuple[PoolShape, ...]] = []
    if "colocated" in plan.modes:
        shapes += _pool_shapes(
            plan, _layouts(plan.tensor_parallel_sizes, plan, _data_parallel_sizes(base, plan))
        )
    if "disaggregated" in plan.modes:
        shapes += _disagg_shapes(
            plan,
            _layouts(plan.prefill_tensor_parallel_sizes or plan.tensor_parallel_sizes, plan),
            _layouts(plan.decode_tensor_parallel_sizes or plan.tensor_parallel_sizes, plan),
        )
    eng = base.engine
    axes: dict[str, list[Any]] = {  # engine knobs (ints, bools) to try, by EngineConfig field
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "max_num_seqs": plan.max_num_seqs,
        "enable_chunked_prefill": plan.enable_chunked_prefill or [eng.enable_chunked_prefill],
        "enable_prefix_caching": plan.enable_prefix_caching or [eng.enable_prefix_caching],
        "kv_offloading_size_gib": plan.kv_offloading_size_gib or [eng.kv_offload.cpu_size_gib],
    }
    if plan.max_loras:
        if not eng.lora.enabled:
            raise ConfigError(
                "plan.max_loras: the scenario serves no LoRA adapters (set engine.lora.enabled)"
            )
        axes["max_loras"] = plan.max_loras
    if eng.lora.enabled and any(x > 0 for x in axes["kv_offloading_size_gib"]):
        raise ConfigError(
            "plan.kv_offloading_size_gib: KV offloading is not modelled with engine.lora (LoRA "
            "adapters), so no such candidate can run; expected [0], or a scenario without LoRA"
        )
    routers = plan.routers or [base.cluster.router if base.cluster else "round_robin"]
    shown = tuple(k for k, v in axes.items() if len(v) > 1) + (("router",) if len(routers) > 1 else ())
    out: list[Candidate] = []
    for gpu, shape in itertools.product(gpus, shapes):
        many = sum(p.num_replicas for p in shape) > 1
        for values in itertools.product(*axes.values(), routers if many else [None]):
            knobs = tuple(zip([*axes, "router"], values))
            out.append(
                Candidate(
                    len(out),
                    gpu,
                    "disaggregated" if shape[0].role == "prefill" else "colocated",
                    shape,
                    knobs,
                    candidate_scenario(base, gpu, shape, dict(knobs)),
                    shown,
                )
            )
    return out


def offload_knob(off: KVOffloadConfig, size_gib: float) -> dict[str, Any]:
    """``engine.kv_offload`` for one offload size: off at 0, else the scenario's backend (native if none)."""
    if size_gib <= 0:
        return {"backend": "none"}
    backend = off.backend if off.enabled else "native"
    return {**off.model_dump(exclude_unset=True), "backend": backend, "cpu_size_gib": size_gib}


def candidate_scenario(
    base: Scenario, gpu: str, shape: tuple[PoolShape, ...], knobs: dict[str, Any]
) -> Scenario:
    """The base scenario with this GPU, layout, engine knobs and router (validated)."""
    engine_upd = {
        k: v for k, v in knobs.items() if k not in ("router", "max_loras", "kv_offloading_size_gib")
    }
    if "kv_offloading_size_gib" in knobs:
        engine_upd["kv_offload"] = offload_knob(base.engine.kv_offload, knobs["kv_offloading_size_gib"])
    if "max_loras" in knobs:  # a LoRA slot count: max_cpu_loras (if set) at least as many
        lora = base.engine.lora.model_dump(exclude_unset=True)
        n = knobs["max_loras"]
        cpu = base.engine.lora.max_cpu_loras
        engine_upd["lora"] = {**lora, "max_loras": n, **({"max_cpu_loras": max(cpu, n)} if cpu else {})}
    try:
        engine = base.engine.model_validate({**base.engine.model_dump(exclude_unset=True), **engine_upd})
    except ValidationError as err:  # a combination of the plan's values the engine refuses
        tried = ", ".join(f"{k}={v}" for k, v in knobs.items() if k != "router")
        raise ConfigError(
            f"plan: the candidate with {tried}: "
            + format_validation_error(err, "engine", type(base.engine)).split(": ", 1)[1]
        ) from None

    def par(p: PoolShape) -> ParallelConfig:
        return base.parallel.model_copy(
            update={
                "tensor_parallel_size": p.tp,
                "pipeline_parallel_size": p.pp,
                "expert_parallel_size": p.ep,
                "data_parallel_size": p.dp,
            }
        )

    upd: dict[str, Any] = {
        "hardware": base.hardware.model_copy(update={"gpu": gpu}),
        "engine": engine,
        "name": f"{base.name}-{gpu}-" + "-".join(p.label().replace(" ", "") for p in shape),
    }
    if len(shape) == 1 and shape[0].num_replicas == 1:
        upd.update(parallel=par(shape[0]), cluster=None)
        return base.model_copy(update=upd)
    from servesim.config import ClusterConfig, PoolConfig

    pools = [
        PoolConfig(
            name="main" if p.role == "colocated" else p.role,
            role=p.role,
            num_replicas=p.num_replicas,
            parallel=par(p),
        )
        for p in shape
    ]
    prior = base.cluster.model_dump(exclude={"pools", "router"}) if base.cluster else {}
    upd.update(
        parallel=par(shape[0]),
        cluster=ClusterConfig.model_validate(
            {
                **prior,
                "pools": [p.model_dump() for p in pools],
                "router": knobs.get("router") or "round_robin",
            }
        ),
    )
    return base.model_copy(update=upd)
