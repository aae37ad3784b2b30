"""Which benchmark client measured a silicon run, and the workload that client sends.

``silicon_vllm.csv`` gathers runs from two harnesses; its ``silicon_data_source`` column
names the upstream file or database dump of each row, which tells them apart:

* **InferenceMAX / InferenceX** (SemiAnalysis' nightly benchmark; every source but
  AIConfigurator's own per-GPU files: the dated ``source_file=2026-…csv`` sheets, the
  ``db-dump`` rows with their GitHub ``workflow_run_id``, the Kimi gap analysis). Its
  ``benchmarks/benchmark_lib.sh`` runs ``run_benchmark_serving``: the ``bench_serving``
  fork of vLLM's older ``benchmarks/benchmark_serving.py`` with ``--dataset-name random
  --random-range-ratio $RANDOM_RANGE_RATIO --num-prompts $((CONC * 10)) --max-concurrency
  $CONC --request-rate inf --ignore-eos``, and its benchmark client table sets
  ``RANDOM_RANGE_RATIO`` 0.8 for the (ISL, OSL) pairs (1024, 1024), (1024, 8192) and
  (8192, 1024) at 4-64 clients. That script draws lengths uniform in ``[int(0.8 L), L]``
  (``sample_random_requests``), so prompts and outputs vary by up to 20% and the clients
  drift apart instead of moving in lockstep; it sends one ready-check request, then the
  measured run. Later versions of the script add ``--num-warmups 2*CONC``; the rows do
  not say which version ran, and warm-ups end before the measured run starts either way.
* **AIConfigurator's own collection** (``source_file=<gpu>/vllm/<version>/<model>.csv``):
  the rows do not say their server or client. The rows of the same collection that do
  (its ``qwen3_32b.csv`` beside the ``Qwen_Qwen3-32B.csv`` of the 90 Qwen3-32B H100 runs,
  and every other file of it that names an image) ran a Dynamo runtime image, vLLM 0.12.0
  being the vLLM of ``ai-dynamo/vllm-runtime:0.8.0``: deployments written by
  AIConfigurator's generator and measured by its evaluation runner. So they run as that
  generator and runner of January 2026 set them (``aiconfigurator_settings``): fixed
  lengths (``--synthetic-input-tokens-stddev 0``, ``--output-tokens-stddev 0``,
  ``ignore_eos``), ``10 x N`` requests at concurrency N after ``2 x N`` warm-ups (which
  end before the measured requests, all N clients then starting together as in servesim's
  run), and the worker's token budget and limits. Simplified: Dynamo's front end (its HTTP
  server and tokenizer in Rust, the worker streaming token ids) is taken as vLLM's API
  server at its measured costs, and the chat template's few prompt tokens are left out.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from servesim.config.vllm_env import VLLM_ENV_VARS

#: InferenceMAX's benchmark client: ``--random-range-ratio`` and requests per client.
INFERENCEMAX_RANGE_RATIO = 0.8
INFERENCEMAX_PROMPTS_PER_CLIENT = 10

#: AIConfigurator's own collection: requests per client (its evaluation runner's aiperf
#: ``--request-count 10 x N``), at least ``MIN_PROMPTS``.
PROMPTS_PER_CLIENT = 10
MIN_PROMPTS = 32
#: AIConfigurator's generator (``generator/rule_plugin/vllm.rule`` of January 2026) gives an
#: aggregated vLLM worker ``max_num_tokens = max_batch_size + ISL + 1500`` and
#: ``max_seq_len = ISL + OSL + 1500``: its ``--max-num-batched-tokens`` and ``--max-model-len``.
AICONFIGURATOR_EXTRA_TOKENS = 1500


def is_inferencemax(source: str) -> bool:
    """Does ``silicon_data_source`` name an InferenceMAX run (not AIConfigurator's own
    per-GPU collection, whose files sit at ``<gpu>/vllm/<version>/``)?"""
    first = source.split(";")[0].strip()
    return not (first.startswith("source_file=") and "/vllm/" in first)


def bench_workload(source: str, isl: int, osl: int, concurrency: int) -> dict[str, Any]:
    """The ``type: benchmark`` workload of one run, as its harness sent it."""
    wl: dict[str, Any] = {
        "type": "benchmark",
        "input_len": isl,
        "output_len": osl,
        "max_concurrency": concurrency,
        "num_warmups": 0,
        "seed": 0,
    }
    if is_inferencemax(source):
        wl.update(
            client="benchmark_serving",
            random_range_ratio=INFERENCEMAX_RANGE_RATIO,
            num_prompts=INFERENCEMAX_PROMPTS_PER_CLIENT * concurrency,
        )
    else:
        wl.update(random_range_ratio=0.0, num_prompts=max(PROMPTS_PER_CLIENT * concurrency, MIN_PROMPTS))
    return wl


def unknown_client_count(source: str) -> str | None:
    """Why a row of AIConfigurator's own collection does not say its benchmark's clients, or
    None: a source without ``silicon_concurrency`` (its ``qwen3_32b.csv``) gives as
    ``batch_size`` the deployment's largest batch (24-144), and its measured TPOT (11.6 ms
    at TP 2) is below what 48 clients of 4k prompts allow."""
    if "silicon_concurrency=" in source:
        return None
    return (
        "no silicon_concurrency in the source: batch_size is the deployment's largest batch, "
        "not the benchmark's clients, and the run's client count is unknown"
    )


def aiconfigurator_settings(isl: int, osl: int, concurrency: int) -> tuple[dict[str, Any], str]:
    """(engine fields, a note) of a run of AIConfigurator's own collection: the vLLM worker
    its generator deploys for ``concurrency`` clients (``--max-num-seqs`` the batch size, the
    token budget and model length of ``AICONFIGURATOR_EXTRA_TOKENS``; the rest vLLM's
    defaults). The budget holds about two prompts of 1k tokens a step, not vLLM's 8,192."""
    engine = {
        "max_num_seqs": concurrency,
        "max_num_batched_tokens": concurrency + isl + AICONFIGURATOR_EXTRA_TOKENS,
        "max_model_len": isl + osl + AICONFIGURATOR_EXTRA_TOKENS,
    }
    note = (
        f"server: AIConfigurator's generated Dynamo vLLM worker (--max-num-seqs {concurrency} "
        f"--max-num-batched-tokens {engine['max_num_batched_tokens']} --max-model-len "
        f"{engine['max_model_len']}), inferred from its collection; front end as vLLM's API server"
    )
    return engine, note


# --------------------------------------------------------------------------- the servers

#: Package data: every version of InferenceMAX's vLLM launch scripts for the silicon groups
#: (tools/pack_inferencemax_servers.py), their ``vllm serve`` settings.
SERVERS_FILE = "inferencemax_servers.json"
#: Engine fields a script sets that ``server_settings`` passes on (the rest is recorded only).
ENGINE_FIELDS = (
    "gpu_memory_utilization",
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_cudagraph_capture_size",
    "cudagraph_mode",
    "async_scheduling",
    "enable_prefix_caching",
    "enforce_eager",
)


@cache
def _servers() -> dict[str, Any]:
    raw = resources.files("servesim").joinpath("data", SERVERS_FILE).read_text()
    return dict(json.loads(raw)["scripts"])


def script_for(model_path: str, precision: str, system: str) -> str | None:
    """The name of the InferenceMAX launch script of one (model, precision, GPU), or None."""
    for name, s in _servers().items():
        if (s["model_path"], s["precision"], s["system"]) == (model_path, precision, system):
            return name
    return None


def measured_at(source: str) -> str | None:
    """The end of the row's ``measured=`` day, ``YYYY-MM-DDT23:59:59Z`` (None without one).

    A day, not the time: a pull request's benchmark runs before its merge (MiniMax-M2.5 FP8
    on B200 with vLLM 0.19.0 measured at 02:34 on 2026-04-03, the script moving to 0.19.0
    merged at 16:31), and some sources give midnight for the whole day."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", source)
    return None if m is None else m.group(1) + "T23:59:59Z"


def fixed_client_concurrency(script: str, source: str) -> int | None:
    """The benchmark client's ``--max-concurrency`` where a version of ``script`` in force
    on the row's ``measured=`` day (the one of its first second, or one committed during it)
    fixes it to a number instead of the run's ``$CONC``; else None.

    Such a version starts the client at that number (512: gpt-oss-120b on H100 from 21
    November to 8 December 2025) and the server at ``--max-num-seqs $CONC`` with ``$CONC``
    x 10 prompts, ``$CONC`` being the benchmark matrix's (4-64 for that script): a row
    recording the fixed number as its concurrency does not say the ``$CONC`` its server
    ran with."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", source)
    if m is None:
        return None
    start, end = m.group(1) + "T00:00:00Z", m.group(1) + "T23:59:59Z"
    versions = [v for v in _servers()[script]["versions"] if not v.get("branch")]
    before = [v for v in versions if v["from"] <= start]
    day = before[-1:] + [v for v in versions if start < v["from"] <= end]
    fixed = [v["client"]["max_concurrency"] for v in day if v.get("client", {}).get("max_concurrency")]
    return fixed[0] if fixed else None


def _count(value: int | str, isl: int, osl: int, concurrency: int) -> int | None:
    """A token or request count of a script: a number, or ``ISL``/``OSL``/``CONC`` times one."""
    if isinstance(value, int):
        return value
    names = {"ISL": isl, "OSL": osl, "CONC": concurrency}
    m = re.fullmatch(r"(?:(\d+)\*)?(ISL|OSL|CONC)", value)
    return None if m is None else int(m.group(1) or 1) * names[m.group(2)]


def _version(script: str, when: str | None) -> dict[str, Any]:
    """The version of ``script`` in force at ``when`` (see ``server_settings``)."""
    versions = _servers()[script]["versions"]
    if when is None:  # the script as merged
        return dict(next(v for v in versions if not v.get("branch")))
    before = [v for v in versions if v["from"] <= when]
    return dict(before[-1] if before else versions[0])


def server_parallelism(script: str, when: str | None) -> tuple[str | None, bool]:
    """How the version of ``script`` in force at ``when`` lays vLLM out: when it passes
    ``--enable-expert-parallel`` (None: never; ``"ep>1"``: for a run of EP size above 1;
    ``"always"``: for every run) and whether it can pass ``--data-parallel-size``.

    The script, not the benchmark matrix, decides: one without a flag serves
    ``--tensor-parallel-size $TP`` whatever the matrix gives as the run's EP size or
    DP-attention switch (the Kimi-K2.5 FP4 B200 script until August 2026, whose "EP 4" and
    "DP attention" rows ran as plain TP 4; the MiniMax-M2.5 FP8 scripts pass EP but never
    DP), and the MiniMax-M2.5 FP8 B200 and H200 scripts of March 2026 test
    ``[ "$EP_SIZE" -ge 1 ]``, so their "EP 1" rows ran with expert parallelism."""
    rec = _version(script, when)["recorded"]
    ep = rec.get("enable-expert-parallel")
    return (None if ep is None else str(ep)), "data-parallel-size" in rec


def server_settings(
    script: str, when: str | None, isl: int, osl: int, concurrency: int
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(engine fields, model fields, a note) of the version of ``script`` in force at ``when``
    (the latest committed at or before it, on the main line or, before the script's merge,
    on the branch of the pull request that added it, whose benchmark such a run is; the
    first version for a run before every version; the first merged one when ``when`` is
    None). Counts in ISL, OSL and
    CONC are evaluated for this run; settings servesim does not model are named in the note."""
    v = _version(script, when)
    engine: dict[str, Any] = {}
    for key in ENGINE_FIELDS:
        if key in v["engine"]:
            val = v["engine"][key]
            if key in ("max_num_batched_tokens", "max_num_seqs", "max_cudagraph_capture_size"):
                val = _count(val, isl, osl, concurrency)
            if val is not None:
                engine[key] = val
    model = {k: v["model"][k] for k in ("kv_cache_dtype",) if k in v["model"]}
    recorded = dict(v["recorded"])
    interval = recorded.pop("stream-interval", None)
    if interval is not None:  # the API server streams a chunk every N tokens
        engine["stream_interval"] = int(interval)
    env = dict(v["env"])
    if env.pop("VLLM_MXFP4_USE_MARLIN", "0") == "1":
        engine["moe_backend"] = "marlin"
    if env.pop("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8", "0") == "1":
        engine["moe_backend"] = "flashinfer_mxfp4_mxfp8"
    precision = env.pop("VLLM_FLOAT32_MATMUL_PRECISION", None)
    if precision in ("highest", "high", "medium"):
        engine["float32_matmul_precision"] = precision
    elif precision is not None:
        env["VLLM_FLOAT32_MATMUL_PRECISION"] = precision  # not a value vLLM takes: named below
    if env.get("VLLM_USE_FLASHINFER_MOE_FP8") == "0" and env.get("VLLM_MOE_USE_DEEP_GEMM") == "0":
        # vLLM's FP8 MoE oracle without its FlashInfer and DeepGEMM backends: Triton's experts
        del env["VLLM_USE_FLASHINFER_MOE_FP8"], env["VLLM_MOE_USE_DEEP_GEMM"]
        engine["moe_backend"] = "triton"
    steered = {k: str(env.pop(k)) for k in list(env) if k in VLLM_ENV_VARS}
    if steered:  # the variables that change vLLM's default kernels (perf.execution_path)
        engine["vllm_env"] = steered
    unmodelled = [f"{k}={val}" for k, val in env.items()] + [
        f"--{k}" + ("" if val is True else f" {val}")
        for k, val in recorded.items()
        if k not in ("enable-expert-parallel", "data-parallel-size")
    ]  # server_parallelism
    branch = ", a pull request's branch" if v.get("branch") else ""
    note = f"server: {script}.sh at {v['commit'][:9]} ({v['from'][:10]}{branch})"
    if unmodelled:
        note += "; not modelled: " + ", ".join(unmodelled)
    return engine, model, note
