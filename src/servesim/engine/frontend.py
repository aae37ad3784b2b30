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

With streaming costs (``FrontendConfig.per_output_token_s``, ``per_chunk_s``; 0 by
default) the same server also processes every step's outputs (``deliver_at``,
``after_run``): detokenizing each token and sending a chunk every ``stream_interval``
tokens (the first and last always), so an arrival waits behind that work and a client sees
a token when its step's outputs are processed. Without them those outputs are taken as free.

Simplified: micro-batching of simultaneous prompts is one queue (a batch is still
encoded by one worker); a step's outputs are processed as one block, every request of the
step seen when the block is done.
"""

from __future__ import annotations


class Frontend:
    """The FIFO server: ``admit_at(now, n)`` is when a request of ``n`` prompt tokens that
    arrives at ``now`` reaches the engine (arrivals must come in time order);
    ``deliver_at(now, ...)`` is when the server has processed the outputs of a step that
    ended at ``now`` (the clients see its tokens then), the same server's time."""

    __slots__ = ("per_request_s", "per_prompt_token_s", "per_output_token_s", "per_chunk_s",
                 "stream_interval", "free_at_s", "streams")

    def __init__(self, per_request_s: float, per_prompt_token_s: float, per_output_token_s: float = 0.0,
                 per_chunk_s: float = 0.0, stream_interval: int = 1) -> None:
        self.per_request_s = per_request_s
        self.per_prompt_token_s = per_prompt_token_s
        self.per_output_token_s = per_output_token_s
        self.per_chunk_s = per_chunk_s
        self.stream_interval = stream_interval if stream_interval > 1 else 1
        self.free_at_s = 0.0  # when the work in hand is done
        self.streams = per_output_token_s > 0 or per_chunk_s > 0  # output streaming is modelled

    def _serve(self, now: float, work_s: float) -> float:
        """Take ``work_s`` of work that came in at ``now``; when it is done."""
        start = now if now > self.free_at_s else self.free_at_s
        self.free_at_s = start + work_s
        return self.free_at_s

    def admit_at(self, now: float, num_prompt_tokens: int) -> float:
        return self._serve(now, self.per_request_s + self.per_prompt_token_s * num_prompt_tokens)

    def output_work(self, num_tokens: int, num_edges: int) -> float:
        """Seconds to process one step's ``num_tokens`` new tokens, of which ``num_edges``
        are a request's first or last (always streamed; the rest every
        ``stream_interval``-th)."""
        chunks = num_edges + (num_tokens - num_edges) / self.stream_interval
        return self.per_output_token_s * num_tokens + self.per_chunk_s * chunks

    def deliver_at(self, now: float, num_tokens: int, num_edges: int) -> float:
        """When the outputs of a step that ended at ``now`` have been processed."""
        return self._serve(now, self.output_work(num_tokens, num_edges))

    def after_run(self, start_s: float, end_s: float, num_steps: int, tokens_per_step: int) -> None:
        """A run of ``num_steps`` pure-decode steps from ``start_s`` to ``end_s``, each of
        ``tokens_per_step`` tokens: each step's outputs are processed after it, so the
        server is free one step's work after the run, or later if it fell behind."""
        w = self.output_work(tokens_per_step, 0)
        begin = start_s if start_s > self.free_at_s else self.free_at_s
        behind = begin + w * num_steps
        caught_up = end_s + w
        self.free_at_s = behind if behind > caught_up else caught_up
