"""The OpenAI API's requests, responses and errors, as vLLM's server speaks them.

Only what decides the simulation is read from a request: the prompt's token count, the
output length (``max_tokens``, or ``max_completion_tokens`` in chat), ``n``, ``stream`` and
``stream_options.include_usage``; sampling knobs (temperature, stop, ...) are checked as
vLLM checks them (``SAMPLING`` below: a wrong type or a value out of range is a 400) and
otherwise ignored, as the simulated engine generates exactly ``max_tokens`` tokens (vLLM's
``ignore_eos``), ending at ``max_model_len`` at the latest. As vLLM, an empty completion
prompt and token ids outside the model's vocabulary are refused.

Errors are vLLM's ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}``
with ``type`` BadRequestError (400: bad JSON, a field of the wrong type or value, a prompt
plus ``max_tokens`` over ``max_model_len``) or NotFoundError (404: an unknown model or
route). vLLM answers request-validation errors with 400, not FastAPI's 422.

Prompt tokens are counted with ``tiktoken``'s ``cl100k_base`` when it is installed (it
fetches its encoding file on first use), else estimated as ``ceil(characters / 4)``; ``Tokenizer.name``
says which (the server sends it in the ``x-servesim-tokenizer`` header). Chat messages add
the framing tokens of Llama 3's chat template: 4 per message and 4 for the start and the
assistant's header.
"""

from __future__ import annotations

import importlib
import json
import math
import time
import zlib
from dataclasses import dataclass
from typing import Any

#: /v1/completions' default output length when a request gives none (OpenAI's documented 16).
DEFAULT_MAX_TOKENS = 16
MAX_N = 128
CHAT_TOKENS_PER_MESSAGE = 4  # <|start_header_id|> role <|end_header_id|> \n\n ... <|eot_id|>
CHAT_TOKENS_PER_REPLY = 4  # <|begin_of_text|> and the assistant's header
_WORDS = (
    "the",
    " of",
    " and",
    " to",
    " in",
    " a",
    " is",
    " that",
    " for",
    " it",
    " as",
    " was",
    " with",
    " be",
    " by",
    " on",
)


class ApiError(Exception):
    """An OpenAI-style error answer."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = "NotFoundError" if self.status == 404 else "BadRequestError"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


class Tokenizer:
    """Counts a text's tokens: tiktoken's cl100k_base where available, else characters / 4."""

    def __init__(self) -> None:
        self._enc: Any = None
        self.name = "estimate:chars/4"
        try:  # optional: not a dependency of servesim
            self._enc = importlib.import_module("tiktoken").get_encoding("cl100k_base")
            self.name = "tiktoken:cl100k_base"
        except Exception:  # not installed, or its encoding file cannot be fetched offline
            self._enc = None

    def count(self, text: str) -> int:
        if self._enc is not None:
            return len(self._enc.encode(text, disallowed_special=()))
        return math.ceil(len(text) / 4)


@dataclass(slots=True)
class ApiRequest:
    """What one completion or chat request asks of the simulation."""

    chat: bool
    model: str
    prompts: list[tuple[int, int]]  # (prompt tokens, key of its text) per prompt
    max_tokens: int | None  # None: the default
    n: int
    stream: bool
    include_usage: bool
    created: int
    id: str


#: Sampling knobs checked as vLLM's ``SamplingParams`` checks them: (number kind, low, high,
#: whether low itself is allowed); None: unbounded on that side.
SAMPLING: dict[str, tuple[str, float | None, float | None, bool]] = {
    "temperature": ("number", 0.0, None, True),
    "top_p": ("number", 0.0, 1.0, False),
    "top_k": ("integer", -1, None, True),
    "min_p": ("number", 0.0, 1.0, True),
    "presence_penalty": ("number", -2.0, 2.0, True),
    "frequency_penalty": ("number", -2.0, 2.0, True),
    "repetition_penalty": ("number", 0.0, None, False),
    "seed": ("integer", None, None, True),
    "min_tokens": ("integer", 0, None, True),
}


def _check_sampling(body: dict) -> None:
    for name, (kind, low, high, low_ok) in SAMPLING.items():
        value = body.get(name)
        if value is None:
            continue
        ok_type = isinstance(value, int) if kind == "integer" else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or (kind == "number" and not math.isfinite(value)):
            raise ApiError(
                400,
                f"{name} must be {'an integer' if kind == 'integer' else 'a number'}, "
                f"got {json.dumps(value)}",
                name,
            )
        below = low is not None and (value < low or (value == low and not low_ok))
        if below or (high is not None and value > high):
            lo = "" if low is None else f"{'>=' if low_ok else '>'} {low:g}"
            hi = "" if high is None else f"<= {high:g}"
            raise ApiError(400, f"{name} must be {' and '.join(x for x in (lo, hi) if x)}, got {value}", name)
    stop = body.get("stop")
    if (
        stop is not None
        and not isinstance(stop, str)
        and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise ApiError(400, "stop must be a string or a list of strings", "stop")


#: vLLM's ``--max-logprobs`` default: the most logprobs a request may ask for.
MAX_LOGPROBS = 20


def _check_logprobs(body: dict, chat: bool) -> None:
    """Completions' ``logprobs`` (an integer) and chat's ``logprobs`` (a boolean) with
    ``top_logprobs`` (an integer), within ``MAX_LOGPROBS`` as vLLM checks them; the answers
    carry no logprobs (``logprobs: null``), as servesim samples no tokens."""
    count = body.get("top_logprobs") if chat else body.get("logprobs")
    name = "top_logprobs" if chat else "logprobs"
    if chat and body.get("logprobs") is not None and not isinstance(body.get("logprobs"), bool):
        raise ApiError(400, "logprobs must be a boolean", "logprobs")
    if count is None:
        return
    if isinstance(count, bool) or not isinstance(count, int):
        raise ApiError(400, f"{name} must be an integer, got {json.dumps(count)}", name)
    if not 0 <= count <= MAX_LOGPROBS:
        raise ApiError(
            400,
            f"Requested sample logprobs of {count}, which is greater than max allowed: {MAX_LOGPROBS}"
            if count > MAX_LOGPROBS
            else f"{name} must be >= 0, got {count}",
            name,
        )


def parse_request(
    raw: bytes, chat: bool, served_model: str, tokenizer: Tokenizer, seq: int, vocab_size: int | None = None
) -> ApiRequest:
    """Read a /v1/completions (``chat`` False) or /v1/chat/completions body, or raise ApiError.
    ``vocab_size``: the model's, to refuse token ids outside it (None: not checked)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    model = body.get("model", served_model)
    if not isinstance(model, str):
        raise ApiError(400, "model must be a string", "model")
    if model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    prompts = _chat_prompt(body, tokenizer) if chat else _completion_prompts(body, tokenizer, vocab_size)
    _check_sampling(body)
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _int_field(body, key, None, 1)
    min_tokens = body.get("min_tokens")
    if max_tokens is not None and isinstance(min_tokens, int) and min_tokens > max_tokens:
        # vLLM's SamplingParams._verify_args
        raise ApiError(
            400,
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
        )
    _check_logprobs(body, chat)
    n = _int_field(body, "n", 1, 1)
    assert n is not None
    if n > MAX_N:
        raise ApiError(400, f"n must be at most {MAX_N}, got {n}", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise ApiError(400, "stream must be a boolean", "stream")
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not stream:
            raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
        if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
            raise ApiError(
                400, "stream_options must be an object with a boolean include_usage", "stream_options"
            )
        include_usage = bool(opts.get("include_usage", False))
    prefix = "chatcmpl" if chat else "cmpl"
    return ApiRequest(
        chat,
        model,
        prompts,
        max_tokens,
        n,
        bool(stream),
        include_usage,
        int(time.time()),
        f"{prefix}-{seq:08x}",
    )


def check_length(req: ApiRequest, max_model_len: int) -> int:
    """``max_tokens`` resolved (default: what remains of the context in chat, as vLLM does,
    and ``DEFAULT_MAX_TOKENS`` for completions); raises ApiError when a prompt does not fit."""
    longest = max(p for p, _ in req.prompts)
    if req.max_tokens is None:
        max_tokens = max_model_len - longest if req.chat else DEFAULT_MAX_TOKENS
    else:
        max_tokens = req.max_tokens
    if longest + max_tokens > max_model_len or longest >= max_model_len:
        where = "messages" if req.chat else "prompt"
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {longest + max_tokens} tokens ({longest} in the {where}, "
            f"{max_tokens} in the completion). Please reduce the length of the {where} "
            f"or completion.",
            "max_tokens" if req.max_tokens is not None else where,
        )
    return max_tokens


def _int_field(body: dict, name: str, default: int | None, least: int) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {json.dumps(value)}", name)
    if value < least:
        raise ApiError(400, f"{name} must be at least {least}, got {value}", name)
    return value


def _key(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def _completion_prompts(body: dict, tok: Tokenizer, vocab_size: int | None = None) -> list[tuple[int, int]]:
    """A prompt is a non-empty string, a list of token ids (each in the vocabulary), or a
    batch of either."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        items: list[Any] = [prompt]
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        items = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = prompt
    else:
        raise ApiError(
            400, "prompt must be a non-empty string, list of token ids, or list of those", "prompt"
        )
    out = []
    for item in items:
        if isinstance(item, str):
            if not item:
                raise ApiError(400, "The decoder prompt cannot be empty", "prompt")
            out.append((max(1, tok.count(item)), _key(item)))
        elif (
            isinstance(item, list)
            and item
            and all(isinstance(t, int) and not isinstance(t, bool) for t in item)
        ):
            bad = next((t for t in item if t < 0 or (vocab_size is not None and t >= vocab_size)), None)
            if bad is not None:
                top = f" (ids 0 to {vocab_size - 1} of the model's vocabulary)" if vocab_size else ""
                raise ApiError(400, f"Token id {bad} is out of vocabulary{top}", "prompt")
            out.append((len(item), _key(",".join(map(str, item)))))
        else:
            raise ApiError(400, "each prompt must be a non-empty string or list of token ids", "prompt")
    return out


#: Roles whose ``content`` may be null (the OpenAI types vLLM validates ``messages`` with:
#: ``ChatCompletionAssistantMessageParam``, content optional and nullable beside ``tool_calls``;
#: ``ChatCompletionFunctionMessageParam``, ``Required[Optional[str]]``). For any other role a
#: null content matches no member of vLLM's ``ChatCompletionMessageParam`` union (its own
#: ``CustomChatCompletionMessageParam`` takes a string or a list of parts), so vLLM answers 400;
#: a message without the key at all matches that custom member (``total=False``) and is read
#: as empty text (``chat_utils._parse_chat_message_content``: ``content = []``).
NULL_CONTENT_ROLES = ("assistant", "function")


def _chat_prompt(body: dict, tok: Tokenizer) -> list[tuple[int, int]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", "messages")
    num_tokens = CHAT_TOKENS_PER_REPLY
    texts = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{k}] must be an object with a string role", "messages")
        content = m.get("content")
        if content is None and "content" in m and m["role"] not in NULL_CONTENT_ROLES:
            raise ApiError(
                400,
                f"messages[{k}].content: null is accepted only for an assistant or function message, "
                f"not for role {m['role']!r} (a string or a list of parts expected)",
                "messages",
            )
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list) and all(isinstance(p, dict) for p in content):
            text = "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
        else:
            raise ApiError(400, f"messages[{k}].content must be a string or a list of parts", "messages")
        num_tokens += CHAT_TOKENS_PER_MESSAGE + tok.count(m["role"]) + tok.count(text)
        texts.append(f"{m['role']}\0{text}")
    return [(num_tokens, _key("\0\0".join(texts)))]


def placeholder(start: int, k: int) -> str:
    """The text of output tokens ``start .. start + k - 1``: one common word per token."""
    return "".join(_WORDS[i % len(_WORDS)] for i in range(start, start + k))


def usage(req: ApiRequest, num_completion: int) -> dict[str, int]:
    num_prompt = sum(p for p, _ in req.prompts) * req.n
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_completion,
        "total_tokens": num_prompt + num_completion,
    }


def chunk(req: ApiRequest, index: int, text: str, finish_reason: str | None, first: bool) -> dict[str, Any]:
    """One streamed chunk of choice ``index``."""
    if req.chat:
        delta: dict[str, Any] = {"content": text}
        if first:
            delta["role"] = "assistant"
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        obj = "chat.completion.chunk"
    else:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": req.id, "object": obj, "created": req.created, "model": req.model, "choices": [choice]}


def usage_chunk(req: ApiRequest, num_completion: int) -> dict[str, Any]:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    return {
        "id": req.id,
        "object": obj,
        "created": req.created,
        "model": req.model,
        "choices": [],
        "usage": usage(req, num_completion),
    }


def full_response(req: ApiRequest, counts: list[int]) -> dict[str, Any]:
    """The whole answer of a non-streamed request; ``counts[i]``: tokens of choice i."""
    choices: list[dict[str, Any]] = []
    for i, k in enumerate(counts):
        text = placeholder(0, k)
        if req.chat:
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": "length",
                }
            )
        else:
            choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": "length"})
    obj = "chat.completion" if req.chat else "text_completion"
    return {
        "id": req.id,
        "object": obj,
        "created": req.created,
        "model": req.model,
        "choices": choices,
        "usage": usage(req, sum(counts)),
    }
