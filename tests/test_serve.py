"""`servesim serve`: the OpenAI API over a live simulation, through the official client.

One server per module (a `servesim serve` subprocess on 127.0.0.1, port 0, its bound port read
from its start line), shut down after. Every request is bounded in size and time.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from servesim.engine.kv_cache import KVCacheManager  # noqa: E402
from servesim.engine.request import ReqStatus, Request  # noqa: E402
from servesim.engine.scheduler import Scheduler, SchedulerConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_serve", ROOT / "benchmarks" / "bench_serve.py")
bench = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules["bench_serve"] = bench  # its dataclass looks its module up
_spec.loader.exec_module(bench)  # type: ignore[union-attr]

MODEL = bench.MODEL
SCENARIO = (
    "model: {name: meta-llama/Llama-3.1-8B}\nhardware: {gpu: H100-SXM}\nengine: {max_model_len: 4096}\n"
)


def start(path: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """`servesim serve path --port 0`; returns the process and its base URL once healthy."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servesim",
            "serve",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-progress",
            *args,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the start line, or an error
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"the server did not start: {line}{proc.stderr.read()}")
    base = f"http://127.0.0.1:{m.group(1)}"
    asyncio.run(bench.wait_healthy(base, 120.0))  # a hang guard, not a timing goal
    return proc, base


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("serve") / "scenario.yaml"
    path.write_text(SCENARIO)
    proc, base = start(path)
    try:
        yield base
    finally:
        stop(proc)


@pytest.fixture
def client(server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=30) as c:
        yield c


def metrics(base: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, parsed by prometheus_client's own parser."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(m: dict, name: str, **labels: str) -> float:
    labels.setdefault("model_name", MODEL)
    return m[(name, tuple(sorted(labels.items())))]


# ------------------------------------------------------------------ the OpenAI API


def test_completion_whole(client) -> None:
    raw = client.completions.with_raw_response.create(model=MODEL, prompt="a b c d e f g h", max_tokens=7)
    out = raw.parse()
    assert raw.headers["x-servesim-tokenizer"] in ("estimate:chars/4", "tiktoken:cl100k_base")
    assert out.usage.completion_tokens == 7 and len(out.choices) == 1
    assert out.choices[0].finish_reason == "length"
    if raw.headers["x-servesim-tokenizer"] == "estimate:chars/4":
        assert out.usage.prompt_tokens == 4  # ceil(15 characters / 4)
    assert len(re.findall(r"\w+", out.choices[0].text)) == 7  # one placeholder word a token


def test_completion_token_ids_and_default_length(client) -> None:
    out = client.completions.create(model=MODEL, prompt=[5] * 123)
    assert out.usage.prompt_tokens == 123
    assert out.usage.completion_tokens == 16  # OpenAI's default max_tokens for completions


def test_chat_streamed_with_usage_and_n(client) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=5,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    tokens = {0: 0, 1: 0}
    finish = {}
    usage = None
    for ch in stream:
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.content:
                tokens[c.index] += 1
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert tokens == {0: 5, 1: 5} and finish == {0: "length", 1: "length"}
    assert usage is not None and usage.completion_tokens == 10


def test_models_and_health(server, client) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    assert httpx.get(f"{server}/health", timeout=5).status_code == 200


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "no-such-model", "prompt": "x"}, 404, "model"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 4096}, 400, "max_tokens"),  # 1 + 4096 > 4096
        ({"model": MODEL, "prompt": [1] * 4000, "max_tokens": 97}, 400, "max_tokens"),
        ({"model": MODEL, "prompt": "x", "n": 0}, 400, "n"),
        ({"model": MODEL, "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
        ({"model": MODEL}, 400, "prompt"),
        ({"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"model": MODEL, "prompt": ""}, 400, "prompt"),  # vLLM: the decoder prompt cannot be empty
        ({"model": MODEL, "prompt": ["", "x"]}, 400, "prompt"),
        ({"model": MODEL, "prompt": [1, 2, 128256]}, 400, "prompt"),  # Llama-3.1's vocabulary: 0..128255
        ({"model": MODEL, "prompt": [-1]}, 400, "prompt"),
        ({"model": MODEL, "prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ({"model": MODEL, "prompt": "x", "temperature": -1}, 400, "temperature"),
        ({"model": MODEL, "prompt": "x", "top_p": 0}, 400, "top_p"),
        ({"model": MODEL, "prompt": "x", "top_k": 2.5}, 400, "top_k"),
        ({"model": MODEL, "prompt": "x", "stop": 3}, 400, "stop"),
        ({"model": MODEL, "prompt": "x", "max_tokens": 2, "min_tokens": 5}, 400, "min_tokens"),
        ({"model": MODEL, "prompt": "x", "logprobs": 1000000}, 400, "logprobs"),  # vLLM's max: 20
        ({"model": MODEL, "prompt": "x", "logprobs": "all"}, 400, "logprobs"),
    ],
)
def test_bad_requests_get_openai_errors(server, body, status, param) -> None:
    r = httpx.post(f"{server}/v1/completions", json=body, timeout=10)
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and err["code"] == status and err["message"]


def test_a_body_that_is_not_json_by_its_content_type_is_400(server) -> None:
    r = httpx.post(f"{server}/v1/completions", data={"model": MODEL, "prompt": "x"}, timeout=10)
    assert r.status_code == 400
    assert "Content-Type application/x-www-form-urlencoded" in r.json()["error"]["message"]
    r = httpx.post(
        f"{server}/v1/completions",
        content=b'{"model": "%s", "prompt": "x", "max_tokens": 2}' % MODEL.encode(),
        headers={"content-type": "application/json; charset=utf-8"},
        timeout=10,
    )
    assert r.status_code == 200


def test_bad_json_and_unknown_route(server, client) -> None:
    r = httpx.post(f"{server}/v1/chat/completions", content=b"{not json", timeout=10)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    assert httpx.get(f"{server}/v1/nothing", timeout=10).status_code == 404
    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * 16000}], max_tokens=100
        )
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")


# ------------------------------------------------------------------ metrics and aborts


def test_metrics_parse_and_count(server, client) -> None:
    before = metrics(server)
    for n_prompt in (100, 300):
        client.completions.create(model=MODEL, prompt=[3] * n_prompt, max_tokens=9)
    after = metrics(server)
    assert value(after, "vllm:prompt_tokens_total") - value(before, "vllm:prompt_tokens_total") == 400
    assert value(after, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total") == 18
    for name in ("vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count"):
        assert value(after, name) - value(before, name) == 2
    # 8 gaps a request; the deprecated alias observes the same samples
    for name in ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"):
        assert value(after, name) - value(before, name) == 16
    # one release a token here (one token a step); each is observed for how late it went out
    name = "servesim:token_release_lag_seconds_count"
    assert value(after, name) - value(before, name) == 18
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    ):
        assert value(after, name, engine="0") == 0.0
    assert (
        value(after, "vllm:request_success_total", finished_reason="length")
        - value(before, "vllm:request_success_total", finished_reason="length")
        == 2
    )
    # vLLM's phases of each finished request: queue, prefill, decode; inference = prefill + decode
    moved = {
        ph: [
            value(after, f"vllm:request_{ph}_time_seconds_{k}")
            - value(before, f"vllm:request_{ph}_time_seconds_{k}")
            for k in ("count", "sum")
        ]
        for ph in ("queue", "prefill", "decode", "inference")
    }
    assert all(count == 2 for count, _ in moved.values())
    assert moved["queue"][1] >= 0 and moved["prefill"][1] > 0 and moved["decode"][1] > 0
    assert moved["inference"][1] == pytest.approx(moved["prefill"][1] + moved["decode"][1], rel=1e-9)
    name = "vllm:e2e_request_latency_seconds_sum"
    e2e = value(after, name) - value(before, name)
    assert moved["queue"][1] + moved["inference"][1] <= e2e + 1e-9
    # both prompts were looked up in the prefix cache, once each
    q = "vllm:prefix_cache_queries_total"
    assert value(after, q, engine="0") - value(before, q, engine="0") == 400


def test_prefix_cache_hits_move(server, client) -> None:
    """The same prompt twice: the second reuses the first's full blocks."""
    before = metrics(server)
    for _ in range(2):
        client.completions.create(model=MODEL, prompt=[11] * 333, max_tokens=2)
    after = metrics(server)
    queries = value(after, "vllm:prefix_cache_queries_total", engine="0") - value(
        before, "vllm:prefix_cache_queries_total", engine="0"
    )
    hits = value(after, "vllm:prefix_cache_hits_total", engine="0") - value(
        before, "vllm:prefix_cache_hits_total", engine="0"
    )
    assert queries == 666
    assert 0 < hits <= 332 and hits % 16 == 0  # whole blocks of the first prompt (block size 16)
    assert value(after, "vllm:num_preemptions_total", engine="0") == 0  # plenty of KV here


def wait_idle(base: str, timeout_s: float = 120.0) -> dict:
    """Poll until the engine holds no request and no KV block. ``timeout_s`` only guards
    against a hang (the abort frees the blocks within a step); it is not a timing goal."""
    end = time.perf_counter() + timeout_s
    while True:
        m = metrics(base)
        if (
            value(m, "vllm:kv_cache_usage_perc", engine="0") == 0
            and value(m, "vllm:num_requests_running", engine="0") == 0
        ):
            return m
        assert time.perf_counter() < end, "the aborted request still holds KV blocks"
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_aborts_and_frees_kv(server, stream) -> None:
    body = {"model": MODEL, "prompt": [9] * 2000, "max_tokens": 2000, "stream": stream}  # ~12 s to finish
    before = metrics(server)
    with httpx.Client(timeout=httpx.Timeout(10.0, read=0.5)) as c:
        if stream:
            with c.stream("POST", f"{server}/v1/completions", json=body) as r:
                lines = r.iter_lines()  # kept: closing the generator closes the connection
                num_chunks = 0
                while num_chunks < 3:
                    num_chunks += next(lines).startswith("data: {")
                m = metrics(server)
                assert value(m, "vllm:kv_cache_usage_perc", engine="0") > 0
                assert value(m, "vllm:num_requests_running", engine="0") == 1
        else:
            with pytest.raises(httpx.ReadTimeout):
                c.post(f"{server}/v1/completions", json=body)
    after = wait_idle(server)
    # aborted: no finish observed, one abort counted
    for name in ("vllm:e2e_request_latency_seconds_count", "vllm:request_decode_time_seconds_count"):
        assert value(after, name) == value(before, name)
    for reason, moved in (("abort", 1), ("length", 0)):
        assert (
            value(after, "vllm:request_success_total", finished_reason=reason)
            - value(before, "vllm:request_success_total", finished_reason=reason)
            == moved
        )


# ------------------------------------------------------------------ timing vs the offline simulation


@pytest.mark.slow
def test_tokens_never_precede_the_offline_simulation(server) -> None:
    """At --speed 1, one request at a time, streamed through the openai client, timed from the
    instant the client hands each request to its transport (``bench.drive``): every request
    streams all its tokens, and neither its first nor its last token reaches the client before
    the offline simulation of the same arrivals says it is made (2 ms slack for the clocks).
    Only lower bounds: a loaded machine makes tokens later, never earlier, so this cannot fail
    for load; unpaced tokens (all at once) would fail it. The upper bounds (how close to the
    simulation the tokens arrive) are timing goals, in ``benchmarks/bench_serve.py --paced``."""
    sent_at, prompts, outputs = bench.PACED_SENT_AT, bench.PACED_PROMPTS, bench.PACED_OUTPUTS
    got = asyncio.run(bench.drive(server, sent_at, prompts, outputs, timeout_s=120))
    assert [m.num_tokens for m in got] == outputs.tolist()
    ttft, tpot = bench.predict(bench.SCENARIO, np.array([m.sent_s for m in got]), prompts, outputs)
    ttft_m = np.array([m.ttft_s for m in got])
    last_m = ttft_m + np.array([m.tpot_s for m in got]) * (outputs - 1)
    assert (ttft_m - ttft).min() >= -0.002, ttft_m - ttft
    assert (last_m - (ttft + tpot * (outputs - 1))).min() >= -0.002, (last_m, ttft, tpot)


# ------------------------------------------------------------------ the engine hook


def test_abort_request_frees_blocks_between_steps() -> None:
    kv = KVCacheManager(11, 16, True, 4096)
    s = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=4096), kv)
    a, b = Request(0, 0.0, 40, 10), Request(1, 0.0, 100, 10)
    s.add_request(a)
    s.add_request(b)
    out = s.schedule()  # a: 40 tokens (3 blocks), b: a 24-token chunk (2 blocks)
    s.update_from_output(out, 0.01)
    assert kv.num_free_blocks == 10 - 5
    assert s.abort_request(b) and b.status == ReqStatus.FINISHED
    assert kv.num_free_blocks == 10 - 3 and s.running == [a]
    waiting = Request(2, 0.0, 16, 4)
    s.add_request(waiting)
    assert s.abort_request(waiting) and len(s.waiting) == 0
    assert not s.abort_request(b)  # already gone
    assert s.abort_request(a) and kv.num_free_blocks == 10 and kv.usage == 0.0


# ------------------------------------------------------------------ the command line


def test_cli_refuses_a_taken_port_and_a_bad_scenario(tmp_path) -> None:
    from typer.testing import CliRunner

    from servesim.cli import app

    runner = CliRunner()
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = runner.invoke(app, ["serve", str(path), "--port", str(port), "--no-progress"])
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit)
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in r.output and "in use" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO + "engine_typo: 1\n")
    r = runner.invoke(app, ["serve", str(bad), "--port", "0", "--no-progress"])
    assert r.exit_code == 2 and "engine_typo" in r.output and "bad.yaml" in r.output
    r = runner.invoke(app, ["serve", str(path), "--speed", "0", "--port", "0", "--no-progress"])
    assert r.exit_code == 2 and "--speed: expected a finite number > 0" in r.output
    r = runner.invoke(
        app,
        [
            "serve",
            str(ROOT / "examples" / "disaggregated.yaml"),
            "--port",
            "0",
            "--set",
            "cluster.migration.enabled=true",
            "--no-progress",
        ],
    )
    assert r.exit_code == 2 and "cluster.migration.enabled" in r.output


@pytest.mark.slow
def test_disaggregated_cluster_serves_through_its_router(tmp_path) -> None:
    proc, base = start(ROOT / "examples" / "disaggregated.yaml")
    try:
        with openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=30) as c:
            for _ in range(3):
                out = c.completions.create(model="meta-llama/Llama-3.1-8B", prompt=[4] * 500, max_tokens=6)
                assert out.usage.completion_tokens == 6
        m = metrics(base)
        # two prefill replicas and one decode replica, each its own series; all idle again
        for engine in ("0", "1", "2"):
            assert value(m, "vllm:kv_cache_usage_perc", engine=engine) == 0.0
        assert value(m, "vllm:time_to_first_token_seconds_count") == 3
    finally:
        stop(proc)


# ------------------------------------------------------------------ the live driver, in process


def test_live_simulation_makes_the_offline_decisions_at_speed() -> None:
    """Requests entered live at --speed 20 get, in simulated time, exactly the token times the
    offline engine run gives the same arrivals (the live driver steps the same engine; the
    offline run uses the fast engine, tests/test_differential.py holds the two together), and
    no request is done before the simulated clock (wall time x 20) reaches its finish."""
    from servesim.config import scenario_from_dict
    from servesim.serve.server import live_sim

    speed = 20.0
    sim = live_sim(scenario_from_dict(bench.SCENARIO), speed)
    prompts, outputs = [300, 2500, 900, 60], [40, 30, 50, 20]

    received: list[float] = []

    async def main() -> list:
        task = asyncio.ensure_future(sim.run())
        handles = []
        for k, (p, o) in enumerate(zip(prompts, outputs)):
            handles.append(sim.submit([(p, k)], o))
            await asyncio.sleep(0.004)  # 80 ms simulated apart: they overlap in the batch
        for h in handles:
            done = False
            while not done:
                _, _, done = await asyncio.wait_for(h.queue.get(), 10)
            received.append(sim.now())
        sim.close()
        await task
        return [h.streams[0] for h in handles]

    streams = asyncio.run(main())
    arrivals = np.array([s.arrival_s for s in streams])
    ttft, tpot = bench.predict(bench.SCENARIO, arrivals, np.array(prompts), np.array(outputs))
    for s, t, p in zip(streams, ttft, tpot):
        r = s.req  # its times are the step ends the engine gave it
        assert r.first_token_s - r.arrival_s == pytest.approx(t, abs=1e-9)
        assert (r.finished_s - r.first_token_s) / (r.num_output_tokens - 1) == pytest.approx(p, abs=1e-9)
        assert s.num_sent == s.req.max_tokens
    assert all(got >= s.req.finished_s for got, s in zip(received, streams))
    assert sim.cluster.replicas[0].kv.usage == 0.0 and not sim.handles


def test_preemptions_are_counted() -> None:
    """A replica of 40 KV blocks (640 tokens) and four requests that grow to 25 blocks each:
    vLLM V1 preempts the newest; /metrics counts each preemption, every request still finishes
    and its phases are observed."""
    from servesim.config import scenario_from_dict
    from servesim.serve.prom import ServeMetrics
    from servesim.serve.server import live_sim

    sc = scenario_from_dict(
        {**bench.SCENARIO, "engine": {"max_model_len": 512, "num_gpu_blocks_override": 40}}
    )
    sim = live_sim(sc, speed=50.0)
    prom = ServeMetrics(sim, MODEL)

    async def main() -> None:
        task = asyncio.ensure_future(sim.run())
        handles = [sim.submit([(200, k)], 200) for k in range(4)]
        for h in handles:
            done = False
            while not done:
                _, _, done = await asyncio.wait_for(h.queue.get(), 30)
        sim.close()
        await task

    asyncio.run(main())
    m = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for fam in text_string_to_metric_families(prom.render().decode())
        for x in fam.samples
    }
    preempted = value(m, "vllm:num_preemptions_total", engine="0")
    assert preempted == sim.cluster.replicas[0].scheduler.num_preemptions > 0
    assert value(m, "vllm:request_success_total", finished_reason="length") == 4
    assert value(m, "vllm:request_queue_time_seconds_count") == 4
    # a preempted request's prompt is counted at its first admission only
    assert value(m, "vllm:prefix_cache_queries_total", engine="0") == 800


@pytest.mark.parametrize("abort_after_tokens", [0, 1, 3])
def test_aborts_in_a_disaggregated_cluster_free_every_replica(abort_after_tokens) -> None:
    """Aborted while prefilling (0 tokens), on the KV link or just queued at the decode replica
    (1: the first token comes from the prefill replica), or decoding (3): in every case the
    request leaves the cluster and every replica's KV blocks and load counts return to zero."""
    from servesim.config import load_scenario
    from servesim.serve.server import live_sim

    sim = live_sim(load_scenario(ROOT / "examples" / "disaggregated.yaml"), speed=1.0)
    cluster = sim.cluster

    async def main() -> None:
        task = asyncio.ensure_future(sim.run())
        h = sim.submit([(3000, 1)], 500)
        got = 0
        while got < abort_after_tokens:
            _, n, _ = await asyncio.wait_for(h.queue.get(), 10)
            got += n
        sim.abort(h)
        for _ in range(200):  # until it has landed wherever it was going, and been dropped
            await asyncio.sleep(0.01)
            if not cluster.live and not cluster.aborting:
                break
        sim.close()
        await task

    asyncio.run(main())
    assert not cluster.live and not cluster.aborting and not cluster.handoff
    assert cluster.outstanding == [0] * len(cluster.replicas)
    assert all(
        rep.kv.usage == 0.0 and not rep.scheduler.running and not rep.scheduler.waiting
        for rep in cluster.replicas
    )
