"""``simulate(scenario) -> Result``: one simulation as a pure function.

There is one driver: every scenario runs as a cluster (``deployment.as_cluster``: a plain
scenario is one pool of one replica), resolved once into one ``Deployment`` per pool,
fed, run and summarized by ``servesim.cluster.pools.simulate_cluster``. Nothing here
touches files except reading the scenario's inputs; outputs are written by the caller.

``run_engine`` is that driver for one replica built from parts (an engine config, a perf
model, a block count: no catalog), which tests and the papers' checks use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.cluster.pools import tenant_record  # noqa: F401 (re-exported: its old home)
from servesim.cluster.spec import TenantRun
from servesim.config import EngineConfig, Scenario, load_scenario, resolve_engine, scenario_from_dict
from servesim.deployment import SINGLE_POOL, check_budget  # noqa: F401 (re-exported: its old home)
from servesim.engine.arrivals import iter_requests
from servesim.engine.request import Request
from servesim.metrics.records import ItlSamples, ReplicaTotals, RequestRecords, Result, StepSeries
from servesim.perf.base import PerfModel
from servesim.workload.base import Workload

if TYPE_CHECKING:
    from servesim.engine.tenants import TenantSetup

__all__ = ["EngineRun", "Result", "TenantRun", "make_requests", "run_engine", "simulate", "tenant_record"]


@dataclass(slots=True)
class EngineRun:
    """The raw outcome of running one replica over a workload."""

    records: RequestRecords
    steps: StepSeries
    itl: ItlSamples
    totals: ReplicaTotals
    end_s: float
    tenants: TenantRun | None = None


def make_requests(wl: Workload) -> list[Request]:
    return list(iter_requests(wl))


def run_engine(
    wl: Workload,
    engine: EngineConfig,
    perf: PerfModel,
    num_gpu_blocks: int,
    max_model_len: int,
    *,
    num_gpus: int = 1,
    check_invariants: bool = False,
    reference: bool = False,
    until_s: float = float("inf"),
    progress: Callable[[int], None] | None = None,
    record_steps: bool = True,
    kv_bytes_per_block: float = 0.0,
    tenants: TenantSetup | None = None,
    step_series: StepSeries | None = None,
) -> EngineRun:
    """Run one replica of the engine over ``wl`` (no catalog needed: tests use this): the
    one driver (``cluster.run_cluster``) on a pool of one replica.

    ``engine`` is resolved for ``max_model_len`` without a GPU (``config.resolve_engine``);
    ``reference`` selects the step-by-step reference scheduler instead of the lazy one;
    both make the same decisions (tests/test_differential.py holds them to it). Policies
    and options the lazy engine lacks always run step by step (``engine.build``).
    ``kv_bytes_per_block`` (the memory plan's) sizes swap space and swap copies.
    ``progress(num_done)`` is called about 200 times over the run when given.
    ``record_steps=False`` drops the per-step series (streaming runs). ``tenants``: the
    weights and admission control of ``wl``'s tenants (``cluster.run_cluster``).
    ``step_series`` replaces the in-memory step series (a ``metrics.step_stream.
    StreamedStepSeries`` writes it to a file as the run goes).
    """
    from servesim.cluster.run import run_cluster
    from servesim.cluster.spec import PoolSpec
    from servesim.config import ClusterConfig, PoolConfig

    pool = PoolSpec(
        name=SINGLE_POOL,
        role="colocated",
        num_replicas=1,
        engine=resolve_engine(engine, max_model_len=max_model_len),
        perf=perf,
        num_gpu_blocks=num_gpu_blocks,
        max_model_len=max_model_len,
        num_gpus=num_gpus,
        reference=reference,
        kv_bytes_per_block=kv_bytes_per_block,
    )
    run = run_cluster(
        wl,
        [pool],
        ClusterConfig(pools=[PoolConfig(name=SINGLE_POOL)]),
        check_invariants=check_invariants,
        until_s=until_s,
        record_steps=record_steps,
        progress=progress,
        tenants=tenants,
        step_series=step_series,
    )
    return EngineRun(run.records, run.steps, run.itl, run.totals[0], run.end_s, run.tenants)


# --------------------------------------------------------------------------- scenario level


def _resolve(scenario: Scenario | dict | str | Path | None) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if scenario is None or isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    return scenario_from_dict(scenario)


def simulate(
    scenario: Scenario | dict[str, Any] | str | Path | None = None,
    *,
    progress: bool = False,
    stream_steps_to: Path | None = None,
    steps_format: str = "parquet",
) -> Result:
    """Run the scenario and return its Result with ``summary`` filled: the one driver
    (``cluster.pools.simulate_cluster``) for a plain scenario and a cluster alike.
    ``stream_steps_to``: a directory where a long run streams its step series
    (``cluster.pools.STREAM_STEPS_FROM_REQUESTS``; ``metrics.output.write_outputs`` moves
    the file into place)."""
    from servesim.cluster.pools import simulate_cluster

    return simulate_cluster(
        _resolve(scenario), progress=progress, stream_steps_to=stream_steps_to, steps_format=steps_format
    )
