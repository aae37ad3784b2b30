"""Benchmark: `servesim serve` under load on loopback, against the offline simulation.

Starts ``servesim serve`` (a subprocess on 127.0.0.1, a free port) for Llama-3.1-8B on one
H100, sends Poisson arrivals with the official ``openai`` client (asyncio, streamed
completions, prompts given as token ids so their lengths are exact; ``--max-concurrency``
caps the requests in flight as ``vllm bench serve`` does, and ``--rate inf`` with
``--num-prompts`` makes that a closed loop), and compares each request's measured TTFT and
TPOT with what ``servesim.sim.run_engine`` predicts for the same arrival times and lengths.

Times are taken from the instant the client hands a request to its HTTP transport (an httpx
request hook): before that the ``openai`` client builds the request, and for a prompt of
token ids that takes tens of microseconds a token (its ``maybe_transform`` walks every id),
tens of milliseconds for the prompts here; it is reported apart, as the client's own work.
The HTTP overhead is the median round trip, from that same instant, of a completion of the
median prompt's size that the server refuses at once (unknown model: no simulation), measured
before and after the load; a streamed 1-token request of that size on the idle server, less
its simulated TTFT, gives the overhead of the streamed path with the server's pacing in it.
The server's RSS and ``/health`` are sampled every second; the report gives the RSS after the
first quarter of the run and at the end, and the run fails (exit status 1) when the RSS grew
by more than ``--rss-bound-mib`` (``RSS_BOUND_MIB``) or a health check failed.

    python benchmarks/bench_serve.py --rate 4 --duration 30
    python benchmarks/bench_serve.py --paced   # the timing goals of one request at a time
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "meta-llama/Llama-3.1-8B"
SCENARIO = {"model": {"name": MODEL}, "hardware": {"gpu": "H100-SXM"}, "engine": {"max_model_len": 4096}}
ID_HEADER = "x-bench-request"  # names a request to the hand-off hook
#: The server's RSS may grow by the prefix cache's table of cached blocks, which fills from
#: empty to one entry a KV block (28,478 blocks here; 11 MiB measured in process, after about
#: 600 requests of these lengths), plus 2 MiB; past that it is flat (about 1 MiB over 2,100 more).
RSS_BOUND_MIB = 13.0


@dataclass
class Measured:
    sent_s: float  # when the request was handed to the HTTP transport, since the first send
    build_s: float  # the client's building of the request, before that
    ttft_s: float  # from the hand-off
    tpot_s: float  # mean gap after the first token (NaN with one token)
    num_tokens: int


def arrivals(
    rate: float, duration_s: float, seed: int = 0, num_prompts: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poisson arrival times over ``duration_s`` (all at 0 for an infinite rate), at most
    ``num_prompts`` of them; prompt and output lengths (lognormal, shaped like the Azure
    conversation trace, capped to keep each request under a few seconds)."""
    rng = np.random.default_rng(seed)
    if math.isinf(rate):
        if num_prompts is None:
            raise ValueError("an infinite rate needs a number of prompts")
        t = np.zeros(num_prompts)
    else:
        gaps = rng.exponential(1 / rate, size=int(rate * duration_s * 2) + 8)
        t = np.cumsum(gaps) - gaps[0]
        t = t[t < duration_s][:num_prompts]
    prompts = np.clip(rng.lognormal(6.6, 0.8, t.size), 16, 3000).astype(int)
    outputs = np.clip(rng.lognormal(4.5, 0.7, t.size), 2, 400).astype(int)
    return t, prompts, outputs


class HandOff:
    """An httpx request hook: the instant each named request goes to the transport."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    async def __call__(self, request: Any) -> None:
        key = request.headers.get(ID_HEADER)
        if key is not None:
            self.at[key] = time.perf_counter()


def openai_client(base_url: str, timeout_s: float) -> tuple[Any, HandOff]:
    """The official async client (its own httpx defaults) with the hand-off hook."""
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    hook = HandOff()
    http = DefaultAsyncHttpxClient(event_hooks={"request": [hook]}, timeout=timeout_s)
    return AsyncOpenAI(
        base_url=f"{base_url}/v1", api_key="none", max_retries=0, timeout=timeout_s, http_client=http
    ), hook


async def drive(
    base_url: str,
    sent_at: np.ndarray,
    prompts: np.ndarray,
    outputs: np.ndarray,
    timeout_s: float = 120.0,
    max_concurrency: int | None = None,
) -> list[Measured]:
    """Send request i at ``sent_at[i]`` (seconds from now; with ``max_concurrency``, once one
    of that many slots is free too), streamed; time its tokens."""
    client, hook = openai_client(base_url, timeout_s)
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext()
    t0 = time.perf_counter() + 0.05

    async def one(i: int) -> Measured:
        await asyncio.sleep(max(0.0, t0 + float(sent_at[i]) - time.perf_counter()))
        async with slots:
            start = time.perf_counter()
            stream = await client.completions.create(
                model=MODEL,
                prompt=[i % 50000 + 1] * int(prompts[i]),
                max_tokens=int(outputs[i]),
                stream=True,
                extra_headers={ID_HEADER: str(i)},
            )
            times = []
            async for ch in stream:
                if ch.choices and ch.choices[0].text:
                    times.append(time.perf_counter())
        sent = hook.at.pop(str(i))
        tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
        return Measured(sent - t0, sent - start, times[0] - sent, tpot, len(times))

    try:
        return list(await asyncio.gather(*(one(i) for i in range(len(sent_at)))))
    finally:
        await client.close()


async def http_overhead_s(base_url: str, num_prompt_tokens: int, n: int = 10) -> float:
    """The HTTP path's own latency: the median round trip, from the hand-off, of a streamed
    completion of that size that the server refuses at once (an unknown model: 404)."""
    from openai import NotFoundError

    client, hook = openai_client(base_url, 10.0)
    try:
        rtts = []
        for k in range(n):
            try:
                await client.completions.create(
                    model="no-such-model",
                    prompt=[1] * num_prompt_tokens,
                    max_tokens=1,
                    stream=True,
                    extra_headers={ID_HEADER: str(k)},
                )
            except NotFoundError:
                rtts.append(time.perf_counter() - hook.at[str(k)])
        return statistics.median(rtts)
    finally:
        await client.close()


async def stream_overhead_s(base_url: str, num_prompt_tokens: int, n: int = 5) -> float:
    """The streamed path's latency with the server's pacing in it: the median TTFT, from the
    hand-off, of a streamed 1-token request of that size, one at a time on the idle server,
    less the simulated TTFT of that lone request."""
    client, hook = openai_client(base_url, 10.0)
    ttft, _ = predict(SCENARIO, np.zeros(1), np.array([num_prompt_tokens]), np.ones(1, np.int64))
    try:
        got = []
        for k in range(n):
            stream = await client.completions.create(
                model=MODEL,
                prompt=[50001 + k] * num_prompt_tokens,
                max_tokens=1,
                stream=True,
                extra_headers={ID_HEADER: str(k)},
            )
            first = None
            async for ch in stream:
                if first is None and ch.choices and ch.choices[0].text:
                    first = time.perf_counter()
            assert first is not None
            got.append(first - hook.at[str(k)] - float(ttft[0]))
            await asyncio.sleep(0.05)
        return statistics.median(got)
    finally:
        await client.close()


def cpu_stretch(busy_s: float = 0.2) -> float:
    """Wall time over CPU time of a busy loop: 1 on an unshared core, k where k runnable
    processes share it. The server's and the client's own work per streamed token (a few ms
    on an unshared core) takes this many times longer here."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < busy_s:
        sum(range(1000))
    return (time.perf_counter() - wall0) / max(time.process_time() - cpu0, 1e-6)


def predict(
    scenario: dict, sent_at: np.ndarray, prompts: np.ndarray, outputs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) per request of the offline simulation of the same arrivals and lengths."""
    from servesim.config import scenario_from_dict
    from servesim.deployment import resolve_deployment
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    dep = resolve_deployment(scenario_from_dict(scenario))
    wl = Workload(
        arrival_s=np.asarray(sent_at, float),
        num_prompt_tokens=np.asarray(prompts, np.int64),
        num_output_tokens=np.asarray(outputs, np.int64),
    )
    rec = run_engine(
        wl, dep.engine, dep.perf, dep.plan.num_gpu_blocks, dep.plan.max_model_len, num_gpus=dep.num_gpus
    ).records
    ttft = rec.first_token_s - rec.arrival_s
    n = rec.num_output_tokens
    tpot = np.where(n > 1, (rec.finished_s - rec.first_token_s) / np.maximum(n - 1, 1), np.nan)
    return ttft, tpot


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(scenario_path: Path, port: int, log_path: Path) -> subprocess.Popen:
    """`servesim serve` on 127.0.0.1:port, its stderr to ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servesim",
                "serve",
                str(scenario_path),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-progress",
            ],
            stderr=log,
        )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(base_url: str, timeout_s: float = 60.0) -> None:
    import httpx

    async with httpx.AsyncClient() as c:
        end = time.perf_counter() + timeout_s
        while time.perf_counter() < end:
            try:
                if (await c.get(f"{base_url}/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{base_url} did not become healthy in {timeout_s} s")


async def release_lag(base_url: str) -> tuple[float, float]:
    """(mean, fraction over 5 ms) of the server's ``servesim:token_release_lag_seconds``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient() as c:
        text = (await c.get(f"{base_url}/metrics")).text
    v = {
        (s.name, s.labels.get("le")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("servesim:token_release_lag_seconds")
    }
    n = v[("servesim:token_release_lag_seconds_count", None)]
    mean = v[("servesim:token_release_lag_seconds_sum", None)] / max(n, 1)
    return mean, 1 - v[("servesim:token_release_lag_seconds_bucket", "0.005")] / max(n, 1)


@dataclass
class Watch:
    """The server's RSS (MiB) and its /health answers, sampled every second."""

    samples: list[tuple[float, float]]  # (seconds since the start, RSS MiB)
    num_health: int = 0
    num_unhealthy: int = 0
    worst_health_s: float = 0.0

    async def run(self, pid: int, base_url: str, stop: asyncio.Event) -> None:
        import httpx

        t0 = time.perf_counter()
        async with httpx.AsyncClient(timeout=5.0) as c:
            while not stop.is_set():
                self.samples.append((time.perf_counter() - t0, rss_mib(pid)))
                t = time.perf_counter()
                try:
                    ok = (await c.get(f"{base_url}/health")).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.num_health += 1
                self.num_unhealthy += not ok
                self.worst_health_s = max(self.worst_health_s, time.perf_counter() - t)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)


@dataclass
class Run:
    """What one benchmark run measured."""

    got: list[Measured]
    wall_s: float
    overhead_s: float  # refused round trip, before and after the load
    stream_overhead_s: float
    stretch: float
    lag: tuple[float, float]
    watch: Watch


async def measure(
    rate: float, duration_s: float, tmp: Path, num_prompts: int | None, max_concurrency: int | None
) -> tuple[Run, np.ndarray, np.ndarray]:
    """Start the server, measure the overheads, run the load, measure them again."""
    import yaml

    path = tmp / "serve_bench.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp / "server.log"
    proc = start_server(path, port, log)
    sent, prompts, outputs = arrivals(rate, duration_s, num_prompts=num_prompts)
    size = int(np.median(prompts))
    try:
        await wait_healthy(base)
        overheads = [await http_overhead_s(base, size)]
        streamed = [await stream_overhead_s(base, size)]
        stretch = cpu_stretch()
        watch = Watch([])
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(watch.run(proc.pid, base, stop))
        t = time.perf_counter()
        got = await drive(base, sent, prompts, outputs, max_concurrency=max_concurrency)
        wall = time.perf_counter() - t
        stop.set()
        await watcher
        await wait_healthy(base, 5.0)
        lag = await release_lag(base)
        overheads.append(await http_overhead_s(base, size))
        streamed.append(await stream_overhead_s(base, size))
        stretch = (stretch + cpu_stretch()) / 2
    except BaseException:
        print(f"the server's log:\n{log.read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(10)
    return (
        Run(got, wall, float(np.mean(overheads)), float(np.mean(streamed)), stretch, lag, watch),
        prompts,
        outputs,
    )


def report(
    rate: float, duration_s: float, run: Run, prompts: np.ndarray, outputs: np.ndarray, rss_bound_mib: float
) -> bool:
    """Print the comparison; True when the server stayed healthy and its memory flat."""
    got, w = run.got, run.watch
    # Predict from the hand-off times as they happened (the client's own lateness included).
    ttft_p, tpot_p = predict(SCENARIO, np.array([m.sent_s for m in got]), prompts, outputs)
    d_ttft = np.array([m.ttft_s for m in got]) - ttft_p
    d_tpot = np.array([m.tpot_s for m in got]) - tpot_p
    d_tpot = d_tpot[~np.isnan(d_tpot)]
    build = np.array([m.build_s for m in got])
    b, a = np.polyfit(prompts, build, 1)
    print(
        f"{len(got)} requests at {rate:g}/s over {duration_s:g} s (wall {run.wall_s:.1f} s), CPU stretch "
        f"{run.stretch:.1f}x; the client built each request in {np.median(build) * 1e3:.1f} ms "
        f"(median; {a * 1e3:.1f} ms + {b * 1e6:.1f} us a prompt token), before the times below"
    )
    print(
        f"HTTP overhead (refused completion of the median prompt, before and after): "
        f"{run.overhead_s * 1e3:.2f} ms; streamed 1-token request less its simulated TTFT: "
        f"{run.stream_overhead_s * 1e3:.2f} ms"
    )
    print(
        f"TTFT measured - predicted: median {np.median(d_ttft) * 1e3:.2f} ms "
        f"(over the HTTP overhead {(np.median(d_ttft) - run.overhead_s) * 1e3:+.2f} ms), p90 "
        f"{np.percentile(d_ttft, 90) * 1e3:.2f} ms, max {d_ttft.max() * 1e3:.2f} ms "
        f"(predicted median {np.median(ttft_p) * 1e3:.1f} ms)"
    )
    print(
        f"TPOT measured - predicted: median {np.median(d_tpot) * 1e3:.3f} ms, p90 |.| "
        f"{np.percentile(np.abs(d_tpot), 90) * 1e3:.3f} ms "
        f"(predicted median {np.nanmedian(tpot_p) * 1e3:.2f} ms)"
    )
    print(
        f"server's token release lag behind simulated time: mean {run.lag[0] * 1e3:.2f} ms, "
        f"{100 * run.lag[1]:.1f}% of tokens over 5 ms"
    )
    q = w.samples[len(w.samples) // 4]
    growth = w.samples[-1][1] - q[1]
    flat = growth <= rss_bound_mib
    print(
        f"server RSS: {q[1]:.1f} MiB after {q[0]:.0f} s, {w.samples[-1][1]:.1f} MiB at the end "
        f"({w.samples[-1][0]:.0f} s): {growth:+.1f} MiB ({'within' if flat else 'OVER'} the bound "
        f"{rss_bound_mib:g} MiB); /health {w.num_health - w.num_unhealthy}/{w.num_health} OK, slowest "
        f"{w.worst_health_s * 1e3:.0f} ms"
    )
    return flat and w.num_unhealthy == 0


#: One request at a time (no chunk of another to parse), 64 tokens each (63 gaps: a late first
#: or last token moves TPOT 1/63 of it); the timing goals of ``paced_goals``.
PACED_SENT_AT = np.array([0.0, 0.8, 1.6, 2.4, 3.2])
PACED_PROMPTS = np.array([200, 1600, 400, 800, 100])
PACED_OUTPUTS = np.array([64, 64, 64, 64, 64])


async def paced_goals(base_url: str) -> bool:
    """The timing goals at --speed 1 (a wall-clock benchmark, not a test: a loaded machine
    misses them). One request at a time, streamed through the openai client, timed from the
    instant the client hands each request to its transport (``drive``): a token never reaches
    the client before the offline simulation of the same arrivals says it is made; the median
    TTFT excess over each request's HTTP overhead (the median round trip of a refused request of
    its size, through the same client and hook) is within 4 ms of CPU work: the driver's release
    of the first token (0.4 ms median), its SSE chunk's write and the client's parse of it where
    the overhead parses an error (~1.5 ms together on an unshared core), stretched by how much
    slower this machine runs a busy loop than an unshared core would (``cpu_stretch``: 1 on an
    idle machine, several where many processes share it); TPOT (a request's mean gap, the
    overhead cancels) is the simulated one within 1.5 ms in the median (the simulated TPOT is
    ~6 ms: unpaced tokens would show ~0). Prints each goal; True when all are met."""
    got = await drive(base_url, PACED_SENT_AT, PACED_PROMPTS, PACED_OUTPUTS, timeout_s=30)
    overhead = np.array([await http_overhead_s(base_url, int(p), n=3) for p in PACED_PROMPTS])
    stretch = cpu_stretch()
    ttft, tpot = predict(SCENARIO, np.array([m.sent_s for m in got]), PACED_PROMPTS, PACED_OUTPUTS)
    d_ttft = np.array([m.ttft_s for m in got]) - ttft
    d_tpot = np.array([m.tpot_s for m in got]) - tpot
    goals = [
        (
            "every request streamed all its tokens",
            [m.num_tokens for m in got] == PACED_OUTPUTS.tolist(),
            f"{[m.num_tokens for m in got]}",
        ),
        (
            "no first token before the simulation's (2 ms slack)",
            d_ttft.min() >= -0.002,
            f"min {d_ttft.min() * 1e3:.2f} ms",
        ),
        (
            f"median TTFT excess over the HTTP overhead <= 4 ms x stretch {stretch:.1f}",
            np.median(d_ttft - overhead) <= 0.004 * stretch,
            f"{np.median(d_ttft - overhead) * 1e3:.2f} ms",
        ),
        (
            "median |TPOT - simulated| <= 1.5 ms",
            np.median(np.abs(d_tpot)) <= 0.0015,
            f"{np.median(np.abs(d_tpot)) * 1e3:.3f} ms",
        ),
    ]
    for name, ok, value in goals:
        print(f"{'met ' if ok else 'MISSED'} {name}: {value}")
    return all(ok for _, ok, _ in goals)


async def measure_paced(tmp: Path) -> bool:
    """Start the server, check ``paced_goals``, stop it."""
    import yaml

    path = tmp / "serve_bench.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp / "server.log"
    proc = start_server(path, port, log)
    try:
        await wait_healthy(base)
        return await paced_goals(base)
    except BaseException:
        print(f"the server's log:\n{log.read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=4.0, help="requests per second (inf: all at once)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals")
    ap.add_argument("--num-prompts", type=int, default=None, help="at most this many requests")
    ap.add_argument("--max-concurrency", type=int, default=None, help="at most this many in flight")
    ap.add_argument(
        "--rss-bound-mib",
        type=float,
        default=RSS_BOUND_MIB,
        help="the most the server's RSS may grow from the first quarter of the run to its end",
    )
    ap.add_argument(
        "--paced",
        action="store_true",
        help="instead of the load: the timing goals of one request at a time (paced_goals)",
    )
    a = ap.parse_args()
    if a.paced:
        with tempfile.TemporaryDirectory() as tmp:
            if not asyncio.run(measure_paced(Path(tmp))):
                sys.exit(1)
        return
    if math.isinf(a.rate) and a.num_prompts is None:
        ap.error("--rate inf needs --num-prompts")
    with tempfile.TemporaryDirectory() as tmp:
        run, prompts, outputs = asyncio.run(
            measure(a.rate, a.duration, Path(tmp), a.num_prompts, a.max_concurrency)
        )
    if not report(a.rate, a.duration, run, prompts, outputs, a.rss_bound_mib):
        sys.exit(1)


if __name__ == "__main__":
    main()
