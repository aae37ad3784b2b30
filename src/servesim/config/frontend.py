"""vLLM's API server in front of the engine (``engine.frontend``): its measured costs."""

from __future__ import annotations

from pydantic import Field

from servesim.config._base import _Strict

#: vLLM's API-server process in front of the engine core, measured on the CPU-build tool's
#: ``vllm serve`` (docs/fidelity.md, section 5, "The front end"): the client's TTFT minus
#: vLLM's own TTFT (which starts after tokenization) at 17-token prompts (per request) and
#: its growth to 1.1k and 2.2k-token prompts of the benchmark's random-token text (per token).
FRONTEND_PER_REQUEST_S = 3.6e-3
FRONTEND_PER_PROMPT_TOKEN_S = 2.6e-6
#: The API server's CPU time per generated token of a request (its output processor:
#: detokenization and bookkeeping) and per streamed chunk (the response object, its JSON,
#: the write), as measured on vLLM 0.32's CPU-build `vllm serve` on this project's
#: development machine (docs/perf_model.md, "Streaming"). A server that falls behind merges
#: each request's pending outputs into one chunk, as vLLM's output collector does
#: (``engine/frontend.py``), so these costs delay tokens but do not saturate the server until
#: the per-token work alone exceeds the step time.
MEASURED_PER_OUTPUT_TOKEN_S = 33e-6
MEASURED_PER_CHUNK_S = 69e-6


class FrontendConfig(_Strict):
    """vLLM's OpenAI API server (the front-end process of ``vllm serve``) before the engine.

    One process (one per data-parallel rank from vLLM 0.16, ``engine.frontend.api_servers_per_rank``)
    and one tokenizer worker serve every request in turn (vLLM 0.10-0.19: the
    ``AsyncMicrobatchTokenizer``'s single-thread executor; 0.32: the renderer's pool of
    ``renderer_num_workers`` = 1), so each request's HTTP handling, validation and
    tokenization is a first-come first-served queue in front of the scheduler: a request
    reaches the engine ``per_request_s + per_prompt_token_s x prompt tokens`` after the
    front end is free. Its TTFT still counts from the client's send. The same process
    detokenizes and streams every step's outputs (``per_output_token_s``, ``per_chunk_s``):
    arrivals wait behind that work and a client sees a token when its step's outputs are
    processed (``engine/frontend.py``).
    """

    enabled: bool | None = Field(
        None,
        description=(
            "Model the API server's per-request queue. None: on for the vllm_v1 and vllm_v0 policies "
            "on a GPU (`vllm serve`), off on the CPU backend (the bundled recordings are offline runs "
            "without an API server) and without hardware."
        ),
    )
    per_request_s: float = Field(
        FRONTEND_PER_REQUEST_S,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=(
            "Front-end time of one request besides tokenization (HTTP, validation, input "
            "processing, the first chunk's streaming), measured on vLLM 0.32's `vllm serve`."
        ),
    )
    per_prompt_token_s: float = Field(
        FRONTEND_PER_PROMPT_TOKEN_S,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=(
            "Front-end time per prompt token (tokenizing the prompt text), measured on vLLM 0.32's "
            "`vllm serve` with a byte-level BPE on random-token text, as the benchmark sends."
        ),
    )
    per_output_token_s: float = Field(
        MEASURED_PER_OUTPUT_TOKEN_S,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=(
            "Front-end time per generated token of each request (the output processor's "
            "detokenization and bookkeeping), on the same one server as the requests' handling, "
            "so that streaming delays arrivals and a client sees a token when its step's outputs "
            "are processed; measured on vLLM 0.32's CPU-build `vllm serve` (docs/perf_model.md, "
            '"Streaming"). 0 with per_chunk_s 0: the outputs are taken as free.'
        ),
    )
    per_chunk_s: float = Field(
        MEASURED_PER_CHUNK_S,
        ge=0,
        json_schema_extra={"unit": "s"},
        description=(
            "Front-end time per streamed chunk (a response object, its JSON and the write): one at a "
            "request's first and last token and one every engine.stream_interval tokens between, "
            "fewer when the server falls behind (a request's pending outputs merge into one chunk); "
            "measured as per_output_token_s."
        ),
    )
