"""Workloads built of parts: client mixtures, multi-turn sessions, agent task graphs, and
the union of every workload type a scenario takes (``WorkloadConfig``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic.json_schema import JsonDict

from servesim.config._base import _Strict
from servesim.config.arrival import ArrivalConfig, DelayDist, Seconds
from servesim.config.workloads import BenchmarkWorkload, LengthDist, SyntheticWorkload, TraceWorkload

_TOKENS: JsonDict = {"unit": "tokens"}  # json_schema_extra: the unit docs/scenario_reference.md shows


class SessionWorkload(_Strict):
    """Multi-turn conversations (docs/workloads.md, Sessions): each turn's prompt holds the
    previous turns, so a turn can reuse the previous prompt's KV blocks from the prefix cache."""

    type: Literal["sessions"] = Field("sessions", description="Selects this kind of workload.")
    arrival: ArrivalConfig = Field(ArrivalConfig(rate=0.5), description="When sessions start.")
    num_sessions: int | None = Field(200, ge=1, description="How many sessions (or use duration_s).")
    duration_s: Seconds | None = Field(None, gt=0, description="Start sessions until this time.")
    turns: LengthDist = Field(LengthDist(kind="constant", value=3), description="Turns per session.")
    first_prompt_len: LengthDist = Field(
        LengthDist(kind="lognormal", mean=2000, std=2000),
        description=("The first turn's prompt (the system prompt included)."),
    )
    system_prompt_len: int = Field(
        0,
        ge=0,
        description=(
            "Leading tokens every session shares (a common system prompt; at most the first prompt)."
        ),
        json_schema_extra=_TOKENS,
    )
    user_len: LengthDist = Field(
        LengthDist(kind="lognormal", mean=200, std=300),
        description=("New user tokens of each later turn (added after the previous answer)."),
    )
    output_len: LengthDist = Field(
        LengthDist(kind="lognormal", mean=300, std=250), description=("Output tokens of each turn.")
    )
    think_time: DelayDist = Field(
        DelayDist(kind="exponential", mean_s=60.0),
        description=("closed: from an answer to the next turn; open: between the sends of two turns."),
    )
    loop: Literal["closed", "open"] = Field(
        "closed",
        description=(
            "closed: a turn is sent think_time after the previous answer; open: at fixed gaps, "
            "whatever the answers."
        ),
    )
    max_prompt_len: int = Field(
        131072,
        ge=2,
        description=("A session ends before a turn whose prompt would pass this."),
        json_schema_extra=_TOKENS,
    )
    hash_block_tokens: int = Field(
        512,
        ge=1,
        description=("Tokens per prompt-identity unit (Mooncake's hash_ids: 512)."),
        json_schema_extra=_TOKENS,
    )
    seed: int = Field(0, description="Seed of the generator (with run.seed).")

    @model_validator(mode="after")
    def _check(self) -> SessionWorkload:
        if self.num_sessions is None and self.duration_s is None:
            raise ValueError("give num_sessions or duration_s")
        return self


class ClientConfig(_Strict):
    """One client of a mixture: its own arrival process (rate profile, burstiness) and lengths."""

    name: str = Field(min_length=1, description="The client's name (reports, meta['clients']).")
    arrival: ArrivalConfig = Field(ArrivalConfig(), description="The client's arrival process.")
    prompt_len: LengthDist = Field(LengthDist(kind="constant", value=512), description="Prompt lengths.")
    output_len: LengthDist = Field(LengthDist(kind="constant", value=128), description="Output lengths.")
    prefix_groups: int = Field(
        0, ge=0, description="The client's requests share one of N prefixes (0 = none)."
    )
    prefix_len: int = Field(0, ge=0, description="Shared prefix length in tokens.", json_schema_extra=_TOKENS)
    model: str | None = Field(
        None,
        min_length=1,
        description=(
            "The model the client's requests name (the OpenAI API's model field; a pool's "
            "served_model_name); None: the scenario's model.name."
        ),
    )


class MixtureWorkload(_Strict):
    """A workload as a sum of clients (ServeGen-style; docs/workloads.md, Client mixtures)."""

    type: Literal["mixture"] = Field("mixture", description="Selects this kind of workload.")
    clients: list[ClientConfig] = Field(min_length=1, description="The clients, each generated on its own.")
    num_requests: int | None = Field(
        None, ge=1, description=("Keep the first N requests of the merged stream (or use duration_s).")
    )
    duration_s: Seconds | None = Field(None, gt=0, description="Generate every client until this time.")
    seed: int = Field(0, description="Seed of the generator (with run.seed).")

    @model_validator(mode="after")
    def _check(self) -> MixtureWorkload:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        names = [c.name for c in self.clients]
        if len(set(names)) != len(names):
            raise ValueError(f"clients: names must differ, found {names}")
        if any(c.arrival.process == "burst" for c in self.clients):
            raise ValueError("clients: process burst has no rate to mix; use constant or poisson")
        return self


class AgentNode(_Strict):
    """One step of an agent's task: an LLM call, or a tool whose wait delays its successors."""

    name: str = Field(min_length=1, description="The step's name (what 'after' refers to).")
    kind: Literal["llm", "tool"] = Field("llm", description="llm: a request; tool: a wait of 'duration'.")
    after: list[str] = Field(default_factory=list, description="Steps that must finish first.")
    prompt_len: LengthDist = Field(
        LengthDist(kind="constant", value=1024), description="llm: prompt lengths."
    )
    output_len: LengthDist = Field(LengthDist(kind="constant", value=128), description="llm: output lengths.")
    duration: DelayDist = Field(
        DelayDist(kind="constant", mean_s=1.0), description="tool: how long it takes."
    )


class AgentWorkload(_Strict):
    """Agentic tasks (docs/workloads.md, Agents): each task runs a graph of LLM calls and tool
    waits; a call is sent when its predecessors are done."""

    type: Literal["agents"] = Field("agents", description="Selects this kind of workload.")
    arrival: ArrivalConfig = Field(ArrivalConfig(rate=0.2), description="When tasks start.")
    num_tasks: int | None = Field(100, ge=1, description="How many tasks (or use duration_s).")
    duration_s: Seconds | None = Field(None, gt=0, description="Start tasks until this time.")
    nodes: list[AgentNode] = Field(min_length=1, description="The steps of every task, a DAG by 'after'.")
    system_prompt_len: int = Field(
        0,
        ge=0,
        description=("Leading prompt tokens every call shares (the agent's instructions; prefix caching)."),
        json_schema_extra=_TOKENS,
    )
    seed: int = Field(0, description="Seed of the generator (with run.seed).")

    @model_validator(mode="after")
    def _check(self) -> AgentWorkload:
        if self.num_tasks is None and self.duration_s is None:
            raise ValueError("give num_tasks or duration_s")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"nodes: names must differ, found {names}")
        for n in self.nodes:
            for a in n.after:
                if a not in names:
                    raise ValueError(f"nodes.{n.name}.after: no step named {a!r} (steps: {', '.join(names)})")
        if not any(n.kind == "llm" for n in self.nodes):
            raise ValueError("nodes: a task needs at least one llm step")
        done: set[str] = set()
        while len(done) < len(names):  # Kahn's order: a step is placed once its predecessors are
            ready = [n.name for n in self.nodes if n.name not in done and set(n.after) <= done]
            if not ready:
                raise ValueError(f"nodes: 'after' has a cycle among {sorted(set(names) - done)}")
            done.update(ready)
        return self


class ReasoningWorkload(_Strict):
    """Reasoning models and test-time compute (docs/workloads.md, Reasoning): questions with
    long, bimodal reasoning lengths, N samples a question sharing its prompt (best-of-N), and
    optional Dynasor-style early exit by probing the answer after every segment."""

    type: Literal["reasoning"] = Field("reasoning", description="Selects this kind of workload.")
    arrival: ArrivalConfig = Field(ArrivalConfig(rate=0.5), description="When questions arrive (open loop).")
    num_questions: int | None = Field(100, ge=1, description="How many questions (or use duration_s).")
    duration_s: Seconds | None = Field(None, gt=0, description="Send questions until this time.")
    prompt_len: LengthDist = Field(
        LengthDist(kind="lognormal", mean=300, std=200), description=("The question's prompt.")
    )
    quick_len: LengthDist = Field(
        LengthDist(kind="lognormal", mean=1500, std=800), description=("Reasoning length of the quick mode.")
    )
    long_len: LengthDist = Field(
        LengthDist(kind="lognormal", mean=8000, std=3000),
        description=("Reasoning length of the long-think mode."),
    )
    long_weight: float = Field(0.4, ge=0, le=1, description="Share of samples in the long-think mode.")
    samples: int = Field(1, ge=1, description="Samples a question (best-of-N); they share the prompt.")
    early_exit: bool = Field(
        False,
        description=(
            "Dynasor early exit: probe the answer after every segment, stop once 'agree' probes agree."
        ),
    )
    segment_tokens: int = Field(
        256, ge=1, description="early_exit: reasoning tokens between probes (k).", json_schema_extra=_TOKENS
    )
    probe_prompt_tokens: int = Field(
        20,
        ge=0,
        description=("early_exit: tokens a probe appends to the reasoning so far (the 'final answer' cue)."),
        json_schema_extra=_TOKENS,
    )
    probe_tokens: int = Field(
        16, ge=1, description="early_exit: output tokens of a probe.", json_schema_extra=_TOKENS
    )
    agree: int = Field(2, ge=1, description="early_exit: consecutive probes that must agree.")
    stabilize_alpha: float = Field(
        2.0,
        gt=0,
        description=("Beta(alpha, beta) of u: a sample's answer is final after u x its reasoning length."),
    )
    stabilize_beta: float = Field(3.0, gt=0, description="Beta(alpha, beta) of u: the beta.")
    hash_block_tokens: int = Field(
        64,
        ge=1,
        description=(
            "Tokens per prompt-identity unit (prefix-cache reuse of the prompt and the reasoning so far)."
        ),
        json_schema_extra=_TOKENS,
    )
    seed: int = Field(0, description="Seed of the generator (with run.seed).")

    @model_validator(mode="after")
    def _check(self) -> ReasoningWorkload:
        if self.num_questions is None and self.duration_s is None:
            raise ValueError("give num_questions or duration_s")
        return self


class InferencePerfWorkload(_Strict):
    """The requests an inference-perf run sends, read from inference-perf's own config file
    (its profile, or the resolved config.yaml in its results folder; docs/workloads.md)."""

    type: Literal["inference-perf"] = Field("inference-perf", description="Selects this kind of workload.")
    config: str = Field(
        description=(
            "inference-perf's YAML config: data (shared_prefix, random or synthetic) and load (constant or "
            "poisson stages); relative paths are relative to the scenario file."
        )
    )
    num_special_tokens: int = Field(
        1,
        ge=0,
        description=("Special tokens the server's tokenizer adds to each prompt (1 for Llama's BOS)."),
        json_schema_extra=_TOKENS,
    )
    rate_scale: float = Field(
        1.0,
        gt=0,
        description=(
            "Multiply every stage's rate (each stage keeps its duration, so it sends proportionally more "
            "requests); capacity searches this."
        ),
    )
    limit: int | None = Field(None, ge=1, description="Take the first N requests.")
    seed: int = Field(0, description="Seed of the arrival and length draws (with run.seed).")


class GuidellmWorkload(_Strict):
    """The requests a guidellm benchmark sends, read from guidellm's own scenario file (the JSON
    or YAML ``guidellm benchmark --scenario`` takes; docs/workloads.md)."""

    type: Literal["guidellm"] = Field("guidellm", description="Selects this kind of workload.")
    config: str = Field(
        description=(
            "guidellm's scenario file (JSON or YAML; flat 0.3-0.6 layout or 0.7's spec): profile constant, "
            "poisson, concurrent, synchronous or throughput with one rate, synthetic data, max_seconds or "
            "max_requests; relative paths are relative to the scenario file."
        )
    )
    num_special_tokens: int = Field(
        1,
        ge=0,
        description=(
            "Tokens the server adds to each prompt: the tokenizer's special tokens, or on guidellm's default "
            "chat endpoint the chat template's."
        ),
        json_schema_extra=_TOKENS,
    )
    rate_scale: float = Field(
        1.0,
        gt=0,
        description=(
            "Multiply the rate of a constant or poisson profile (max_seconds kept); capacity searches this."
        ),
    )
    limit: int | None = Field(None, ge=1, description="Take the first N requests.")
    seed: int = Field(
        0,
        description=(
            "Added to the scenario's random_seed (0: guidellm's own length and Poisson draws; with run.seed)."
        ),
    )


#: Every kind of workload a scenario can name (``load_workload`` takes any of them).
WorkloadKind = (
    SyntheticWorkload
    | TraceWorkload
    | BenchmarkWorkload
    | SessionWorkload
    | MixtureWorkload
    | AgentWorkload
    | ReasoningWorkload
    | InferencePerfWorkload
    | GuidellmWorkload
)
WorkloadConfig = Annotated[WorkloadKind, Field(discriminator="type")]
