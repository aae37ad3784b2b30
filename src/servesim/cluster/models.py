"""Several base models in one cluster: each request reaches only the replicas of its model.

A fleet serving several models runs one vLLM server per model (``vllm serve MODEL`` hosts
one model; ``--served-model-name`` is the name clients give) behind a gateway that reads
the ``model`` field of each OpenAI API request and sends it to a backend of that model:
the vLLM production-stack router keeps the model each endpoint serves and routes among the
endpoints of the requested model (its "model-aware routing"), and the Kubernetes Gateway
API inference extension's body-based routing copies the body's ``model`` into the
``X-Gateway-Model-Name`` header, which an ``HTTPRoute`` matches to pick that model's
``InferencePool``, whose endpoint picker then chooses a replica. Modelled so: a request's
model (``Workload.model``, the trace column ``model`` or a mixture client's ``model``; none
named: the scenario's ``model.name``) selects the serving replicas whose pool's
``served_model`` is that name, and the cluster's router picks among them with a state of
its own per model (a round-robin cursor per model, as one endpoint picker per pool has).
With prefill/decode pools (disaggregation), each model has its own pair of stages, as
llm-d's or Dynamo's disaggregated deployments run one prefill and one decode group per
model behind the gateway: a request is routed among its model's prefill replicas, and
after its prefill among its model's decode replicas (the decode router, with a state of
its own per model), never to another model's (that model's KV means nothing to it). Every
served model then needs a prefill pool and a decode pool (``deployment.check_models``).
A request naming a model no pool serves is rejected with that reason, as the gateway
answers 404 for it; one too long for every replica of its model is rejected as a lone
replica rejects it (``engine.arrivals.rejection_reason``, against that model's smallest
``max_model_len`` and KV cache).

Simplified: the gateway's own latency is not charged, as for one model's router.
"""

from __future__ import annotations

import numpy as np

from servesim.cluster.router import ReplicaLoad, RouterState
from servesim.cluster.spec import PoolSpec
from servesim.engine.arrivals import rejection_reason
from servesim.engine.request import Request
from servesim.workload.base import Workload


class ModelRoutes:
    """Which served model each request names, and each model's serving front replicas."""

    def __init__(
        self,
        served: list[str],
        names: list[str],
        name_id: np.ndarray,
        states: list[RouterState],
        back_states: list[RouterState] | None = None,
    ) -> None:
        self.served = served  # the models' served names, in pool order
        self.names = names  # the names requests give, by id; the last: the default name (id -1)
        self.name_id = name_id  # int64 per workload row: the name it gave (-1: none, the default)
        index = {name: k for k, name in enumerate(served)}
        of_name = np.array([index.get(n, -1) for n in names], np.int64)
        self.group = of_name[name_id]  # per row: its model's index in ``served`` (-1: no pool's)
        self.states = states  # the front router's state of each model
        # the decode router's state of each model (prefill/decode pools only)
        self.back_states = back_states or []
        self.front: list[list[int]] = [[] for _ in served]  # serving front replicas per model
        self.back: list[list[int]] = [[] for _ in served]  # serving decode replicas per model
        # The decode stage's stale view of each model: (when taken, the view) (``staleness_s``).
        self.back_views: list[tuple[float, list[ReplicaLoad]] | None] = [None] * len(served)
        self.max_model_len = [1 << 62] * len(served)
        self.usable_tokens = [1 << 62] * len(served)

    @classmethod
    def build(
        cls,
        pools: list[PoolSpec],
        wl: Workload | None,
        default_model: str,
        rng: np.random.Generator | None,
        prefix_load_cap: int,
    ) -> ModelRoutes | None:
        """The routes of a cluster whose pools serve several models or whose requests name
        one (None otherwise: every request goes to every front replica). ``default_model``
        is the name a request without one gives ("": the first pool's)."""
        served = list(dict.fromkeys(p.served_model for p in pools))
        if len(served) < 2 and (wl is None or wl.model is None):
            return None
        names = [str(x) for x in (wl.meta.get("model_names", []) if wl is not None else [])]
        n = len(wl) if wl is not None else 0
        ids = np.full(n, -1, np.int64) if wl is None or wl.model is None else np.asarray(wl.model, np.int64)
        states = [
            RouterState(
                None if rng is None else np.random.default_rng(rng.integers(1 << 63)),
                prefix_load_cap=prefix_load_cap,
            )
            for _ in served
        ]
        back_states: list[RouterState] = []
        if any(p.role == "prefill" for p in pools):  # drawn after the front states: those stay as they were
            back_states = [
                RouterState(
                    None if rng is None else np.random.default_rng(rng.integers(1 << 63)),
                    prefix_load_cap=prefix_load_cap,
                )
                for _ in served
            ]
        return cls(served, [*names, default_model or served[0]], ids, states, back_states)

    def name_of(self, idx: int) -> str:
        """The model name request ``idx`` gave (the default one when it gave none)."""
        return self.names[int(self.name_id[idx])]

    def add_pool(self, pool: PoolSpec) -> None:
        """Count ``pool``'s limits in its model's (``refusal``)."""
        g = self.served.index(pool.served_model)
        self.max_model_len[g] = min(self.max_model_len[g], pool.max_model_len)
        usable = (pool.num_gpu_blocks - 1) * pool.engine.block_size
        self.usable_tokens[g] = min(self.usable_tokens[g], usable)

    def refresh(self, front: list[int], back: list[int], pool_of: list[PoolSpec]) -> None:
        """Each model's serving front (and decode) replicas, from the cluster's."""
        self.front = [[] for _ in self.served]
        self.back = [[] for _ in self.served]
        for ids, per in ((front, self.front), (back, self.back)):
            for i in ids:
                per[self.served.index(pool_of[i].served_model)].append(i)

    def refusal(self, r: Request) -> str:
        """Why ``r`` can never be served ('' if it can): its model is served by no pool, or
        it does not fit the replicas of its model."""
        g = int(self.group[r.idx])
        if g < 0:
            return f"model {self.name_of(r.idx)!r} is served by no pool (served: {', '.join(self.served)})"
        return rejection_reason(r, self.max_model_len[g], self.usable_tokens[g])
