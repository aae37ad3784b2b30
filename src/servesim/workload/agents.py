"""Agentic tasks: every task runs the same graph of LLM calls and tool waits.

A tool step is no request: its duration (drawn per task) delays its successors. So an LLM
call's release is, over its predecessors, the latest of

* an LLM predecessor's finish + the longest chain of tool waits between the two, and
* the task's start + the longest chain of tool waits from the start (for calls reached
  from the start through tools only, or with no predecessor at all),

which is ``Workload.after`` (edge delays) plus the row's ``arrival_s`` (the dependency
feeder never sends a row before it). ``arrival_s`` of every call is its earliest possible
send (tool waits only, no service), so the rows sort by it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servesim.config import AgentNode, AgentWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import Dependencies, Workload
from servesim.workload.notices import notice
from servesim.workload.synthetic import arrival_times, sample_delays, sample_lengths

START = ""  # the key of the task's start in the delay maps


def generate_agents(cfg: AgentWorkload, seed: int = 0) -> Workload:
    """The LLM calls of ``cfg``'s tasks, sorted by earliest send time."""
    total_seed = cfg.seed + seed
    if total_seed < 0:
        raise WorkloadError(
            f"workload.seed ({cfg.seed}) + run.seed ({seed}) = {total_seed}: expected a seed >= 0"
        )
    rng_arrival, rng_steps = (np.random.default_rng(s) for s in np.random.SeedSequence(total_seed).spawn(2))
    start = arrival_times(cfg.arrival, cfg.num_tasks, cfg.duration_s, rng_arrival, "num_tasks")
    t = len(start)
    if t == 0:
        raise WorkloadError(f"workload: no task starts before duration_s={cfg.duration_s}")
    order = _topological(cfg)
    llm = [n.name for n in order if n.kind == "llm"]
    found: list[dict] = []
    calls = _walk(order, llm, start, rng_steps, found)
    task = np.repeat(np.arange(t), len(llm))
    after = Dependencies.from_edges(t * len(llm), calls.src, calls.dst, calls.delay, task, start)
    rows = np.argsort(calls.arrival, kind="stable")
    group = np.zeros(t * len(llm), np.int64) if cfg.system_prompt_len else None
    prompt = calls.prompt
    short = int((prompt < cfg.system_prompt_len + 1).sum()) if cfg.system_prompt_len else 0
    if short:
        found.append(
            notice(
                "length_raised",
                f"workload.nodes: {short:,} of {prompt.size:,} prompts were not "
                f"longer than workload.system_prompt_len ({cfg.system_prompt_len}) and were "
                f"raised to {cfg.system_prompt_len + 1}",
                short,
                "workload.system_prompt_len",
            )
        )
    return Workload(
        arrival_s=calls.arrival[rows],
        num_prompt_tokens=np.maximum(prompt.ravel(), cfg.system_prompt_len + 1)[rows],
        num_output_tokens=calls.output.ravel()[rows],
        after=after.permuted(rows),
        prefix_group=group,
        prefix_len=cfg.system_prompt_len,
        source=f"agents({len(llm)} llm calls a task, {t} tasks, seed={total_seed})",
        meta={
            "seed": total_seed,
            "num_tasks": t,
            "step": np.tile(np.arange(len(llm)), t)[rows],
            "steps": llm,
            "notices": found,
        },
    )


@dataclass(slots=True)
class _Calls:
    """Every task's LLM calls, task-major (row ``task * num_llm + step``): lengths (tasks x
    steps), earliest send times, and the dependency edges between them with their delays."""

    prompt: np.ndarray
    output: np.ndarray
    arrival: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    delay: np.ndarray


def _walk(
    order: list[AgentNode],
    llm: list[str],
    start: np.ndarray,
    rng_steps: np.random.Generator,
    found: list[dict],
) -> _Calls:
    """Walk the graph in topological order, one draw per step for every task (vectorised over
    tasks): an LLM step's lengths, a tool step's wait, and the delays they put on successors."""
    t = len(start)
    col = {name: j for j, name in enumerate(llm)}
    prompt, output = np.zeros((t, len(llm)), np.int64), np.zeros((t, len(llm)), np.int64)
    inbound: dict[str, dict[str, np.ndarray]] = {}  # step -> {LLM predecessor or START: delay per task}
    outbound: dict[str, dict[str, np.ndarray]] = {}
    earliest: dict[str, np.ndarray] = {}  # LLM step -> earliest send per task
    src, dst, delay = [], [], []
    for n in order:
        step_rng = np.random.default_rng(rng_steps.integers(1 << 62))
        inn: dict[str, np.ndarray] = {} if n.after else {START: np.zeros(t)}
        for p in n.after:
            for k, d in outbound[p].items():
                inn[k] = np.maximum(inn[k], d) if k in inn else d
        inbound[n.name] = inn
        if n.kind == "tool":
            wait = sample_delays(n.duration, t, step_rng)
            outbound[n.name] = {k: d + wait for k, d in inn.items()}
            continue
        j = col[n.name]
        prompt[:, j] = sample_lengths(n.prompt_len, t, step_rng, f"workload.nodes.{n.name}.prompt_len", found)
        output[:, j] = sample_lengths(n.output_len, t, step_rng, f"workload.nodes.{n.name}.output_len", found)
        outbound[n.name] = {n.name: np.zeros(t)}
        lb = start + inn.get(START, 0.0)
        for k, d in inn.items():
            if k != START:
                lb = np.maximum(lb, earliest[k] + d)
                src.append(np.arange(t) * len(llm) + col[k])
                dst.append(np.arange(t) * len(llm) + j)
                delay.append(d)
        earliest[n.name] = lb
    arrival = np.stack([earliest[name] for name in llm], axis=1).ravel()
    return _Calls(prompt, output, arrival, _cat(src, np.int64), _cat(dst, np.int64), _cat(delay, np.float64))


def _cat(xs: list[np.ndarray], dt: type) -> np.ndarray:
    return np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)


def _topological(cfg: AgentWorkload) -> list[AgentNode]:
    done: set[str] = set()
    out: list[AgentNode] = []
    while len(out) < len(cfg.nodes):
        for n in cfg.nodes:
            if n.name not in done and set(n.after) <= done:
                out.append(n)
                done.add(n.name)
    return out
