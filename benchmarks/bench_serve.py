"""Benchmark: `servesim serve` under load on loopback, against the offline simulation.

Starts ``servesim serve`` (a subprocess on 127.0.0.1, a free port) for Llama-3.1-8B on one
H100, sends Poisson arrivals with the official ``openai`` client (asyncio, streamed
completions, prompts given as token ids so their lengths are exact), and compares each
request's measured TTFT and TPOT with what ``servesim.sim.run_engine`` predicts for the same
arrival times and lengths. The HTTP overhead is measured as the median round trip of a
completion of the median prompt's size that the server refuses at once (unknown model),
through the same client. Memory: the server's RSS is sampled every
second; the report gives it after the first quarter of the run and at the end.

    python benchmarks/bench_serve.py --rate 4 --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODEL = "meta-llama/Llama-3.1-8B"
SCENARIO = {"model": {"name": MODEL}, "hardware": {"gpu": "H100-SXM"}, "engine": {"max_model_len": 4096}}


@dataclass
class Measured:
    sent_s: float  # since the first send
    ttft_s: float
    tpot_s: float  # mean gap after the first token (NaN with one token)
    num_tokens: int


def arrivals(rate: float, duration_s: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poisson arrival times over ``duration_s``, prompt and output lengths (lognormal, shaped
    like the Azure conversation trace, capped to keep each request under a few seconds)."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, size=int(rate * duration_s * 2) + 8)
    t = np.cumsum(gaps) - gaps[0]
    t = t[t < duration_s]
    prompts = np.clip(rng.lognormal(6.6, 0.8, t.size), 16, 3000).astype(int)
    outputs = np.clip(rng.lognormal(4.5, 0.7, t.size), 2, 400).astype(int)
    return t, prompts, outputs


async def drive(base_url: str, sent_at: np.ndarray, prompts: np.ndarray, outputs: np.ndarray,
                timeout_s: float = 120.0) -> list[Measured]:
    """Send request i at ``sent_at[i]`` (seconds from now), streamed; time its tokens."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0, timeout=timeout_s)
    t0 = time.perf_counter() + 0.05

    async def one(i: int) -> Measured:
        await asyncio.sleep(max(0.0, t0 + float(sent_at[i]) - time.perf_counter()))
        sent = time.perf_counter()
        stream = await client.completions.create(model=MODEL, prompt=[i % 50000 + 1] * int(prompts[i]),
                                                 max_tokens=int(outputs[i]), stream=True)
        times = []
        async for ch in stream:
            if ch.choices and ch.choices[0].text:
                times.append(time.perf_counter())
        tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
        return Measured(sent - t0, times[0] - sent, tpot, len(times))

    try:
        return list(await asyncio.gather(*(one(i) for i in range(len(sent_at)))))
    finally:
        await client.close()


async def http_overhead_s(base_url: str, num_prompt_tokens: int, n: int = 10) -> float:
    """The HTTP path's own latency: the median round trip of a completion of the same size
    that the server refuses at once (an unknown model: 404), through the same client."""
    from openai import AsyncOpenAI, NotFoundError

    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0, timeout=10)
    try:
        rtts = []
        for _ in range(n):
            t = time.perf_counter()
            try:
                await client.completions.create(model="no-such-model", prompt=[1] * num_prompt_tokens,
                                                max_tokens=1, stream=True)
            except NotFoundError:
                rtts.append(time.perf_counter() - t)
        return statistics.median(rtts)
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


def predict(scenario: dict, sent_at: np.ndarray, prompts: np.ndarray, outputs: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) per request of the offline simulation of the same arrivals and lengths."""
    from servesim.config import scenario_from_dict
    from servesim.deployment import resolve_deployment
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    dep = resolve_deployment(scenario_from_dict(scenario))
    wl = Workload(arrival_s=np.asarray(sent_at, float), num_prompt_tokens=np.asarray(prompts, np.int64),
                  num_output_tokens=np.asarray(outputs, np.int64))
    rec = run_engine(wl, dep.engine, dep.perf, dep.plan.num_gpu_blocks, dep.plan.max_model_len,
                     num_gpus=dep.num_gpus).records
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
        return subprocess.Popen([sys.executable, "-m", "servesim", "serve", str(scenario_path), "--host",
                                 "127.0.0.1", "--port", str(port), "--no-progress"], stderr=log)


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
    v = {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(text)
         for s in f.samples if s.name.startswith("servesim:token_release_lag_seconds")}
    n = v[("servesim:token_release_lag_seconds_count", None)]
    mean = v[("servesim:token_release_lag_seconds_sum", None)] / max(n, 1)
    return mean, 1 - v[("servesim:token_release_lag_seconds_bucket", "0.005")] / max(n, 1)


async def _sample_rss(pid: int, out: list[tuple[float, float]], stop: asyncio.Event) -> None:
    t0 = time.perf_counter()
    while not stop.is_set():
        out.append((time.perf_counter() - t0, rss_mib(pid)))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def bench(rate: float, duration_s: float, tmp: Path) -> None:
    import yaml

    path = tmp / "serve_bench.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp / "server.log"
    proc = start_server(path, port, log)
    try:
        await wait_healthy(base)
        overhead = await http_overhead_s(base, int(np.median(arrivals(rate, duration_s)[1])))
        stretch = cpu_stretch()
        sent, prompts, outputs = arrivals(rate, duration_s)
        samples: list[tuple[float, float]] = []
        stop = asyncio.Event()
        sampler = asyncio.ensure_future(_sample_rss(proc.pid, samples, stop))
        t = time.perf_counter()
        got = await drive(base, sent, prompts, outputs)
        wall = time.perf_counter() - t
        stop.set()
        await sampler
        await wait_healthy(base, 5.0)
        lag = await release_lag(base)
    except BaseException:
        print(f"the server's log:\n{log.read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(10)
    # Predict from the send times as they happened (the client's own lateness included).
    ttft_p, tpot_p = predict(SCENARIO, np.array([m.sent_s for m in got]), prompts, outputs)
    d_ttft = np.array([m.ttft_s for m in got]) - ttft_p
    d_tpot = np.array([m.tpot_s for m in got]) - tpot_p
    d_tpot = d_tpot[~np.isnan(d_tpot)]
    q = len(samples) // 4
    print(f"{len(got)} requests at {rate:g}/s over {duration_s:g} s (wall {wall:.1f} s); "
          f"HTTP overhead (median refused completion of the median prompt) {overhead * 1e3:.2f} ms, "
          f"CPU stretch {stretch:.1f}x")
    print(f"TTFT measured - predicted: median {np.median(d_ttft) * 1e3:.2f} ms, p90 "
          f"{np.percentile(d_ttft, 90) * 1e3:.2f} ms, max {d_ttft.max() * 1e3:.2f} ms "
          f"(predicted median {np.median(ttft_p) * 1e3:.1f} ms)")
    print(f"TPOT measured - predicted: median {np.median(d_tpot) * 1e3:.3f} ms, p90 |.| "
          f"{np.percentile(np.abs(d_tpot), 90) * 1e3:.3f} ms "
          f"(predicted median {np.nanmedian(tpot_p) * 1e3:.2f} ms)")
    print(f"server's token release lag behind simulated time: mean {lag[0] * 1e3:.2f} ms, "
          f"{100 * lag[1]:.1f}% of tokens over 5 ms")
    print(f"server RSS: {samples[q][1]:.1f} MiB after {samples[q][0]:.0f} s, {samples[-1][1]:.1f} MiB "
          f"at the end ({samples[-1][0]:.0f} s); healthy at the end")


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=4.0, help="requests per second")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(a.rate, a.duration, Path(tmp)))


if __name__ == "__main__":
    main()
