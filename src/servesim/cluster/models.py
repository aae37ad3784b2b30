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

LoRA adapters: vLLM serves an adapter as a model of its own name (``--lora-modules``; the
gateway routes the request's ``model`` field, the adapter's name, to the servers that load
it), so a request naming an adapter reaches only the pools of its base model whose
``engine.lora`` serves that adapter, with a router state of its own per such set of pools,
while a base-model request reaches every pool of its model (``AdapterRoutes``). A request's
adapter is the trace's adapter column, else the draw of its model's first LoRA pool
(``engine.lora.assign_adapters``), which every LoRA pool of that model must draw alike (the
same adapters and popularity) for the replica it reaches to serve the adapter it was routed
for. An adapter no pool of its model serves is refused at start-up.

Simplified: the gateway's own latency is not charged, as for one model's router.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servesim.cluster.router import ReplicaLoad, RouterState
from servesim.cluster.spec import PoolSpec
from servesim.engine.arrivals import rejection_reason
from servesim.engine.request import Request
from servesim.errors import ConfigError
from servesim.workload.base import Workload


def adapters_served(pool: PoolSpec) -> frozenset[str]:
    """The LoRA adapters ``pool``'s engine serves, by name (none without ``engine.lora``)."""
    lora = pool.engine.lora
    return frozenset(a.name for a in lora.adapter_list()) if lora.enabled else frozenset()


def adapters_split(pools: list[PoolSpec]) -> bool:
    """Whether some model's pools serve different adapters (a LoRA pool beside a plain one,
    or two LoRA pools with other adapters): its adapter requests are then routed apart."""
    by_model: dict[str, set[frozenset[str]]] = {}
    for p in pools:
        by_model.setdefault(p.served_model, set()).add(adapters_served(p))
    return any(len(sets) > 1 for sets in by_model.values())


def _draw(pool: PoolSpec) -> tuple[object, ...]:
    """What a LoRA pool's draw of adapters depends on (``engine.lora.assign_adapters``)."""
    lora = pool.engine.lora
    names = tuple(a.name for a in lora.adapter_list())
    return (names, lora.popularity, lora.zipf_exponent, lora.base_fraction, lora.seed)


def request_adapters(
    pools: list[PoolSpec], wl: Workload, model_of: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """(adapter names, each row's index into them; -1: the base model) of ``wl``'s requests,
    whose model is ``model_of`` (an index into the pools' served models, -1: none).

    The trace's adapter column where it has one; else each model's first LoRA pool draws its
    rows' adapters, and a model whose LoRA pools would draw differently is refused (a
    replica draws with its own pool's ``engine.lora``)."""
    if wl.adapter is not None:
        return [str(x) for x in wl.meta.get("adapter_names") or []], np.asarray(wl.adapter, np.int64)
    from servesim.engine.lora import assign_adapters

    served = list(dict.fromkeys(p.served_model for p in pools))
    names: list[str] = []
    out = np.full(len(wl), -1, np.int64)
    for g, model in enumerate(served):
        lora_pools = [p for p in pools if p.served_model == model and p.engine.lora.enabled]
        if not lora_pools:
            continue
        draws = {_draw(p) for p in lora_pools}
        if len(draws) > 1:
            raise ConfigError(
                f"cluster.pools: the LoRA pools of {model} ({', '.join(p.name for p in lora_pools)}) "
                "draw requests' adapters differently (engine.lora adapters, popularity, base_fraction "
                "or seed); give them the same, or name each request's adapter in a trace's adapter column"
            )
        drawn = assign_adapters(lora_pools[0].engine.lora, wl)  # 0: base, k: the k-th adapter
        first = len(names)
        names += [a.name for a in lora_pools[0].engine.lora.adapter_list()]
        rows = (model_of == g) & (drawn > 0)
        out[rows] = drawn[rows] - 1 + first
    return names, out


def row_models(pools: list[PoolSpec], wl: Workload, default_model: str) -> np.ndarray:
    """Each row's model, an index into the pools' served models (-1: served by no pool); a
    row that names none gives ``default_model`` ("": the first pool's)."""
    served = list(dict.fromkeys(p.served_model for p in pools))
    names = [str(x) for x in wl.meta.get("model_names", [])] if wl.model is not None else []
    index = {name: k for k, name in enumerate(served)}
    of_name = np.array([index.get(n, -1) for n in [*names, default_model or served[0]]], np.int64)
    ids = np.full(len(wl), -1, np.int64) if wl.model is None else np.asarray(wl.model, np.int64)
    return of_name[ids]


def check_adapters(pools: list[PoolSpec], wl: Workload, default_model: str) -> None:
    """Refuse a trace whose adapter column names an adapter no pool of the request's model
    serves, when some pool serves adapters (without any, a notice says they run on the
    base model: ``cluster.pools.note_adapters_without_lora``)."""
    if wl.adapter is None or not any(p.engine.lora.enabled for p in pools):
        return
    model_of = row_models(pools, wl, default_model)
    names, ids = request_adapters(pools, wl, model_of)
    served = list(dict.fromkeys(p.served_model for p in pools))
    for g, model in enumerate(served):
        of_model = [p for p in pools if p.served_model == model]
        have = list(
            dict.fromkeys(
                a.name for p in of_model if p.engine.lora.enabled for a in p.engine.lora.adapter_list()
            )
        )
        asked = np.unique(ids[(model_of == g) & (ids >= 0)])
        unknown = [names[int(k)] for k in asked if names[int(k)] not in have]
        if unknown:
            where = f" of the pools of {model}" if len(served) > 1 or len(of_model) > 1 else ""
            listed = ", ".join(have) or "none"
            raise ConfigError(
                f"{wl.source or 'workload'}: adapter column names {', '.join(map(repr, unknown[:5]))}, not "
                f"among engine.lora's adapters{where} ({listed})"
            )


class ModelRoutes:
    """Which served model each request names, and each routing group's serving front replicas.

    A group is a model's pools (``served[g]`` for the first ``len(served)`` groups), or the
    pools of a model that serve one adapter where its pools differ (``AdapterRoutes``, further
    groups); ``group[row]`` is the group of each workload row (-1: its model is served by no
    pool), and each group has its own router states."""

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
        self.model_of = of_name[name_id]  # per row: its model's index in ``served`` (-1: no pool's)
        self.group = self.model_of.copy()  # per row: its routing group (-1: no pool's model)
        # Each group's model (an index into ``served``) and pools (None: all of its model's).
        self.group_model = list(range(len(served)))
        self.group_pools: list[frozenset[str] | None] = [None] * len(served)
        self.states = states  # the front router's state of each group
        # the decode router's state of each group (prefill/decode pools only)
        self.back_states = back_states or []
        self.front: list[list[int]] = [[] for _ in served]  # serving front replicas per group
        self.back: list[list[int]] = [[] for _ in served]  # serving decode replicas per group
        # The decode stage's stale view of each group: (when taken, the view) (``staleness_s``).
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
        """The routes of a cluster whose pools serve several models, whose requests name
        one, or whose pools of one model serve different LoRA adapters (None otherwise:
        every request goes to every front replica). ``default_model`` is the name a request
        without one gives ("": the first pool's)."""
        served = list(dict.fromkeys(p.served_model for p in pools))
        split = adapters_split(pools)
        if len(served) < 2 and (wl is None or wl.model is None) and not split:
            return None
        names = [str(x) for x in (wl.meta.get("model_names", []) if wl is not None else [])]
        n = len(wl) if wl is not None else 0
        ids = np.full(n, -1, np.int64) if wl is None or wl.model is None else np.asarray(wl.model, np.int64)

        def state() -> RouterState:
            return RouterState(
                None if rng is None else np.random.default_rng(rng.integers(1 << 63)),
                prefix_load_cap=prefix_load_cap,
            )

        states = [state() for _ in served]
        disagg = any(p.role == "prefill" for p in pools)
        back_states = [state() for _ in served] if disagg else []  # drawn after the front states
        routes = cls(served, [*names, default_model or served[0]], ids, states, back_states)
        if split and wl is not None:
            routes.split_by_adapter(pools, wl, state, disagg)
        return routes

    def split_by_adapter(
        self, pools: list[PoolSpec], wl: Workload, state: Callable[[], RouterState], disagg: bool
    ) -> None:
        """Route each adapter request among its model's pools that serve its adapter: a
        group per such set of pools that is not all of its model's (see the module)."""
        names, adapter = request_adapters(pools, wl, self.model_of)
        keys: dict[tuple[int, frozenset[str]], int] = {}
        for g, model in enumerate(self.served):
            of_model = [p for p in pools if p.served_model == model]
            rows = (self.model_of == g) & (adapter >= 0)
            for k in np.unique(adapter[rows]):
                pick = frozenset(p.name for p in of_model if names[int(k)] in adapters_served(p))
                roles = {p.role for p in of_model if p.name in pick}
                lacking = [r for r in (("prefill", "decode") if disagg else ()) if r not in roles]
                if not pick or lacking:
                    stage = f"no {lacking[0]} pool" if pick else "no pool"
                    source = wl.source or "workload" if wl.adapter is not None else "cluster.pools"
                    raise ConfigError(
                        f"{source}: requests name LoRA adapter {names[int(k)]!r} of "
                        f"{model}, which {stage} serves (engine.lora.adapters; with prefill/decode "
                        "pools both stages run the adapter)"
                    )
                if len(pick) == len(of_model):
                    continue  # every pool of the model serves it: the model's own group
                key = (g, pick)
                if key not in keys:
                    keys[key] = len(self.group_model)
                    self.group_model.append(g)
                    self.group_pools.append(pick)
                    self.states.append(state())
                    if disagg:
                        self.back_states.append(state())
                    self.front.append([])
                    self.back.append([])
                    self.back_views.append(None)
                    self.max_model_len.append(1 << 62)
                    self.usable_tokens.append(1 << 62)
                self.group[rows & (adapter == k)] = keys[key]

    def _groups_of(self, pool: PoolSpec) -> list[int]:
        """The routing groups ``pool``'s replicas belong to."""
        g = self.served.index(pool.served_model)
        return [
            k
            for k, (m, only) in enumerate(zip(self.group_model, self.group_pools))
            if m == g and (only is None or pool.name in only)
        ]

    def name_of(self, idx: int) -> str:
        """The model name request ``idx`` gave (the default one when it gave none)."""
        return self.names[int(self.name_id[idx])]

    def add_pool(self, pool: PoolSpec) -> None:
        """Count ``pool``'s limits in its groups' (``refusal``)."""
        usable = (pool.num_gpu_blocks - 1) * pool.engine.block_size
        for g in self._groups_of(pool):
            self.max_model_len[g] = min(self.max_model_len[g], pool.max_model_len)
            self.usable_tokens[g] = min(self.usable_tokens[g], usable)

    def refresh(self, front: list[int], back: list[int], pool_of: list[PoolSpec]) -> None:
        """Each group's serving front (and decode) replicas, from the cluster's."""
        self.front = [[] for _ in self.group_model]
        self.back = [[] for _ in self.group_model]
        of_pool: dict[str, list[int]] = {}
        for ids, per in ((front, self.front), (back, self.back)):
            for i in ids:
                pool = pool_of[i]
                if pool.name not in of_pool:
                    of_pool[pool.name] = self._groups_of(pool)
                for g in of_pool[pool.name]:
                    per[g].append(i)

    def refusal(self, r: Request) -> str:
        """Why ``r`` can never be served ('' if it can): its model is served by no pool, or
        it does not fit the replicas of its group."""
        g = int(self.group[r.idx])
        if g < 0:
            return f"model {self.name_of(r.idx)!r} is served by no pool (served: {', '.join(self.served)})"
        return rejection_reason(r, self.max_model_len[g], self.usable_tokens[g])
