"""The workload as columns: what every trace reader and generator returns.

A ``Workload`` is plain numpy columns sorted by arrival time (seconds from the start of
the run). Prompt identity for prefix caching is optional and comes in one of two forms:

* ``hash_ids`` (Mooncake style): per request, one id per ``hash_block_tokens`` prompt
  tokens; equal ids at equal positions mean equal token content (a shared prefix).
* ``prefix_group`` + ``prefix_len``: requests with the same non-negative group share their
  first ``prefix_len`` prompt tokens (the convention of the vLLM CPU recorder).

The engine turns either into chained per-block hashes at its own ``block_size``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class BenchmarkClients:
    """How ``vllm bench serve`` sends a workload's requests (workload type ``benchmark``).

    Rows ``0 .. num_before - 1`` are sent before the measured run in phases, each phase
    starting when every request of the previous one is done: ``phase_starts`` holds the
    first row of each (the ready check's lone request, then the warm-ups, then the
    measured run at ``num_before``). A measured row's ``arrival_s`` is the time it becomes
    due, counted from the start of the measured run; it is sent then, or when a slot is
    free if ``max_concurrency`` requests are in flight (None: no limit).
    """

    max_concurrency: int | None
    phase_starts: tuple[int, ...] = (0,)

    @property
    def num_before(self) -> int:
        """Rows sent before the measured run (ready check and warm-ups)."""
        return self.phase_starts[-1]


@dataclass(frozen=True, slots=True)
class Dependencies:
    """Requests sent when others finish: session turns, agent calls, reasoning probes.

    Row i is sent once its ``num_preds[i]`` predecessors have finished, at the latest of
    (predecessor's finish + the edge's ``delay_s``): a think time or a tool call. Rows with
    no predecessor are sent at their ``arrival_s``; a row's ``arrival_s`` with
    predecessors is the earliest it could be sent (the graph's delays from its root, no
    service time), which keeps the rows sorted. Successors of row i are
    ``succ[succ_start[i]:succ_start[i + 1]]`` (a CSR list). ``task`` groups the rows of
    one session or agent run, for the end-to-end task latency.
    """

    num_preds: np.ndarray  # int64, per row
    succ_start: np.ndarray  # int64, n + 1
    succ: np.ndarray  # int64, per edge
    delay_s: np.ndarray  # float64, per edge
    task: np.ndarray  # int64, per row
    task_start_s: np.ndarray  # float64, per task: when it began (end-to-end task latency)

    @classmethod
    def from_edges(
        cls,
        n: int,
        src: np.ndarray,
        dst: np.ndarray,
        delay_s: np.ndarray,
        task: np.ndarray,
        task_start_s: np.ndarray,
    ) -> Dependencies:
        order = np.argsort(src, kind="stable")
        start = np.zeros(n + 1, np.int64)
        np.add.at(start, np.asarray(src, np.int64) + 1, 1)
        return cls(
            num_preds=np.bincount(dst, minlength=n).astype(np.int64),
            succ_start=np.cumsum(start),
            succ=np.asarray(dst, np.int64)[order],
            delay_s=np.asarray(delay_s, np.float64)[order],
            task=np.asarray(task, np.int64),
            task_start_s=np.asarray(task_start_s, np.float64),
        )

    def permuted(self, order: np.ndarray) -> Dependencies:
        """The same graph with rows renumbered: new row k is old row ``order[k]``."""
        n = len(order)
        new_of = np.empty(n, np.int64)
        new_of[order] = np.arange(n)
        counts = np.diff(self.succ_start)
        src = np.repeat(np.arange(n), counts)
        return Dependencies.from_edges(
            n, new_of[src], new_of[self.succ], self.delay_s, self.task[order], self.task_start_s
        )


@dataclass(slots=True)
class Workload:
    arrival_s: np.ndarray  # float64, sorted ascending
    num_prompt_tokens: np.ndarray  # int64, >= 1
    num_output_tokens: np.ndarray  # int64, >= 1
    hash_ids: list[tuple[int, ...]] | None = None
    hash_block_tokens: int = 512
    prefix_group: np.ndarray | None = None  # int64, -1 = no shared prefix
    prefix_len: int = 0
    priority: np.ndarray | None = None  # int64, lower = more urgent (vLLM convention)
    # int64 tenant ids 0..k-1 (None: one anonymous tenant); their names: meta["tenant_names"].
    tenant: np.ndarray | None = None
    # int64 LoRA adapter per request, an index into meta["adapter_names"] (-1: the base model;
    # None: no adapter column, engine.lora draws them).
    adapter: np.ndarray | None = None
    # int64 model per request, an index into meta["model_names"] (the OpenAI API's model field:
    # a multi-model cluster routes by it; -1 or None: the scenario's model.name).
    model: np.ndarray | None = None
    # Parallel sampling (vLLM SamplingParams.n): samples per request (None = 1 each); with
    # prune_at_token > 0, best-of-N pruning keeps num_kept_samples after that many outputs.
    num_samples: np.ndarray | None = None  # int64, >= 1
    prune_at_token: int = 0
    num_kept_samples: int = 1
    # Closed-loop clients (None: every request arrives at its arrival_s, open loop).
    clients: BenchmarkClients | None = None
    # Requests sent when others finish (None: none are).
    after: Dependencies | None = None
    source: str = ""  # where it came from, for reports
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def is_closed_loop(self) -> bool:
        """Some requests are sent when others finish (benchmark clients, dependencies)."""
        return self.clients is not None or self.after is not None

    def validate(self) -> None:
        n = len(self)
        for name in ("num_prompt_tokens", "num_output_tokens"):
            col = getattr(self, name)
            if col.shape != (n,):
                raise ValueError(f"{name} has shape {col.shape}, expected ({n},)")
            if n and col.min() < 1:
                raise ValueError(f"{name} must be >= 1")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("arrival_s must be sorted")
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError("hash_ids must have one entry per request")

    def subset(self, idx: np.ndarray | slice) -> Workload:
        """Rows ``idx`` (a slice or an index array in arrival order)."""
        if self.after is not None:
            raise ValueError("a workload with dependencies cannot be cut: its requests release each other")
        if self.hash_ids is None:
            hash_ids = None
        elif isinstance(idx, slice):
            hash_ids = self.hash_ids[idx]
        else:
            hash_ids = [self.hash_ids[i] for i in idx]
        return Workload(
            arrival_s=self.arrival_s[idx],
            num_prompt_tokens=self.num_prompt_tokens[idx],
            num_output_tokens=self.num_output_tokens[idx],
            hash_ids=hash_ids,
            hash_block_tokens=self.hash_block_tokens,
            prefix_group=None if self.prefix_group is None else self.prefix_group[idx],
            prefix_len=self.prefix_len,
            priority=None if self.priority is None else self.priority[idx],
            tenant=None if self.tenant is None else self.tenant[idx],
            adapter=None if self.adapter is None else self.adapter[idx],
            model=None if self.model is None else self.model[idx],
            num_samples=None if self.num_samples is None else self.num_samples[idx],
            prune_at_token=self.prune_at_token,
            num_kept_samples=self.num_kept_samples,
            clients=self.clients,
            source=self.source,
            meta=dict(self.meta),
        )


def workload_stats(wl: Workload, max_model_len: int | None = None) -> dict[str, float]:
    """The workload's size and mean lengths, as a report quotes them (and a reasoning
    workload's token accounting, ``reasoning_*``). With ``max_model_len``, also the mean
    lengths the engine runs (``served_mean_*``): over the requests it admits (prompt below
    max_model_len), each output cut where prompt + output reaches max_model_len."""
    n = len(wl)
    out = {
        "num_requests": n,
        "mean_prompt_tokens": float(wl.num_prompt_tokens.mean()) if n else 0.0,
        "mean_output_tokens": float(wl.num_output_tokens.mean()) if n else 0.0,
    }
    if max_model_len is not None and n:
        prompt = np.asarray(wl.num_prompt_tokens, np.int64)
        admitted = prompt < max_model_len
        if admitted.any():
            output = np.minimum(np.asarray(wl.num_output_tokens, np.int64), max_model_len - prompt)
            out["served_mean_prompt_tokens"] = float(prompt[admitted].mean())
            out["served_mean_output_tokens"] = float(output[admitted].mean())
    for key, value in wl.meta.get("reasoning", {}).items():  # reasoning: tokens against fixed-length runs
        out[f"reasoning_{key}"] = value
    return out
