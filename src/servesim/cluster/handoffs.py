"""A cluster's finishes and KV hand-offs (``cluster.cluster.Cluster`` is a ``KvHandoffs``): a
request done, or a prefill replica's request handed to a decode replica (routed there by
``ClusterRouting._route_back``) with its KV sent over a shared ``Link``; which link a
transfer uses (``link``).

Simplifications: the prefill replica frees a request's blocks when its first token comes
out (real systems hold them until the transfer completes); KV transfers start when the
prompt is done (Splitwise overlaps them layer by layer); hand-off CPU costs are not charged.
"""

from __future__ import annotations

from collections.abc import Callable

from servesim.cluster.routing import ClusterRouting
from servesim.cluster.transfer import Link
from servesim.engine.arrivals import done_when_seen
from servesim.engine.events import ARRIVAL
from servesim.engine.request import ReqStatus, Request


class KvHandoffs(ClusterRouting):
    """The finishes and hand-offs of a ``Cluster`` (which sets every attribute below)."""

    links: dict[int, Link]  # by receiver, sender or 0 (link.shared_by)
    in_transit: set[int]  # request ids whose KV is on a link
    num_handoffs: int
    on_done: Callable[[Request], None] | None  # closed-loop clients: told when a request is done

    def on_lone_finish(self, req: Request) -> None:
        """``on_finish`` of a lone replica (``finishes_in_runs``): no hand-off, no operations,
        no client to tell (open loop)."""
        self.outstanding[0] -= 1
        self.live.pop(req.idx, None)
        self.writer.add(req)
        self.num_done += 1

    def on_finish(self, req: Request) -> None:
        src = req.replica
        self.outstanding[src] -= 1
        saved = self.handoff.pop(req.idx, None)
        if saved is None or (saved[1] <= 1 and req.num_prompt_tokens == saved[0]):
            self._done(req)
            if self.ops is not None:
                self.ops.on_replica_idle_check(src)
            if self.overflow is not None:
                self.overflow.release(req)
                self.overflow.on_left(src)
            return
        if self.ops is not None and not self.back:  # no decode replica serves: sent again
            req.num_prompt_tokens, req.max_tokens = saved
            self.ops.on_lost(req, src)
            self.ops.on_replica_idle_check(src)
            return
        prompt, max_tokens = saved
        computed = req.num_prompt_tokens
        if computed < prompt:  # balanced: the decode replica computes the tail and the first token
            req.num_output_tokens = 0
            req.first_token_s = req.last_token_s = -1.0
            req.num_prompt_tokens = prompt
        req.max_tokens = max_tokens
        req.status = ReqStatus.WAITING
        req.finished_s = -1.0
        req.num_computed_tokens = computed
        req.block_hashes = []  # recomputed on the decode replica (its own block size)
        req.prev_blocks = None
        self.num_handoffs += 1
        mixed = self.overflow
        dst = self._route_back(req) if mixed is None else mixed.place_decode(req, src, prompt + max_tokens)
        self.outstanding[dst] += 1
        self.replicas[dst].totals.num_routed += 1
        if dst == src:  # (the mixed pool) it decodes where its prompt ran: no KV moves
            self.loop.at(self.loop.now, self.replicas[dst].on_engine_arrival, req, ARRIVAL)
        else:
            self.send_kv(src, dst, req, computed)
        if self.ops is not None:
            self.ops.on_replica_idle_check(src)
        if mixed is not None:
            mixed.on_left(src)

    def _done(self, req: Request) -> None:
        self.live.pop(req.idx, None)
        self.writer.add(req)
        self.num_done += 1
        if self.on_done is not None:
            done_when_seen(self.loop, self.on_done, req)
        if self.ops is not None:
            self.ops.on_done(req)

    def send_kv(self, src: int, dst: int, req: Request, num_tokens: int) -> None:
        """Move ``num_tokens`` of ``req``'s KV from replica ``src`` to ``dst``, then queue it there."""
        num_bytes = num_tokens * self.pool_of[src].kv_bytes_per_token
        self.in_transit.add(req.idx)
        self.link(src, dst).send(num_bytes, self._on_kv_arrived, (req, dst, self.loop.now, num_bytes))

    def _on_kv_arrived(self, arg: tuple[Request, int, float, float]) -> None:
        req, dst, sent_s, num_bytes = arg
        self.in_transit.discard(req.idx)
        if self.replicas[dst].failed:  # the receiver failed while the KV was on the link
            self._operations().on_lost(req, dst)
            return
        t = self.replicas[dst].totals
        t.num_kv_transfers += 1
        t.kv_transfer_bytes += num_bytes
        t.kv_transfer_s += self.loop.now - sent_s
        self.replicas[dst].on_engine_arrival(req)  # the KV is in: no front end again

    def link(self, src: int, dst: int) -> Link:
        """The link a transfer from ``src`` to ``dst`` uses (``link.shared_by`` picks the key)."""
        shared_by = self.cfg.link.shared_by
        key = dst if shared_by == "receiver" else src if shared_by == "sender" else 0
        link = self.links.get(key)
        if link is None:
            cfg, ps, pd = self.cfg.link, self.pool_of[src], self.pool_of[dst]
            if cfg.bandwidth_gb_per_s is not None:
                bw = cfg.bandwidth_gb_per_s * 1e9
            elif shared_by == "receiver":
                bw = pd.net_bw * pd.num_gpus
            elif shared_by == "sender":
                bw = ps.net_bw * ps.num_gpus
            else:
                bw = min(p.net_bw * p.num_gpus for p in self.pool_of)
            latency = (
                cfg.latency_us * 1e-6
                if cfg.latency_us is not None
                else max(ps.net_latency_s, pd.net_latency_s)
            )
            link = self.links[key] = Link(self.loop, bw, latency)
        return link
