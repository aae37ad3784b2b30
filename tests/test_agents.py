"""Agent task graphs: calls released when their predecessors and tool waits are done, the
end-to-end task latency in the summary."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from servesim.config import AgentWorkload, EngineConfig
from servesim.metrics.tasks import task_latencies, task_summary
from servesim.perf.base import ConstantPerfModel
from servesim.sim import run_engine
from servesim.workload import load_workload

NODES = [
    {"name": "plan", "prompt_len": {"value": 300}, "output_len": {"value": 10}},
    {"name": "search", "kind": "tool", "after": ["plan"], "duration": {"kind": "constant", "mean_s": 2}},
    {"name": "fetch", "kind": "tool", "after": ["plan"], "duration": {"kind": "constant", "mean_s": 5}},
    {
        "name": "answer",
        "after": ["search", "fetch"],
        "prompt_len": {"value": 800},
        "output_len": {"value": 20},
    },
    {"name": "check", "after": ["plan"], "prompt_len": {"value": 200}, "output_len": {"value": 5}},
]


def agents(**kw) -> AgentWorkload:
    return AgentWorkload.model_validate({"nodes": NODES, **kw})


def test_calls_wait_for_predecessors_and_tools():
    """Constant 10 ms steps: check is sent when plan finishes, answer 5 s later (the longer
    of the two tool waits), and a task's latency is from its start to its last finish."""
    wl = load_workload(agents(num_tasks=4, arrival={"process": "constant", "rate": 0.05}))
    wl.validate()
    run = run_engine(
        wl,
        EngineConfig(max_num_seqs=16, max_num_batched_tokens=4096),
        ConstantPerfModel(0.01),
        num_gpu_blocks=4000,
        max_model_len=4096,
    )
    rec, steps = run.records, [wl.meta["steps"][k] for k in wl.meta["step"]]
    task = wl.after.task
    for t in range(4):
        row = {s: i for i, s in enumerate(steps) if task[i] == t}
        plan_done = rec.finished_s[row["plan"]]
        assert rec.arrival_s[row["plan"]] == pytest.approx(20.0 * (t + 1))
        assert rec.arrival_s[row["check"]] == pytest.approx(plan_done, abs=1e-12)
        assert rec.arrival_s[row["answer"]] == pytest.approx(plan_done + 5.0, abs=1e-12)
    lat = task_latencies(rec, task, wl.after.task_start_s)
    last = np.array([rec.finished_s[task == t].max() for t in range(4)])
    np.testing.assert_allclose(lat, last - 20.0 * np.arange(1, 5))
    # Critical path: plan (prefill + 10 tokens) + 5 s + answer (prefill + 20 tokens), 10 ms a step.
    assert lat.min() >= 5.0 + (10 + 20) * 0.01 - 1e-9
    s = task_summary(rec, task, wl.after.task_start_s)
    assert s["num_tasks"] == s["num_finished"] == 4 and s["requests_per_task"] == 3.0
    assert s["latency_s"]["max"] == pytest.approx(lat.max())


def test_an_unfinished_call_leaves_its_task_without_latency():
    wl = load_workload(agents(num_tasks=2, arrival={"process": "constant", "rate": 0.05}))
    run = run_engine(
        wl,
        EngineConfig(max_num_seqs=16, max_num_batched_tokens=4096),
        ConstantPerfModel(0.01),
        num_gpu_blocks=4000,
        max_model_len=4096,
        until_s=21.0,
    )
    lat = task_latencies(run.records, wl.after.task, wl.after.task_start_s)
    assert np.isnan(lat).all()  # task 0's answer is not sent before 25 s


@pytest.mark.parametrize(
    "nodes,needle",
    [
        ([{"name": "a", "after": ["b"]}, {"name": "b", "after": ["a"]}], "cycle"),
        ([{"name": "a", "after": ["zz"]}], "no step named 'zz'"),
        ([{"name": "a", "kind": "tool"}], "at least one llm step"),
        ([{"name": "a"}, {"name": "a"}], "names must differ"),
    ],
)
def test_bad_graphs(nodes, needle):
    with pytest.raises(ValidationError, match=needle):
        AgentWorkload.model_validate({"nodes": nodes})
