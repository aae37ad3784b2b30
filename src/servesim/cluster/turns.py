"""Known turns: round robin or random routing over a fixed pool, where each replica knows,
before the run, when each of its requests will arrive (``KnownTurns``).

Where the router reads no load and the replicas never change (no operations, no migration),
every arrival routed as it comes (one stage, one model, no tenants' gate, no staleness),
which replica serves each request is known up front: the next in turn for round robin, and
for random routing the router's own draws, made here in arrival order (one ``random`` call
of the same generator per routed request, as the router would make them as the requests
arrive). Each replica is then told its arrival times (``Replica.own_arrival_s``): its runs of
decode steps stop at its own next arrival and go on through its finishes, which nobody
watches (nothing is handed off or sent on a finish), so each replica runs as a lone one
does (``engine.replica``'s "cut runs").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servesim.cluster.router import ROUTERS

if TYPE_CHECKING:
    from servesim.cluster.cluster import Cluster
    from servesim.engine.request import Request
    from servesim.workload.base import Workload


class KnownTurns:
    """A cluster's arrivals and finishes where each replica knows its own arrivals."""

    def __init__(self, cluster: Cluster, turns: list[int] | None) -> None:
        """``turns``: the pool position of each routed request in arrival order (random
        routing's draws); None: round robin's cursor."""
        self.cluster = cluster
        self.turns = turns
        self.num_turns = 0

    def on_arrival(self, req: Request) -> None:
        """The cluster's ``on_arrival``: to the next replica in turn, the router's cursor
        moved as ``round_robin`` moves it, or to the replica drawn for it."""
        c = self.cluster
        st, front = c.front_state, c.front
        turns = self.turns
        if turns is None:
            p = st.next_rr % len(front)
            st.next_rr = p + 1
        else:
            p = turns[self.num_turns]
            self.num_turns += 1
        i = front[p]
        c.live[req.idx] = req
        c.outstanding[i] += 1
        rep = c.replicas[i]
        rep.totals.num_routed += 1
        rep.on_arrival(req)

    def on_finish(self, req: Request) -> None:
        """The replicas' ``on_finish``: no hand-off, no operations, no client to tell (open
        loop)."""
        c = self.cluster
        c.outstanding[req.replica] -= 1
        c.live.pop(req.idx, None)
        c.writer.add(req)
        c.num_done += 1


def known_turns(cluster: Cluster, wl: Workload) -> KnownTurns | None:
    """Tell each replica of ``cluster`` its own arrivals (the module's docstring) where the
    cluster allows it, and return the arrival and finish handlers; None where it does not.
    ``wl``'s requests that the feeder rejects (``rejection_reason``) are routed nowhere."""
    c = cluster
    router = c.front_router
    if not (
        c.cut_runs
        and router in (ROUTERS["round_robin"], ROUTERS["random"])
        and not c.is_disagg
        and c.models is None
        and c.gate is None
        and c.ops is None
        and c.migrator is None
        and c.on_done is None
        and c.cfg.staleness_s == 0
    ):
        return None
    prompt = np.asarray(wl.num_prompt_tokens, dtype=np.int64)
    output = np.asarray(wl.num_output_tokens, dtype=np.int64)
    served = (prompt < c.max_model_len) & (np.minimum(prompt + output, c.max_model_len) <= c.usable_tokens)
    times = np.asarray(wl.arrival_s, dtype=np.float64)[served]
    n = len(c.front)
    turns = None
    if router is ROUTERS["random"]:
        rng = c.front_state.rng
        assert rng is not None
        draw = rng.integers  # the router's own call, once per request
        drawn = np.fromiter((draw(n) for _ in range(len(times))), np.int64, len(times))
        turns = drawn.tolist()
        for p, i in enumerate(c.front):
            c.replicas[i].own_arrival_s = times[drawn == p]
    else:
        for p, i in enumerate(c.front):
            c.replicas[i].own_arrival_s = times[p::n].copy()  # the p-th routed request, then every n-th
    handlers = KnownTurns(c, turns)
    for i in c.front:
        rep = c.replicas[i]
        rep.finishes_in_runs = True
        rep.on_finish = handlers.on_finish
    return handlers
