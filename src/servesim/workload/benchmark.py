"""``vllm bench serve`` with the random dataset: its lengths, its due times, its warm-ups.

Modelled on vLLM's ``vllm/benchmarks/datasets.py`` (``RandomDataset``) and
``vllm/benchmarks/serve.py`` (``get_request``, ``benchmark``) as of vLLM's main branch
(older releases may lack the ready check or the rescaling of due times):

* **Lengths** (``RandomDataset.get_sampling_params``): with ``real = input_len -
  num_special_tokens``, prompts are uniform integers in ``[floor(real (1-r)), ceil(real
  (1+r))]`` and outputs in ``[max(floor(out (1-r)), 1), max(ceil(out (1+r)), 1)]``, drawn
  by ``rng.integers(low, high + 1)`` from ``numpy.random.default_rng(seed)``, prompts
  first, as vLLM does. The server sees the prompt plus the tokenizer's special tokens, so
  the engine's prompt is ``sampled + num_special_tokens``. vLLM then decodes and
  re-encodes each prompt, which can move its length by a token or two; that is not
  modelled. Every request produces exactly its sampled output (``--ignore-eos``).
  ``client: benchmark_serving`` samples as vLLM's older ``benchmarks/benchmark_serving.py``
  (``sample_random_requests``, kept by forks such as InferenceMAX's ``bench_serving``):
  ``np.random.seed(seed)``, then ``randint(int(L r), L + 1)`` for the prompts and then
  the outputs, so lengths lie in ``[int(L r), L]``, at most ``L`` (r = 1: fixed); the
  sampled prompt length is the engine's prompt less the special tokens the server adds.
  An output of 0 tokens (``int(L r) = 0``) is raised to 1, as a server needs one.
* **Due times** (``get_request``): ``request_rate`` inf puts every request at the start;
  otherwise gaps are gamma(shape = burstiness, scale = 1/(rate x burstiness)) (constant
  1/rate for burstiness inf), summed, and rescaled so that the last request is due at
  ``num_prompts / request_rate``, as vLLM does. The gaps come from their own generator:
  bit-compatibility with vLLM's (global ``np.random``) draws is not attempted.
* **Before the measured run** (``benchmark``): the ready check sends the first request
  alone, then ``num_warmups`` copies of it go out under the same concurrency limit; the
  measured run starts when all of them are done. They are rows of this workload (the
  first ``clients.num_before``), with the first request's prompt, which they share with
  it for prefix caching (they are the same text).
"""

from __future__ import annotations

import math

import numpy as np

from servesim.config import BenchmarkWorkload
from servesim.errors import WorkloadError
from servesim.workload.base import BenchmarkClients, Workload
from servesim.workload.limits import check_memory


def length_bounds(mean: int, ratio: float, min_len: int = 0) -> tuple[int, int]:
    """vLLM's inclusive ``[low, high]`` for a mean length and ``random_range_ratio``."""
    if not 0.0 <= ratio < 1.0:
        raise WorkloadError(f"workload.random_range_ratio: expected a value in [0, 1), found {ratio}")
    return max(math.floor(mean * (1 - ratio)), min_len), max(math.ceil(mean * (1 + ratio)), min_len)


def due_times(n: int, request_rate: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """When each of ``n`` requests becomes due, from the start of the run (``get_request``)."""
    if math.isinf(request_rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        t = np.arange(1, n + 1) / request_rate
    else:
        t = np.cumsum(rng.gamma(burstiness, 1.0 / (request_rate * burstiness), size=n))
    if t[-1] > 0:  # rescaled so that the last one is due at n / rate exactly
        t = t * ((n / request_rate) / t[-1])
    return t


def sampled_lengths(
    cfg: BenchmarkWorkload, n: int, seed: int
) -> tuple[np.ndarray, np.ndarray, tuple[int, int], tuple[int, int]]:
    """Prompt lengths (special tokens included), output lengths and the sampled (not
    special-token) bounds of each, as ``cfg.client`` draws them."""
    r = cfg.random_range_ratio
    if cfg.client == "benchmark_serving":
        in_lo, in_hi = int(cfg.input_len * r), cfg.input_len
        out_lo, out_hi = int(cfg.output_len * r), cfg.output_len
        legacy = np.random.RandomState(seed)  # np.random.seed(args.seed) in that script
        prompt = legacy.randint(in_lo, in_hi + 1, size=n).astype(np.int64)
        output = np.maximum(legacy.randint(out_lo, out_hi + 1, size=n).astype(np.int64), 1)
        out_lo = max(out_lo, 1)
    else:
        real_input = max(0, cfg.input_len - cfg.num_special_tokens)
        in_lo, in_hi = length_bounds(real_input, r)
        out_lo, out_hi = length_bounds(cfg.output_len, r, 1)
        rng = np.random.default_rng(seed)  # the dataset's generator: prompts, then outputs
        prompt = rng.integers(in_lo, in_hi + 1, size=n).astype(np.int64)
        output = rng.integers(out_lo, out_hi + 1, size=n).astype(np.int64)
    if in_lo < 1:
        raise WorkloadError(
            f"workload.input_len: {cfg.input_len} leaves prompts with no sampled "
            f"token (num_special_tokens {cfg.num_special_tokens}, random_range_ratio {r})"
        )
    return prompt + cfg.num_special_tokens, output, (in_lo, in_hi), (out_lo, out_hi)


def generate_benchmark(cfg: BenchmarkWorkload, seed: int = 0) -> Workload:
    """The requests of ``cfg``: the ready check and warm-ups first, then the measured run."""
    total_seed = cfg.seed + seed
    if total_seed < 0:
        raise WorkloadError(
            f"workload.seed ({cfg.seed}) + run.seed ({seed}) = {total_seed}: expected a seed >= 0"
        )
    n = cfg.num_prompts
    check_memory(n, f"num_prompts={n:,}")
    prompt, output, (in_lo, in_hi), (out_lo, out_hi) = sampled_lengths(cfg, n, total_seed)
    due = due_times(
        n,
        cfg.request_rate,
        cfg.burstiness,
        np.random.default_rng(np.random.SeedSequence(total_seed).spawn(1)[0]),
    )
    starts = [0]
    if cfg.ready_check:
        starts.append(1)
    if cfg.num_warmups:
        starts.append(starts[-1] + cfg.num_warmups)
    k = starts[-1]  # copies of the first request sent before the measured run
    group = None
    if k:
        group = np.full(n + k, -1, np.int64)
        group[: k + 1] = 0  # the copies and the first measured request: one prompt text
    return Workload(
        arrival_s=np.concatenate([np.zeros(k), due]),
        num_prompt_tokens=np.concatenate([np.full(k, prompt[0]), prompt]),
        num_output_tokens=np.concatenate([np.full(k, output[0]), output]),
        prefix_group=group,
        prefix_len=int(prompt[0]) if k else 0,
        clients=BenchmarkClients(cfg.max_concurrency, tuple(dict.fromkeys(starts))),
        source=f"{'vllm bench serve' if cfg.client == 'vllm_bench' else 'benchmark_serving.py'} "
        f"(random {cfg.input_len}/{cfg.output_len}, concurrency "
        f"{cfg.max_concurrency}, rate {cfg.request_rate:g}/s, seed={total_seed})",
        meta={
            "seed": total_seed,
            "input_bounds": (int(in_lo + cfg.num_special_tokens), int(in_hi + cfg.num_special_tokens)),
            "output_bounds": (int(out_lo), int(out_hi)),
            "num_before": k,
        },
    )
