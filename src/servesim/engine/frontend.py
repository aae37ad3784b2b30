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

Simplified: micro-batching of simultaneous prompts is one queue (a batch is still
encoded by one worker); detokenization and SSE streaming of output chunks, in the same
process, overlap the GPU's steps and are left out, so they neither delay the engine nor
take the server's time from tokenization.
"""

from __future__ import annotations


class Frontend:
    """The FIFO server: ``admit_at(now, n)`` is when a request of ``n`` prompt tokens that
    arrives at ``now`` reaches the engine (arrivals must come in time order)."""

    __slots__ = ("per_request_s", "per_prompt_token_s", "free_at_s")

    def __init__(self, per_request_s: float, per_prompt_token_s: float) -> None:
        self.per_request_s = per_request_s
        self.per_prompt_token_s = per_prompt_token_s
        self.free_at_s = 0.0  # when the request being served leaves the front end

    def admit_at(self, now: float, num_prompt_tokens: int) -> float:
        start = now if now > self.free_at_s else self.free_at_s
        self.free_at_s = start + self.per_request_s + self.per_prompt_token_s * num_prompt_tokens
        return self.free_at_s
