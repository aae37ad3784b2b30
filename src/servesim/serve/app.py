"""The HTTP server: OpenAI's /v1/completions and /v1/chat/completions over a live simulation.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed as server-sent
events, ``data: {...}`` chunks then ``data: [DONE]``, or whole), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text, ``servesim.serve.prom``).

A completion is answered by an ASGI response of its own (``LiveResponse``) that sends the
tokens as the simulation releases them and listens to the connection meanwhile: a client
that disconnects aborts its request in the simulation, which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from servesim.serve.driver import Handle, LiveSim
from servesim.serve.prom import ServeMetrics
from servesim.serve.protocol import (
    ApiError,
    ApiRequest,
    Tokenizer,
    check_length,
    chunk,
    full_response,
    parse_request,
    placeholder,
    usage_chunk,
)

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
TOKENIZER_HEADER = "x-servesim-tokenizer"


class LiveResponse:
    """Sends one request's tokens as they are released; aborts it if the client leaves."""

    def __init__(self, sim: LiveSim, req: ApiRequest, handle: Handle, headers: dict[str, str]) -> None:
        self.sim = sim
        self.req = req
        self.handle = handle
        self.headers = headers

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._stream(send) if self.req.stream else self._whole(send))
        watch = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            finished = pump.done() and not pump.cancelled() and pump.exception() is None
            for task in (pump, watch):
                task.cancel()
            if not finished:
                self.sim.abort(self.handle)
        if pump.done() and not pump.cancelled() and pump.exception() is not None:
            with contextlib.suppress(OSError):
                pump.result()

    async def _start(self, send: Send, content_type: str) -> None:
        headers = [(b"content-type", content_type.encode())]
        headers += [(k.encode(), v.encode()) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def _stream(self, send: Send) -> None:
        await self._start(send, "text/event-stream; charset=utf-8")
        req = self.req
        sent = [0] * len(self.handle.streams)
        num_left = len(sent)
        while num_left:
            s, k, done = await self.handle.queue.get()
            if done:
                num_left -= 1
                data = chunk(req, s.index, "", "length", first=sent[s.index] == 0)
            else:
                data = chunk(req, s.index, placeholder(sent[s.index], k), None, first=sent[s.index] == 0)
                sent[s.index] += k
            await _event(send, data)
        if req.include_usage:
            await _event(send, usage_chunk(req, sum(sent)))
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _whole(self, send: Send) -> None:
        counts = [0] * len(self.handle.streams)
        num_left = len(counts)
        while num_left:
            s, k, done = await self.handle.queue.get()
            num_left -= done
            counts[s.index] += k
        body = json.dumps(full_response(self.req, counts)).encode()
        await self._start(send, "application/json")
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _event(send: Send, data: dict[str, Any]) -> None:
    body = b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


def build_app(
    sim: LiveSim,
    model_name: str,
    tokenizer: Tokenizer | None = None,
    on_start: Callable[[], None] | None = None,
) -> Starlette:
    """The ASGI app serving ``sim`` under ``model_name``; the simulation runs while it does."""
    api = _Endpoints(sim, model_name, tokenizer or Tokenizer())
    routes = [
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
        Route("/v1/models", api.models),
        Route("/health", api.health),
        Route("/metrics", api.prometheus),
    ]
    return Starlette(routes=routes, lifespan=_lifespan(sim, on_start), exception_handlers={404: _not_found})


class _Endpoints:
    """The OpenAI API's routes over one live simulation, and its Prometheus metrics."""

    def __init__(self, sim: LiveSim, model_name: str, tok: Tokenizer) -> None:
        self.sim, self.model_name, self.tok = sim, model_name, tok
        self.metrics = ServeMetrics(sim, model_name)
        self.seq = itertools.count()
        self.headers = {TOKENIZER_HEADER: tok.name}

    async def completion(self, request: Request, chat: bool) -> Response:
        sim = self.sim
        try:
            kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
            if kind != "application/json":
                raise ApiError(
                    400,
                    f"the request body must be JSON (Content-Type: application/json), "
                    f"got Content-Type {kind or 'empty'}",
                )
            req = parse_request(
                await request.body(), chat, self.model_name, self.tok, next(self.seq), sim.vocab_size
            )
            max_tokens = check_length(req, sim.max_model_len)
            why = max((sim.rejection(p, max_tokens) for p, _ in req.prompts), key=len)
            if why:
                raise ApiError(400, f"the request can never be served: {why}", "max_tokens")
        except ApiError as err:
            return error_response(err)
        handle = sim.submit(req.prompts, max_tokens, req.n)
        return LiveResponse(sim, req, handle, self.headers)  # type: ignore[return-value]

    async def completions(self, request: Request) -> Response:
        return await self.completion(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self.completion(request, chat=True)

    async def models(self, _: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "servesim",
                        "max_model_len": self.sim.max_model_len,
                    }
                ],
            }
        )

    async def health(self, _: Request) -> Response:
        return Response(status_code=200)

    async def prometheus(self, _: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(ApiError(404, f"no route {request.method} {request.url.path}"))


def _lifespan(
    sim: LiveSim, on_start: Callable[[], None] | None
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Run the simulation while the app serves (``on_start`` once it has started); close it
    and wait for it to end at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        task = asyncio.ensure_future(sim.run())
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            sim.close()
            await task

    return lifespan


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); OSError when it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets only then, and without
    # it Nagle's algorithm holds each small SSE chunk until the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
