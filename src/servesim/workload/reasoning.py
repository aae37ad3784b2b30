"""Reasoning models and test-time compute: long bimodal reasoning, best-of-N, Dynasor early exit.

Questions arrive open loop (``arrival``). Each question sends ``samples`` samples (best-of-N)
that share its prompt; the question is a task (``Workload.after.task``) and is done when the
last request of its last sample is, which the ``tasks`` summary section reports.

A sample's reasoning length L is drawn from a two-component mixture: the long-think mode
(``long_len``) with probability ``long_weight``, else the quick mode (``quick_len``), as
reasoning models' output lengths are (short answers to easy questions, a long tail of
extended thinking).

``early_exit: false``: a sample is one request of L output tokens.

``early_exit: true`` models Dynasor-CoT's client loop (Fu et al., "Efficiently Serving LLM
Reasoning Programs with Certaindex", 2024): the sample reasons in segments of
k = ``segment_tokens`` tokens; after each segment a probe (prompt = the question + the
reasoning so far + ``probe_prompt_tokens`` of "final answer" cue, ``probe_tokens`` output)
asks for the current answer, and the sample stops once the last ``agree`` probes agree. The
answer is taken to settle at u*L with u ~ Beta(``stabilize_alpha``, ``stabilize_beta``): probes
after u*L return the final answer, those before it do not agree (the conservative case), so
the sample stops at

    S = min(L, k * max(1, ceil(u*L / k)) + (agree - 1) * k)

with one probe after every segment that ends before L (S/k probes when S < L). Its final
answer is the one the full-length run reaches, so both runs answer alike. The loop is
sequential as in Dynasor's client: segment j+1 is sent when probe j is done (it is a
continuation request whose prompt holds the prompt plus all tokens so far). Simplifications:
a continuation re-sends the reasoning as prompt tokens and relies on the prefix cache for
its KV (Mooncake-style ``hash_ids``: the question's units are shared by its samples, the
reasoning's by a sample's later requests, a partial last unit and the probe cue are unique,
as in sessions.py); generated tokens count as unique in the engine, so the first
continuation re-prefills the previous segment's last partial unit. ``meta["reasoning"]``
holds the token accounting against the same draws with early exit off.
"""

from __future__ import annotations

import numpy as np

from servesim.config import ReasoningWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import Dependencies, Workload
from servesim.workload.synthetic import arrival_times, sample_lengths


def stop_points(length: np.ndarray, u: np.ndarray, k: int, agree: int) -> tuple[np.ndarray, np.ndarray]:
    """Per sample: reasoning tokens generated with early exit, and probes sent."""
    first = k * np.maximum(1, np.ceil(u * length / k).astype(np.int64))  # first segment end >= u*L
    stop = np.minimum(length, first + (agree - 1) * k)
    probes = np.where(stop < length, stop // k, (length - 1) // k)  # a probe after each end < L
    return stop.astype(np.int64), probes.astype(np.int64)


def draw_samples(
    cfg: ReasoningWorkload, n: int, seq: np.random.SeedSequence, found: list[dict]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` samples' reasoning lengths, long-mode flags and answer-settling fractions u."""
    rngs = [np.random.default_rng(s) for s in seq.spawn(4)]
    quick = sample_lengths(cfg.quick_len, n, rngs[0], "workload.quick_len", found)
    long_ = sample_lengths(cfg.long_len, n, rngs[1], "workload.long_len", found)
    is_long = rngs[2].random(n) < cfg.long_weight
    u = rngs[3].beta(cfg.stabilize_alpha, cfg.stabilize_beta, n)
    return np.where(is_long, long_, quick).astype(np.int64), is_long, u


def generate_reasoning(cfg: ReasoningWorkload, seed: int = 0) -> Workload:
    """The requests of ``cfg``'s questions: one per sample, or Dynasor's segments and probes."""
    total_seed = cfg.seed + seed
    if total_seed < 0:
        raise WorkloadError(
            f"workload.seed ({cfg.seed}) + run.seed ({seed}) = {total_seed}: expected a seed >= 0"
        )
    seq_arrival, seq_prompt, seq_samples = np.random.SeedSequence(total_seed).spawn(3)
    rng_arrival, rng_prompt = np.random.default_rng(seq_arrival), np.random.default_rng(seq_prompt)
    start = arrival_times(cfg.arrival, cfg.num_questions, cfg.duration_s, rng_arrival, "num_questions")
    q = len(start)
    if q == 0:
        raise WorkloadError(f"workload: no question arrives before duration_s={cfg.duration_s}")
    found: list[dict] = []
    prompt = sample_lengths(cfg.prompt_len, q, rng_prompt, "workload.prompt_len", found)
    question = np.repeat(np.arange(q), cfg.samples)
    length, is_long, u = draw_samples(cfg, len(question), seq_samples, found)
    if cfg.early_exit:
        stop, probes = stop_points(length, u, cfg.segment_tokens, cfg.agree)
    else:
        stop, probes = length, np.zeros(len(length), np.int64)
    rows = _Rows(cfg)
    for s in range(len(question)):
        rows.add_sample(s, int(question[s]), int(prompt[question[s]]), int(length[s]), int(stop[s]))
    n = len(rows.prompt)
    row_q = np.asarray(rows.question, np.int64)
    after = Dependencies.from_edges(
        n,
        np.asarray(rows.src, np.int64),
        np.asarray(rows.dst, np.int64),
        np.zeros(len(rows.src)),
        row_q,
        start,
    )
    accounting: dict[str, float] = {
        "reasoning_tokens": int(stop.sum()),
        "probe_tokens": int(probes.sum()) * cfg.probe_tokens,
        "num_probes": int(probes.sum()),
        "fixed_length_tokens": int(length.sum()),
    }
    accounting["saving"] = 1.0 - (accounting["reasoning_tokens"] + accounting["probe_tokens"]) / max(
        1, accounting["fixed_length_tokens"]
    )
    mode = f", early exit every {cfg.segment_tokens} tokens" if cfg.early_exit else ""
    return Workload(
        arrival_s=start[row_q],
        num_prompt_tokens=np.asarray(rows.prompt, np.int64),
        num_output_tokens=np.asarray(rows.output, np.int64),
        hash_ids=rows.hash_ids,
        hash_block_tokens=cfg.hash_block_tokens,
        after=after,
        source=f"reasoning(best-of-{cfg.samples}{mode}, {q} questions, seed={total_seed})",
        meta={
            "seed": total_seed,
            "num_questions": q,
            "notices": found,
            "reasoning": accounting,
            "question": row_q,
            "sample": np.asarray(rows.sample, np.int64),
            "probe": np.asarray(rows.is_probe, bool),
            "length": length,
            "long": is_long,
            "u": u,
            "stop": stop,
            "probes": probes,
        },
    )


class _Rows:
    """The requests, built sample by sample in send order (a sample's chain is contiguous)."""

    def __init__(self, cfg: ReasoningWorkload) -> None:
        self.cfg = cfg
        self.unit = cfg.hash_block_tokens
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.hash_ids: list[tuple[int, ...]] = []
        self.question: list[int] = []
        self.sample: list[int] = []
        self.is_probe: list[bool] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self._next_id = 0  # ids are handed out in order: equal ids mean equal content

    def _fresh(self, count: int) -> list[int]:
        ids = list(range(self._next_id, self._next_id + count))
        self._next_id += count
        return ids

    def add_sample(self, s: int, q: int, prompt: int, length: int, stop: int) -> None:
        cfg, unit = self.cfg, self.unit
        if s == 0 or self.question[-1] != q:  # the question's prompt units, shared by its samples
            self._question_ids = self._fresh(prompt // unit)
        stream = self._question_ids + self._fresh((prompt + stop) // unit - prompt // unit)  # full units
        k = cfg.segment_tokens if cfg.early_exit else stop
        done, prev = 0, -1
        while done < stop:
            out = min(k, stop - done)
            self._add(s, q, prompt + done, out, stream, prev)
            prev = len(self.prompt) - 1
            done += out
            if done < length:  # a probe after a segment that ends before the reasoning does
                self._add(s, q, prompt + done, cfg.probe_tokens, stream, prev, probe=True)
                prev = len(self.prompt) - 1

    def _add(
        self, s: int, q: int, stream_len: int, out: int, stream: list[int], prev: int, probe: bool = False
    ) -> None:
        full = stream_len // self.unit
        total = stream_len + (self.cfg.probe_prompt_tokens if probe else 0)
        self.hash_ids.append(tuple(stream[:full] + self._fresh(-(-total // self.unit) - full)))
        self.prompt.append(total)
        self.output.append(out)
        self.question.append(q)
        self.sample.append(s)
        self.is_probe.append(probe)
        if prev >= 0:
            self.src.append(prev)
            self.dst.append(len(self.prompt) - 1)
