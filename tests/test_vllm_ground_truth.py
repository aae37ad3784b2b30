"""Ground truth: servesim's schedulers against schedules recorded from the real vLLM V1 engine.

Each fixture in ``tests/fixtures/vllm/`` (see its README.md) holds every step of a vLLM
0.32 (CPU build, synchronous V1 ``Scheduler``, FCFS) run over 40 requests that all
arrive at t=0: which requests were scheduled for how many tokens on top of how many
computed ones, who was preempted, the queue lengths and KV usage right after
``schedule()``. Here the same workload (request ``r{i}`` = row i of ``runs[0].requests``,
in that order; prefix groups from ``prefix_trace.csv`` for prefix.json) runs through
servesim with the same engine knobs (the fixture's ``engine`` section: block size,
num_gpu_blocks, max_num_seqs, max_num_batched_tokens, max_model_len, chunked prefill,
prefix caching; no long-prefill cap, no CPU overhead):

* the reference ``Scheduler``, stepped by hand, must reproduce every step exactly;
* the fast ``LazyScheduler`` (pooled decodes are not listed per request) must reproduce
  every step's totals, queues, KV usage, preemptions and each request's first-token and
  finish steps;
* ``run_engine`` with a constant step time must give identical records with both engines
  (this also exercises the lazy engine's pure-decode skip-ahead);
* ``run_engine`` end to end (arrivals at one instant are queued before the engine steps)
  matches vLLM's per-step totals and per-request first-token and finish steps.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from servesim.config import EngineConfig
from servesim.engine.kv_cache import KVCacheManager
from servesim.engine.kv_counting import CountingKVCache
from servesim.engine.lazy import LazyScheduler
from servesim.engine.request import Request
from servesim.engine.scheduler import Scheduler, SchedulerConfig
from servesim.perf.base import ConstantPerfModel
from servesim.sim import make_requests, run_engine
from servesim.workload.base import Workload

FIXTURES_DIR = Path(__file__).parent / "fixtures" / "vllm"
FIXTURES = ["chunked", "nochunk", "preempt", "prefix", "block16"]

# (request -> (tokens, computed_before)), sorted preempted ids, num_waiting, num_running, kv_usage
StepKey = tuple[dict[str, tuple[int, int]], list[str], int, int, float]


def _rid(key: str) -> str:
    """vLLM appends a random ``-xxxxxxxx`` suffix to request ids: ``r7-1a2b3c4d`` -> ``r7``."""
    return key.split("-")[0]


def _name(r: Request) -> str:
    return f"r{r.idx}"


@dataclass(frozen=True)
class Fixture:
    name: str
    data: dict
    workload: Workload
    engine: EngineConfig
    num_gpu_blocks: int
    max_model_len: int

    @property
    def run(self) -> dict:
        return self.data["runs"][0]

    @property
    def steps(self) -> list[dict]:
        return self.run["steps"]

    @property
    def requests(self) -> list[dict]:
        return self.run["requests"]


@cache
def load(name: str) -> Fixture:
    data = json.loads((FIXTURES_DIR / f"{name}.json").read_text())
    eng = data["engine"]
    reqs = data["runs"][0]["requests"]
    assert [r["id"] for r in reqs] == [f"r{i}" for i in range(len(reqs))]
    group = None
    prefix_len = 0
    if data["workload"]["trace"]:
        with open(FIXTURES_DIR / data["workload"]["trace"], newline="") as f:
            rows = list(csv.DictReader(f))
        assert [
            (int(row["num_prompt_tokens"]), int(row["num_output_tokens"]), row["prefix_group"])
            for row in rows
        ] == [(r["num_prompt_tokens"], r["num_output_tokens"], r["prefix_group"]) for r in reqs]
        names = [row["prefix_group"] for row in rows]
        ids = {g: i for i, g in enumerate(dict.fromkeys(g for g in names if g))}  # "" = no group
        group = np.asarray([ids[g] if g else -1 for g in names], np.int64)
        prefix_len = data["workload"]["prefix_len"]
    wl = Workload(
        arrival_s=np.zeros(len(reqs)),
        num_prompt_tokens=np.asarray([r["num_prompt_tokens"] for r in reqs], np.int64),
        num_output_tokens=np.asarray([r["num_output_tokens"] for r in reqs], np.int64),
        prefix_group=group,
        prefix_len=prefix_len,
        source=name,
    )
    wl.validate()
    engine = EngineConfig(
        block_size=eng["block_size"],
        max_num_seqs=eng["max_num_seqs"],
        max_num_batched_tokens=eng["max_num_batched_tokens"],
        enable_chunked_prefill=eng["enable_chunked_prefill"],
        enable_prefix_caching=eng["enable_prefix_caching"],
        long_prefill_token_threshold=0,
        cpu_overhead_s=0,
    )
    return Fixture(name, data, wl, engine, eng["num_gpu_blocks"], eng["max_model_len"])


# --------------------------------------------------------------------------- what vLLM did


def vllm_steps(run: dict) -> list[StepKey]:
    return [
        (
            {_rid(k): (v["tokens"], v["computed_before"]) for k, v in s["scheduled"].items()},
            sorted(_rid(p) for p in s["preempted"]),
            s["num_waiting"],
            s["num_running"],
            s["kv_usage"],
        )
        for s in run["steps"]
    ]


def vllm_milestones(fx: Fixture) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Per request: the step that computes its last prompt token (first token), its last
    scheduled step (finish), and how often it was preempted, all from the step schedules."""
    prompt = {r["id"]: r["num_prompt_tokens"] for r in fx.requests}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    preemptions = dict.fromkeys(prompt, 0)
    for i, s in enumerate(fx.steps):
        for k, v in s["scheduled"].items():
            r = _rid(k)
            if r not in first and v["computed_before"] + v["tokens"] == prompt[r]:
                first[r] = i
            last[r] = i
        for p in s["preempted"]:
            preemptions[_rid(p)] += 1
    return first, last, preemptions


def vllm_totals(fx: Fixture) -> list[tuple[int, int, int]]:
    """Per step (prefill tokens, decode requests, scheduled requests) as servesim's BatchStats
    counts them: a decode is a 1-token step of a request with outputs whose only uncomputed
    token is its newest. (The recorder's own prefill_tokens/decode_reqs split at the prompt
    boundary instead: a resumed request recomputing 3 outputs counts as a decode there.)"""
    num_tokens = {r["id"]: r["num_prompt_tokens"] for r in fx.requests}
    num_out = dict.fromkeys(num_tokens, 0)
    totals = []
    for s in fx.steps:
        prefill = decode = 0
        sampled = []
        for k, v in s["scheduled"].items():
            r = _rid(k)
            n, p = v["tokens"], v["computed_before"]
            if n == 1 and num_out[r] > 0 and p == num_tokens[r] - 1:
                decode += 1
            else:
                prefill += n
            if p + n == num_tokens[r]:
                sampled.append(r)
        for r in sampled:  # the step's sample extends the sequence (partial prefills sample nothing)
            num_tokens[r] += 1
            num_out[r] += 1
        totals.append((prefill, decode, len(s["scheduled"])))
    return totals


# --------------------------------------------------------------------------- servesim, stepped by hand


@dataclass
class Stepped:
    steps: list[StepKey]  # the reference only; the lazy engine lists only individual requests
    totals: list[tuple[int, int, int]]
    first: dict[str, int]
    finish: dict[str, int]
    preemptions: dict[str, int]


def step_engine(fx: Fixture, lazy: bool, max_steps: int = 2000) -> Stepped:
    """Add every request before the first step (as vLLM's recorder does with ``--rate 0``),
    then alternate ``schedule()`` and ``update_from_output()`` until there is no work."""
    eng = fx.engine
    kv = (CountingKVCache if lazy else KVCacheManager)(
        fx.num_gpu_blocks, eng.block_size, eng.enable_prefix_caching, fx.max_model_len
    )
    cfg = SchedulerConfig(
        max_num_seqs=eng.max_num_seqs,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        enable_chunked_prefill=eng.enable_chunked_prefill,
        long_prefill_token_threshold=eng.long_prefill_token_threshold,
        max_model_len=fx.max_model_len,
        scheduler_reserve_full_isl=eng.scheduler_reserve_full_isl,
    )
    sched = LazyScheduler(cfg, kv) if lazy else Scheduler(cfg, kv)
    reqs = make_requests(fx.workload)
    for r in reqs:
        sched.add_request(r)
    res = Stepped([], [], {}, {}, {})
    while sched.has_work():
        i = len(res.totals)
        assert i < max_steps, "servesim does not finish"
        out = sched.schedule()
        # servesim advances num_computed_tokens inside schedule(), as vLLM does.
        scheduled = {
            _name(r): (n, r.num_computed_tokens - n) for r, n in zip(out.reqs, out.num_tokens, strict=True)
        }
        res.steps.append(
            (
                scheduled,
                sorted(_name(r) for r in out.preempted),
                len(sched.waiting),
                len(sched.running),
                kv.usage,
            )
        )
        st = out.stats
        assert st.num_prefill_tokens + st.num_decode_reqs == out.total_tokens
        res.totals.append((st.num_prefill_tokens, st.num_decode_reqs, len(out.reqs) + out.num_pool))
        produced, finished = sched.update_from_output(out, float(i + 1))
        for r in produced:
            res.first.setdefault(_name(r), i)
        for r in finished:
            res.finish[_name(r)] = i
    res.preemptions = {_name(r): r.num_preemptions for r in reqs}
    return res


def _first_diff(ours: list, theirs: list, what: str) -> str | None:
    for i, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return f"{what}: first difference at step {i}:\n  servesim {a}\n  vLLM     {b}"
    if len(ours) != len(theirs):
        return f"{what}: servesim ran {len(ours)} steps, vLLM {len(theirs)}"
    return None


def _check_milestones(fx: Fixture, got: Stepped) -> None:
    first, finish, preemptions = vllm_milestones(fx)
    assert got.first == first, "first-token steps differ"
    assert got.finish == finish, "finish steps differ"
    assert got.preemptions == preemptions, "preemption counts differ"


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_is_self_consistent(name: str) -> None:
    """The fixture's own per-request timings agree with the step schedules the other tests use.

    Every request produced exactly ``num_output_tokens`` tokens (ignore_eos); its first token
    time is the end of the step that computed its last prompt token and its finish time the
    end of its last scheduled step (nearest ``t_end``; steps are >= 13 ms apart, the recorder's
    stamps within 5 ms). chunked.json's two repeats are identical step for step.
    """
    fx = load(name)
    first, finish, _ = vllm_milestones(fx)
    t_end = np.asarray([s["t_end"] for s in fx.steps])
    assert np.min(np.diff(t_end)) > 0.01
    for r in fx.requests:
        assert len(r["token_times_s"]) == r["num_output_tokens"]
        assert r["token_times_s"][0] == pytest.approx(t_end[first[r["id"]]], abs=5e-3)
        assert r["finished_at_s"] == pytest.approx(t_end[finish[r["id"]]], abs=5e-3)
    # Each preemption the log names is a recompute: the request's next chunk starts again
    # from 0 computed tokens (two independent parts of the log: "preempted" and "scheduled").
    restarts = dict.fromkeys((r["id"] for r in fx.requests), 0)
    seen: set[str] = set()
    for st in fx.steps:
        for k, v in st["scheduled"].items():
            r = _rid(k)
            restarts[r] += r in seen and v["computed_before"] == 0
            seen.add(r)
    assert restarts == vllm_milestones(fx)[2]
    if len(fx.data["runs"]) > 1:
        for other in fx.data["runs"][1:]:
            assert vllm_steps(other) == vllm_steps(fx.run)


@pytest.mark.parametrize("name", FIXTURES)
def test_reference_scheduler_matches_vllm_step_by_step(name: str) -> None:
    """The reference ``Scheduler`` reproduces vLLM exactly, step by step.

    At every step: the dict request -> (tokens scheduled, computed tokens before the step),
    the preempted ids, len(waiting) and len(running) right after schedule(), the KV usage
    (``1 - free / (num_gpu_blocks - 1)``, exact float), and the number of steps. Knobs per
    fixture (engine section): chunked = block 128, 8192 blocks, 16 seqs, 512 tokens, chunked
    prefill, no prefix caching; nochunk = chunked prefill off, max_model_len and budget 1024;
    preempt = 20 KV blocks (6 preemptions); prefix = prefix caching on, 4 groups sharing 256
    tokens; block16 = block size 32 with prefix caching on.
    """
    fx = load(name)
    got = step_engine(fx, lazy=False)
    diff = _first_diff(got.steps, vllm_steps(fx.run), name)
    assert diff is None, diff
    assert got.totals == vllm_totals(fx)


@pytest.mark.parametrize("name", FIXTURES)
def test_reference_request_milestones_match_vllm(name: str) -> None:
    """Per request, the reference ``Scheduler`` produces the first token and finishes in the
    same step as vLLM, and is preempted as often (knobs as in the step-by-step test)."""
    fx = load(name)
    _check_milestones(fx, step_engine(fx, lazy=False))


@pytest.mark.parametrize("name", FIXTURES)
def test_lazy_scheduler_matches_vllm_step_totals(name: str) -> None:
    """The fast ``LazyScheduler`` (pooled decodes are counted, not listed) matches vLLM per step.

    Compared per step: prefill tokens, decode requests and scheduled requests (servesim's
    BatchStats split, derived for vLLM from its schedule), preempted ids, len(waiting) and
    len(running) after schedule(), exact KV usage, the number of steps; and per request the
    first-token step, the finish step and the number of preemptions. Same knobs as above.
    """
    fx = load(name)
    got = step_engine(fx, lazy=True)
    ours = [(t, s[1], s[2], s[3], s[4]) for t, s in zip(got.totals, got.steps, strict=True)]
    theirs = [(t, s[1], s[2], s[3], s[4]) for t, s in zip(vllm_totals(fx), vllm_steps(fx.run), strict=True)]
    diff = _first_diff(ours, theirs, name)
    assert diff is None, diff
    _check_milestones(fx, got)


@pytest.mark.parametrize("name", FIXTURES)
def test_run_engine_lazy_equals_reference(name: str) -> None:
    """``run_engine`` with the lazy engine (skip-ahead on) and with the reference engine give
    identical per-request records and step series on each fixture's workload and knobs, with
    a constant 1 s step (``ConstantPerfModel``), so every time is a step count."""
    fx = load(name)
    perf = ConstantPerfModel(step_s=1.0)
    ref = run_engine(fx.workload, fx.engine, perf, fx.num_gpu_blocks, fx.max_model_len, reference=True)
    fast = run_engine(fx.workload, fx.engine, perf, fx.num_gpu_blocks, fx.max_model_len, reference=False)
    assert fast.totals.num_run_steps > 0, "the skip-ahead was never used"
    assert ref.totals.num_run_steps == 0
    for col in (
        "first_scheduled_s",
        "first_token_s",
        "finished_s",
        "num_preemptions",
        "num_cached_tokens",
        "num_output_tokens",
        "status",
    ):
        np.testing.assert_array_equal(getattr(fast.records, col), getattr(ref.records, col), err_msg=col)
    assert np.all(np.isfinite(ref.records.finished_s))
    a, b = fast.steps.columns(), ref.steps.columns()
    for col in a:
        np.testing.assert_array_equal(a[col], b[col], err_msg=col)
    assert fast.end_s == ref.end_s


# run_engine submits each request as an ARRIVAL event; Replica.on_arrival starts a step at
# once when the replica is idle, so the first t=0 arrival is scheduled alone before the other
# 39 t=0 arrivals reach the waiting queue. vLLM's recorder (rate 0) adds every request before
# the first schedule(), as test_*_step_by_step do by hand (and then servesim matches).


@pytest.mark.parametrize("name", FIXTURES)
def test_run_engine_matches_vllm(name: str) -> None:
    """End to end: ``run_engine`` (lazy engine, constant 1 s steps) over the fixture's workload,
    all 40 requests arriving at t=0, matches vLLM's per-step totals (prefill tokens, decode
    requests, preemptions, num_running/num_waiting after scheduling, KV usage), its number of
    steps and each request's first-token and finish step. Knobs as in the step-by-step test."""
    fx = load(name)
    run = run_engine(
        fx.workload,
        fx.engine,
        ConstantPerfModel(step_s=1.0),
        fx.num_gpu_blocks,
        fx.max_model_len,
        reference=False,
    )
    c = run.steps.columns()
    nb = fx.num_gpu_blocks
    cols = [
        c[k].tolist()
        for k in (
            "num_prefill_tokens",
            "num_decode_reqs",
            "num_preempted",
            "num_waiting",
            "num_running",
            "kv_blocks_used",
        )
    ]
    ours = [(p, d, k, w, r, 1.0 - (nb - u) / (nb - 1)) for p, d, k, w, r, u in zip(*cols, strict=True)]
    theirs = [
        (t[0], t[1], len(s[1]), s[2], s[3], s[4])
        for t, s in zip(vllm_totals(fx), vllm_steps(fx.run), strict=True)
    ]
    diff = _first_diff(ours, theirs, name + " (prefill tokens, decodes, preempted, waiting, running, kv)")
    assert diff is None, diff
    first, finish, preemptions = vllm_milestones(fx)
    ids = [f"r{i}" for i in range(len(fx.workload))]
    np.testing.assert_array_equal(run.records.first_token_s, [first[r] + 1.0 for r in ids])
    np.testing.assert_array_equal(run.records.finished_s, [finish[r] + 1.0 for r in ids])
    np.testing.assert_array_equal(run.records.num_preemptions, [preemptions[r] for r in ids])
