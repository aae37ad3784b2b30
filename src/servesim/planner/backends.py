"""Where the candidates run: in this process, a local process pool, or Ray tasks.

Every backend runs the same task function, ``run_candidate``: a candidate's scenario (as
JSON, so it crosses process and machine boundaries as text) in, its summary out. A
simulation is a pure function of its scenario, whose ``run.seed`` fixes every random draw,
so the result of a candidate does not depend on where or in which order it ran; the
driver sorts the results by candidate id. ``evaluate`` yields results as they finish, so
the caller can store each one at once and show progress.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any, Literal, TypeGuard

from servesim.errors import ConfigError, ServesimError

Backend = Literal["inprocess", "process", "ray"]
BACKENDS = ("inprocess", "process", "ray")


def _is_backend(name: str) -> TypeGuard[Backend]:
    return name in BACKENDS


def backend_named(name: str) -> Backend:
    """The backend ``--backend name`` names, or a ConfigError listing them."""
    if not _is_backend(name):
        raise ConfigError(f"--backend {name!r}: expected one of {', '.join(BACKENDS)}")
    return name


#: One task: (candidate id, scenario JSON). One outcome: (id, summary or None, error or None, wall s).
Task = tuple[int, str]
Outcome = tuple[int, dict[str, Any] | None, str | None, float]


def run_candidate(task: Task) -> Outcome:
    """Simulate one candidate; a user error of its scenario is its outcome, not a crash."""
    from servesim.config import Scenario
    from servesim.sim import simulate

    cid, scenario_json = task
    t0 = time.perf_counter()
    try:
        result = simulate(Scenario.model_validate_json(scenario_json))
    except ServesimError as err:
        return cid, None, str(err), time.perf_counter() - t0
    summary = dict(result.summary)
    summary.pop("wall_s", None)  # the only field that differs between identical runs
    return cid, summary, None, time.perf_counter() - t0


def evaluate(
    tasks: list[Task], backend: Backend = "process", workers: int | None = None, address: str | None = None
) -> Iterator[Outcome]:
    """Run ``tasks`` on ``backend`` and yield each outcome as it finishes (any order)."""
    if not tasks:
        return iter(())
    if backend == "inprocess":
        return (run_candidate(t) for t in tasks)
    if backend == "process":
        return _process_pool(tasks, workers or os.cpu_count() or 1)
    if backend == "ray":
        return _ray(tasks, workers, address)
    raise ConfigError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def _process_pool(tasks: list[Task], workers: int) -> Iterator[Outcome]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if workers <= 1:
        yield from (run_candidate(t) for t in tasks)
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        futures = [pool.submit(run_candidate, t) for t in tasks]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def _ray(tasks: list[Task], workers: int | None, address: str | None) -> Iterator[Outcome]:
    """Ray tasks on the cluster at ``address`` (None: a local one of ``workers`` CPUs)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'servesim[ray]'") from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = workers or os.cpu_count() or 1
        try:
            ray.init(**kwargs)
        except ConnectionError as err:
            raise ConfigError(f"--address {address}: cannot reach a Ray cluster there: {err}") from None
    remote = ray.remote(num_cpus=1)(run_candidate)
    pending = [remote.remote(t) for t in tasks]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        for ref in pending:
            ray.cancel(ref)
        if started:
            ray.shutdown()
