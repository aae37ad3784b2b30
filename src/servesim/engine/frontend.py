"""vLLM's API-server process in front of one engine: a first-come first-served queue.

``vllm serve`` runs the OpenAI server in one process (asyncio, one event loop) and the
engine core in another. Each request's HTTP body is parsed and validated on that loop,
its prompt text is tokenized by one worker thread (vLLM 0.10-0.19: the
``AsyncMicrobatchTokenizer``'s single-thread executor in ``serving_engine.py``; 0.32:
``renderers/base.py``'s pool of ``renderer_num_workers`` = 1), the input processor builds
the ``EngineCoreRequest`` and the client sends it over ZMQ (msgpack). Requests therefore
pass the front end one at a time: a request that arrives while another is tokenized waits.
The model is that single server, with a deterministic service time of
``per_request_s + per_prompt_token_s x num_prompt_tokens`` (``FrontendConfig``):

    client send ──► [ front end: FIFO, one at a time ] ──► engine (scheduler's queue)

The same server also processes every step's outputs (``deliver_at``, ``after_steps``;
``FrontendConfig.per_output_token_s`` and ``per_chunk_s``, measured on vLLM 0.32's CPU
build; both 0 take the outputs as free): detokenizing each token and sending a chunk every
``stream_interval`` tokens (the first and last always), so an arrival waits behind that
work and a client sees a token when its step's outputs are processed.

Outputs are processed in rounds, as vLLM's event loop runs them (``v1/engine/async_llm.py``
``output_handler``, ``output_processor.py`` ``RequestOutputCollector``, the same in 0.10-0.32):
the output handler takes every step's outputs that reached the process while the loop was
busy, back to back (its queue's ``get`` does not yield while it holds one), detokenizing each
token and putting it in its request's collector; then each request's streaming task sends
one chunk of whatever its collector holds, since the collector merges (``RequestOutput.add``)
the outputs its consumer has not yet taken. So a server that falls behind sends fewer,
larger chunks: a step's outputs that arrive while a round is in service join the next round
and pay their tokens' work and only the chunks of requests that round does not already
send. Behind by a per-chunk cost, the server settles into rounds of ``B T / (T - A)`` for
steps of ``T`` seconds and per-step token work ``A``, chunk work ``B``; it falls behind
without bound only when ``A >= T``.

Simplified: micro-batching of simultaneous prompts is one queue (a batch is still
encoded by one worker); a step's outputs are processed as one block, every request of the
step seen when the block is done (in a round that several steps join, a step's tokens when
its own block's work is, not the round's last block's); a round
counts its chunks as the most of any of its steps (the requests of a decode pool are the
same from step to step), not request by request.
"""

from __future__ import annotations

from servesim.config.engine import version_tuple

#: From this vLLM version ``vllm serve --data-parallel-size N`` starts N API-server
#: processes (``entrypoints/cli/serve.py``: ``--api-server-count`` defaults to the DP size
#: with its internal load balancer; read in 0.16.0 and 0.32.0; 0.12.0 starts one; 0.13-0.15
#: not read, taken as one).
API_SERVER_PER_RANK_FROM = (0, 16)


def api_servers_per_rank(version: str) -> bool:
    """Does a DP server of vLLM ``version`` run one API server per rank (not one for all)?
    Simplified: vLLM's API servers take connections as the kernel hands them out and send
    each request to the least loaded rank, not one server a rank; the model gives each rank
    its own, the same load on each."""
    return version_tuple(version)[:2] >= API_SERVER_PER_RANK_FROM


class Frontend:
    """The FIFO server: ``admit_at(now, n)`` is when a request of ``n`` prompt tokens that
    arrives at ``now`` reaches the engine (arrivals must come in time order);
    ``deliver_at(now, ...)`` is when the server has processed the outputs of a step that
    ended at ``now`` (the clients see its tokens then), the same server's time."""

    __slots__ = (
        "per_request_s",
        "per_prompt_token_s",
        "per_output_token_s",
        "per_chunk_s",
        "stream_interval",
        "free_at_s",
        "round_end_s",
        "next_chunks",
        "streams",
        "busy_s",
    )

    def __init__(
        self,
        per_request_s: float,
        per_prompt_token_s: float,
        per_output_token_s: float = 0.0,
        per_chunk_s: float = 0.0,
        stream_interval: int = 1,
    ) -> None:
        self.per_request_s = per_request_s
        self.per_prompt_token_s = per_prompt_token_s
        self.per_output_token_s = per_output_token_s
        self.per_chunk_s = per_chunk_s
        self.stream_interval = stream_interval if stream_interval > 1 else 1
        self.free_at_s = 0.0  # when the work in hand is done
        self.round_end_s = 0.0  # when the output round in service ends (later outputs: the next)
        self.next_chunks = 0.0  # chunks the next round already sends
        self.streams = per_output_token_s > 0 or per_chunk_s > 0  # output streaming is modelled
        self.busy_s = 0.0  # the server's work so far (requests and outputs), seconds

    def _serve(self, now: float, work_s: float) -> float:
        """Take ``work_s`` of work that came in at ``now``; when it is done."""
        start = now if now > self.free_at_s else self.free_at_s
        self.free_at_s = start + work_s
        self.busy_s += work_s
        return self.free_at_s

    def admit_at(self, now: float, num_prompt_tokens: int) -> float:
        return self._serve(now, self.per_request_s + self.per_prompt_token_s * num_prompt_tokens)

    def output_work(self, num_tokens: int, num_edges: int) -> float:
        """Seconds to process one step's ``num_tokens`` new tokens, of which ``num_edges``
        are a request's first or last (always streamed; the rest every
        ``stream_interval``-th), when its round sends all of them."""
        return self.per_output_token_s * num_tokens + self.per_chunk_s * self._chunks(num_tokens, num_edges)

    def _chunks(self, num_tokens: int, num_edges: int) -> float:
        return num_edges + (num_tokens - num_edges) / self.stream_interval

    def deliver_at(self, now: float, num_tokens: int, num_edges: int) -> float:
        """When the outputs of a step that ended at ``now`` have been processed and sent:
        at once if the server is free, else in the next round (module docstring)."""
        chunks = self._chunks(num_tokens, num_edges)
        tok_s = self.per_output_token_s * num_tokens
        if now >= self.free_at_s:  # free: a round of this step alone, from now
            work = tok_s + self.per_chunk_s * chunks
            self.free_at_s = self.round_end_s = now + work
            self.next_chunks = 0.0
            self.busy_s += work
            return self.free_at_s
        if now >= self.round_end_s:  # the next round is in service: this step opens another
            self.round_end_s = self.free_at_s
            self.next_chunks = 0.0
        extra = chunks - self.next_chunks  # the chunks the next round does not yet send
        if extra > 0:
            self.next_chunks = chunks
            tok_s += self.per_chunk_s * extra
        self.free_at_s += tok_s
        self.busy_s += tok_s
        return self.free_at_s

    def after_steps(
        self, start_s: float, durations: list[float], i0: int, i1: int, tokens_per_step: int
    ) -> None:
        """Stream pure-decode steps ``i0..i1-1`` of ``durations``, the first starting at
        ``start_s``, each of ``tokens_per_step`` tokens and no first or last one: as
        ``deliver_at`` step by step, in closed form where every step's outputs are done
        before the next step ends (the server then keeps up: free one step's work after
        the last)."""
        if i1 <= i0:
            return
        w = self.output_work(tokens_per_step, 0)
        t = start_s + durations[i0]  # the engine's clock: summed in step order
        keeps_up = t >= self.free_at_s
        for i in range(i0 + 1, i1):
            d = durations[i]
            if d < w:
                keeps_up = False
            t += d
        if keeps_up:
            self.free_at_s = self.round_end_s = t + w
            self.next_chunks = 0.0
            self.busy_s += w * (i1 - i0)
            return
        t = start_s
        for i in range(i0, i1):
            t += durations[i]
            self.deliver_at(t, tokens_per_step, 0)
