"""Routers: which replica of a pool gets a request.

A router is a plain function ``(request, loads, state) -> position in loads``. ``loads``
holds one ``ReplicaLoad`` per candidate replica, in replica order, as the router sees it
(now, or ``staleness_s`` ago: see ``servesim.cluster.cluster``); ``state`` carries what a
policy keeps between calls (the round-robin cursor, the seeded generator). Ties go to the
lowest position, so every policy is deterministic for a given seed.

``ROUTERS`` names them; ``config.RouterName`` is the same set of names (a test checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from servesim.engine.request import Request

if TYPE_CHECKING:
    from _typeshed import SupportsDunderLT


@dataclass(slots=True)
class ReplicaLoad:
    """What a router knows about one candidate replica."""

    num_outstanding: int = 0  # routed here, not yet finished or handed off (incl. KV in transit)
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0  # used / usable KV blocks
    pending_tokens: int = 0  # prompt tokens still to compute here + one per running request
    prefix_hit_tokens: int = 0  # this request's cached prefix here (prefix_affinity only)
    predicted_ttft_s: float = 0.0  # this request's predicted TTFT here (predicted_ttft only)
    predicted_latency_s: float = 0.0  # its predicted end-to-end latency here (predicted_latency only)
    free_kv_blocks: int = 0  # free KV-cache blocks
    freeness: float = 0.0  # Llumnix's free blocks per request (llumnix only; cluster.freeness)


@dataclass(slots=True)
class RouterState:
    rng: np.random.Generator | None  # None: a lone replica's, whose router never draws
    next_rr: int = 0
    prefix_load_cap: int = 8


Router = Callable[[Request, Sequence[ReplicaLoad], RouterState], int]


_Key = TypeVar("_Key", bound="SupportsDunderLT[Any]")  # a number, or a tuple of numbers


def _argmin(values: Sequence[_Key]) -> int:
    """The index of the first smallest value."""
    best = 0
    for i in range(1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


def round_robin(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """Each replica in turn (nginx's and vLLM production-stack's default)."""
    i = st.next_rr % len(loads)
    st.next_rr = i + 1
    return i


def random(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """Uniformly at random: the baseline of Mitzenmacher's balls-into-bins analysis."""
    assert st.rng is not None
    return int(st.rng.integers(len(loads)))


def least_outstanding(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """Fewest requests in flight (join the shortest queue; Envoy's LEAST_REQUEST, the
    vLLM router's default for chat)."""
    return _argmin([x.num_outstanding for x in loads])


def least_kv(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """Lowest KV-cache usage, then fewest outstanding (vLLM production-stack's
    ``kv_usage``-aware routing; Llumnix's dispatch by free memory)."""
    return _argmin([(x.kv_usage, x.num_outstanding) for x in loads])


def least_work(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """Least predicted work: prompt tokens still to prefill plus one per running decode
    (the "least pending tokens" scorer of llm-d / Dynamo's KV router load term)."""
    return _argmin([x.pending_tokens for x in loads])


def power_of_two(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """Two distinct replicas at random, the one with fewer outstanding requests
    (Mitzenmacher 2001, "The power of two choices in randomized load balancing": the
    maximum load falls from log n / log log n to log log n / log 2)."""
    n = len(loads)
    if n == 1:
        return 0
    assert st.rng is not None
    a, b = (int(x) for x in st.rng.choice(n, size=2, replace=False))
    return b if loads[b].num_outstanding < loads[a].num_outstanding else a


def prefix_affinity(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """The replica holding the longest cached prefix of the prompt, under a load cap.

    After SGLang's cache-aware router (sgl-router ``cache_aware``): it routes to the
    worker whose radix tree matches most of the prompt unless the load is imbalanced,
    when it falls back to the shortest queue. Here the match is read from each replica's
    real prefix cache (as llm-d's precise prefix-cache scorer does with KV events), and
    the balance rule is a cap: only replicas with at most ``prefix_load_cap`` more
    outstanding requests than the least loaded compete; no hit anywhere -> least loaded.
    """
    low = min(x.num_outstanding for x in loads)
    cap = low + st.prefix_load_cap
    best, key = -1, (0, 0)
    for i, x in enumerate(loads):
        if x.num_outstanding <= cap and x.prefix_hit_tokens > 0:
            k = (x.prefix_hit_tokens, -x.num_outstanding)
            if k > key:
                best, key = i, k
    return best if best >= 0 else least_outstanding(req, loads, st)


def predicted_ttft(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """The least predicted time to first token, each replica's scheduler state asked for it.

    In the spirit of Block (Da et al. 2025, "Block: Balancing Load in LLM Serving with
    Context, Knowledge and Predictive Scheduling"), which predicts each instance's latency
    for the new request from its scheduler state and picks the best; the prediction here
    is analytic (``cluster.loads.predict_ttft``): the rest of the step in flight, then the
    queued prompt tokens and this prompt's uncached part in budget-sized chunks beside
    the running decodes, each chunk timed by the replica's own perf model.
    """
    return _argmin([(x.predicted_ttft_s, x.num_outstanding) for x in loads])


def predicted_latency(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """The least predicted end-to-end latency of the request (Block, Da and Kalyvianaki 2025,
    arXiv 2508.03611: its ``min_new_request_latency`` scheduler), then the fewest outstanding.

    Block asks each instance's predictor to simulate the instance's running and queued
    requests with the new one added, each with its response length, and routes to the
    instance where the new request would complete first (``cluster.loads.predict_latency``,
    which cites the artifact's files). Here the simulation is servesim's own, by segments of
    steps timed by the replica's perf model; response lengths are the requests' own (Block*,
    the artifact's oracle-length variant). The artifact breaks ties at random; here they go
    to the fewest outstanding, then the lowest position.
    """
    return _argmin([(x.predicted_latency_s, x.num_outstanding) for x in loads])


def infaas(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """The most free KV blocks per running request, then the fewest outstanding: INFaaS++ as
    Block's artifact dispatches it (``min_infass_load`` in vidur_opt_scheduler at e1db3ed,
    ``vidur/prediction/predictor/simulate_predictor.py``: ``-free_gpu_blocks /
    max(running, 1)``, the least of it). Unlike ``llumnix`` it reads the free blocks as they
    are, without the virtual usage of queued requests."""
    return _argmin([(-x.free_kv_blocks / max(x.num_running, 1), x.num_outstanding) for x in loads])


def vllm_dp(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """vLLM's balancing over the data-parallel ranks of one server (``DPLBAsyncMPClient.
    get_core_engine_for_request``, vLLM 0.10-0.19): the least ``4 x waiting + running``,
    ties to the first rank. vLLM counts a request as waiting on its rank from the moment it
    is sent there (the API server's own increment between the coordinator's 100 ms
    updates); here waiting is every routed request not running yet (``num_outstanding -
    num_running``) and the counts are current."""
    return _argmin([4 * (x.num_outstanding - x.num_running) + x.num_running for x in loads])


def llumnix(req: Request, loads: Sequence[ReplicaLoad], st: RouterState) -> int:
    """The freest instance (Llumnix, OSDI'24, Sec. 4.4.2: dispatch to the instance with the
    highest freeness, ``cluster.freeness``: free KV blocks per request of its batch after the
    virtual usages: the queued head-of-line demand and each running priority's headroom),
    then the fewest outstanding. The artifact's ``load`` dispatch policy
    (``global_scheduler/dispatch_scheduler.py``) picks the least loaded the same way."""
    return _argmin([(-x.freeness, x.num_outstanding) for x in loads])


ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "random": random,
    "least_outstanding": least_outstanding,
    "least_kv": least_kv,
    "least_work": least_work,
    "power_of_two": power_of_two,
    "prefix_affinity": prefix_affinity,
    "predicted_ttft": predicted_ttft,
    "vllm_dp": vllm_dp,
    "llumnix": llumnix,
    "predicted_latency": predicted_latency,
    "infaas": infaas,
}
