"""Scenario: the validated, immutable description of one simulation.

Every field has a default, units are in the names, and unknown keys are errors. The
scenario is resolved once (file, then ``--set`` overrides, then validation); derived
values (number of KV blocks, perf-model coefficients) come from pure functions of it and
are never written back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- model / hardware


class ModelConfig(_Strict):
    name: str = Field("meta-llama/Llama-3.1-8B", description=(
        "A built-in preset (see `servesim catalog`) or a path to a Hugging Face config.json "
        "(or a directory holding one)."))
    dtype: Literal["auto", "bfloat16", "float16", "fp8", "float32"] = Field(
        "auto", description="Weight/activation dtype; 'auto' takes torch_dtype from the config.")
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8"] = Field(
        "auto",
        description="KV cache dtype; 'auto' follows the model dtype (as vLLM's --kv-cache-dtype auto).")


class GpuConfig(_Strict):
    """A user-defined accelerator (all fields required except where defaulted)."""

    name: str
    bf16_tflops: float = Field(gt=0, description="Peak dense BF16/FP16 TFLOP/s.")
    fp8_tflops: float | None = Field(None, gt=0, description="Peak dense FP8 TFLOP/s (None: no FP8).")
    mem_gb: float = Field(gt=0, description="Device memory in GB (1e9 bytes).")
    mem_bw_tbps: float = Field(gt=0, description="Memory bandwidth, TB/s.")
    interconnect_gbps: float = Field(450.0, gt=0, description="Unidirectional GPU-GPU bandwidth, GB/s.")
    interconnect_latency_us: float = Field(5.0, ge=0)
    idle_power_w: float = Field(100.0, ge=0)
    max_power_w: float = Field(700.0, gt=0)
    usd_per_hour: float = Field(2.5, ge=0)


class HardwareConfig(_Strict):
    gpu: str | GpuConfig = Field(
        "H100-SXM", description="Catalog name (see `servesim catalog`) or a custom GPU.")
    profile: str | None = Field(None, description="Path of a calibrated hardware profile (JSON) to apply.")


class ParallelConfig(_Strict):
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    pipeline_parallel_size: int = Field(1, ge=1, le=64)
    num_microbatches: int = Field(1, ge=1, description=(
        "Pipeline micro-batches per step (GPipe schedule, bubble (pp-1)/(m+pp-1)); 1 = the "
        "batch goes through the stages whole."))
    expert_parallel_size: int = Field(1, ge=1, le=64, description=(
        "MoE only: spread the experts over this many groups of the TP ranks (must divide TP)."))
    expert_imbalance: float = Field(1.0, ge=1.0, description=(
        "Expert parallelism: token-expert pairs of the busiest group / the mean (1 = uniform)."))

    @model_validator(mode="after")
    def _check(self) -> ParallelConfig:
        if self.tensor_parallel_size % self.expert_parallel_size:
            raise ValueError(f"expert_parallel_size ({self.expert_parallel_size}) must divide "
                             f"tensor_parallel_size ({self.tensor_parallel_size})")
        return self


class LinksConfig(_Strict):
    """Overrides of the catalog's links (None: the GPU's catalog figure)."""

    intra_node_gbps: float | None = Field(None, gt=0, description="GPU-GPU in a node (NVLink/PCIe), GB/s.")
    intra_node_latency_us: float | None = Field(None, ge=0)
    inter_node_gbps: float | None = Field(None, gt=0, description="Per-GPU network (IB/RoCE), GB/s.")
    inter_node_latency_us: float | None = Field(None, ge=0)
    gpus_per_node: int | None = Field(None, ge=1)


# --------------------------------------------------------------------------- engine


class SpeculativeConfig(_Strict):
    """Speculative decoding: a draft model proposes k tokens, the target verifies k + 1."""

    num_speculative_tokens: int = Field(0, ge=0, description="Draft length k (0 = off), as vLLM names it.")
    acceptance_rate: float = Field(0.7, ge=0, le=1, description=(
        "Probability that each draft token is accepted (i.i.d. per token; the run of leading "
        "acceptances is kept)."))
    acceptance_rate_std: float = Field(0.0, ge=0, lt=0.5, description=(
        "Spread of the per-request acceptance rate (a Beta with this std around acceptance_rate); "
        "0 = every request has acceptance_rate."))
    draft_cost_ratio: float = Field(0.05, ge=0, description=(
        "Time of one draft-model decode step as a fraction of the target's decode step."))
    seed: int = Field(0, description="Seed of the acceptance draws.")


class EngineConfig(_Strict):
    """Knobs of the serving engine, named as vLLM names them.

    Defaults follow vLLM V1 (0.32, the version bundled with the CPU ground-truth tool)
    for the OpenAI-compatible server (`vllm serve`); ``None`` means "vLLM's default for
    this GPU" and is resolved by ``servesim.sim.resolve_engine``. Modelled in sync mode:
    vLLM 0.32 turns async scheduling on by default on GPUs (the next step is scheduled
    while the current one runs); servesim charges ``cpu_overhead_s`` per step instead.
    """

    policy: Literal["vllm_v1", "vllm_v0", "sarathi", "orca", "static"] = Field("vllm_v1", description=(
        "Scheduler family (docs/policies.md): vllm_v1 (default), vllm_v0 (prefill-priority steps), "
        "sarathi (Sarathi-Serve: chunk budget, decodes first), orca (iteration-level batching, KV "
        "reserved for the maximum length at admission), static (FasterTransformer-style batches)."))
    block_size: int = Field(
        16, ge=1, description="Tokens per KV block (16 on GPUs, 128 on vLLM's CPU build).")
    max_num_seqs: int | None = Field(None, ge=1, description=(
        "Most requests in one batch. Default as `vllm serve` 0.32: 1024 on GPUs with >= 70 GiB "
        "(not A100), else 256."))
    max_num_batched_tokens: int | None = Field(None, ge=1, description=(
        "Token budget of one iteration. Default as `vllm serve` 0.32: 16384 on >= 160 GiB GPUs, "
        "8192 on >= 70 GiB (not A100), else 2048; raised to max_model_len when chunked prefill is off."))
    enable_chunked_prefill: bool = Field(
        True, description="Split prompts across iterations under the budget.")
    long_prefill_token_threshold: int = Field(
        0, ge=0, description="Cap on one request's prefill chunk per step (0 = no cap).")
    enable_prefix_caching: bool = Field(True, description="Reuse KV blocks of identical prompt prefixes.")
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1.0, description="Fraction of device memory "
                                          "vLLM may use (0.92 in vLLM 0.32).")
    num_gpu_blocks_override: int | None = Field(None, ge=1, description="Force the number of KV blocks.")
    max_model_len: int | None = Field(None, ge=1, description="Longest sequence; default the model's own.")
    cpu_overhead_s: float = Field(
        0.003, ge=0, description="Fixed CPU time per iteration (scheduling, input prep, sampling glue).")
    preemption_mode: Literal["recompute", "swap"] = Field("recompute", description=(
        "recompute: a victim's KV is dropped and recomputed; swap: copied to host memory over PCIe "
        "(vLLM V0's swap; falls back to recompute when swap_space_gb is full)."))
    swap_space_gb: float = Field(4.0, ge=0, description="Host memory for swapped-out KV per GPU, in GiB "
                                 "(vLLM's swap_space, default 4).")
    pcie_gbps: float = Field(25.0, gt=0, description="Effective host<->GPU copy bandwidth for swapping, GB/s "
                             "(PCIe Gen4 x16: 32 GB/s peak, ~25 effective).")
    scheduling_policy: Literal["fcfs", "priority"] = Field("fcfs", description=(
        "Waiting order and victim choice: fcfs, or priority (workload priority, lower = more urgent; "
        "waiting ordered by (priority, arrival), the running request with the largest (priority, "
        "arrival) is preempted), as vLLM's --scheduling-policy."))
    watermark: float | None = Field(None, ge=0, lt=1, description=(
        "Fraction of KV blocks kept free when admitting (None: the policy's default, 0.01 for vllm_v0 "
        "and sarathi as in vLLM V0's BlockSpaceManager, else 0)."))
    orca_reservation: Literal["max", "pow2", "oracle"] = Field("max", description=(
        "orca: KV reserved at admission: max_model_len (max), prompt + next power of 2 of the output "
        "(pow2), or prompt + the true output (oracle), the three Orca baselines of the vLLM paper."))
    memory_aware_admission: bool = Field(False, description=(
        "vllm_v1: admit a waiting request only if the projected KV use of the running batch plus it "
        "stays within the cache until their predicted completions (MC-SF-style)."))
    output_len_prediction_error: float = Field(0.0, ge=0, description=(
        "memory_aware_admission: predicted output length = true x exp(sigma z), z ~ N(0, 1); this is sigma."))
    speculative: SpeculativeConfig = Field(default_factory=lambda: SpeculativeConfig(),
                                           description="Speculative decoding (off by default).")
    scheduler_reserve_full_isl: bool = Field(
        True, description="Admit a waiting request only if its whole prompt fits the free KV blocks "
        "(vLLM's default admission gate), not just its first chunk.")

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if not self.enable_chunked_prefill and self.max_model_len is not None and (
            self.max_num_batched_tokens is not None and self.max_num_batched_tokens < self.max_model_len
        ):
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_model_len "
                f"({self.max_model_len}) when chunked prefill is off, as vLLM requires")
        return self


GIB = 1 << 30

#: Per-policy defaults of the knobs left ``None`` (see docs/policies.md).
POLICY_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm_v1": {"watermark": 0.0},
    "vllm_v0": {"max_num_seqs": 256, "watermark": 0.01, "enable_chunked_prefill": False,
                "enable_prefix_caching": False},
    "sarathi": {"max_num_seqs": 128, "max_num_batched_tokens": 512, "watermark": 0.01,
                "enable_chunked_prefill": True, "enable_prefix_caching": False},
    "orca": {"max_num_seqs": 256, "watermark": 0.0, "enable_chunked_prefill": False,
             "enable_prefix_caching": False},
    "static": {"max_num_seqs": 256, "watermark": 0.0, "enable_chunked_prefill": False,
               "enable_prefix_caching": False},
}
#: Policies that cannot use prefix caching (no paged, shared blocks).
_NO_PREFIX_CACHING = ("orca", "static")


def resolve_policy(engine: EngineConfig, max_model_len: int | None = None) -> EngineConfig:
    """Fill the knobs a policy defaults differently from vLLM V1 (a pure function).

    vllm_v0: max_num_seqs 256, watermark 0.01, no chunked prefill, budget
    max(max_model_len, 2048) (vLLM V0's SchedulerConfig). sarathi: max_num_seqs 128, chunk
    budget 512, watermark 0.01 (Sarathi-Serve's defaults). orca and static: no chunking and
    a loose budget, max(max_model_len, 16384) tokens (they have none; it bounds the prompts
    that join one iteration and sizes the activation memory). Chunked prefill is a property of the
    policy, so it is set here whatever the input said; prefix caching is off unless set
    (vLLM V0's default), and always off for orca and static.
    """
    d = POLICY_DEFAULTS[engine.policy]
    upd: dict[str, Any] = {}
    if engine.watermark is None:
        upd["watermark"] = d["watermark"]
    if engine.policy == "vllm_v1":
        return engine.model_copy(update=upd) if upd else engine
    upd["enable_chunked_prefill"] = d["enable_chunked_prefill"]
    if engine.policy in _NO_PREFIX_CACHING or "enable_prefix_caching" not in engine.model_fields_set:
        upd["enable_prefix_caching"] = d["enable_prefix_caching"]
    seqs = engine.max_num_seqs if engine.max_num_seqs is not None else d["max_num_seqs"]
    upd["max_num_seqs"] = seqs
    tokens = engine.max_num_batched_tokens
    mml = max_model_len or engine.max_model_len
    if tokens is None:
        if engine.policy == "vllm_v0":
            tokens = max(mml or 2048, 2048)
        else:
            # orca/static have no token budget; this bounds the prompts joining one iteration
            # (and sizes the activation memory, as vLLM's profiling run does).
            tokens = d.get("max_num_batched_tokens") or max(mml or 2048, 16384)
        upd["max_num_batched_tokens"] = tokens
    elif not d["enable_chunked_prefill"] and mml and tokens < mml:
        raise ConfigError(f"engine.max_num_batched_tokens ({tokens}) must be >= max_model_len "
                          f"({mml}) for policy {engine.policy}, which does not chunk prompts")
    return engine.model_copy(update=upd)


def resolve_engine(engine: EngineConfig, gpu_mem_bytes: float | None = None, gpu_name: str = "",
                   max_model_len: int | None = None, world_size: int = 1) -> EngineConfig:
    """Fill ``None`` batch knobs with vLLM 0.32's `vllm serve` defaults for this GPU.

    ``engine/arg_utils.py:get_batch_defaults``: >= 160 GiB: 16384 tokens / 1024 seqs;
    >= 70 GiB and not an A100: 8192 / 1024; otherwise 2048 / 256. With chunked prefill
    off, an unset budget is raised to max(max_model_len, default). Policies other than
    vllm_v1 take their own defaults first (``resolve_policy``).
    """
    engine = resolve_policy(engine, max_model_len)
    if engine.max_num_seqs is not None and engine.max_num_batched_tokens is not None:
        return engine
    mem = gpu_mem_bytes or 0
    if mem >= 160 * GIB:
        tokens, seqs = 16384, 1024
    elif mem >= 70 * GIB and "a100" not in gpu_name.lower():
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    upd: dict[str, int] = {}
    if engine.max_num_seqs is None:
        upd["max_num_seqs"] = seqs
    if engine.max_num_batched_tokens is None:
        if not engine.enable_chunked_prefill and max_model_len:
            tokens = max(tokens, max_model_len)
        upd["max_num_batched_tokens"] = tokens
    return engine.model_copy(update=upd)


# --------------------------------------------------------------------------- workload


class LengthDist(_Strict):
    """A token-length distribution. Values are rounded and clipped to [min, max]."""

    kind: Literal["constant", "uniform", "normal", "lognormal", "pareto", "trace"] = "constant"
    value: int = Field(512, ge=1, description="constant: the length.")
    low: int = Field(1, ge=1, description="uniform: inclusive lower bound.")
    high: int = Field(1024, ge=1, description="uniform: inclusive upper bound.")
    mean: float = Field(512.0, gt=0, description="normal/lognormal: mean length.")
    std: float = Field(128.0, ge=0, description="normal: standard deviation; lognormal: std of the length.")
    alpha: float = Field(2.0, gt=0, description="pareto: shape.")
    scale: float = Field(64.0, gt=0, description="pareto: minimum (x_m).")
    trace: str | None = Field(None, description="trace: file to sample lengths from (any supported format).")
    column: Literal["prompt", "output"] = Field("prompt", description="trace: which column to sample.")
    min: int = Field(1, ge=1)
    max: int = Field(1_000_000, ge=1)


class ArrivalConfig(_Strict):
    process: Literal["poisson", "gamma", "constant", "burst"] = Field(
        "poisson", description="poisson; gamma (with cv); constant spacing; burst = all at t=0.")
    rate: float = Field(1.0, gt=0, description="Mean arrivals per second.")
    cv: float = Field(1.0, gt=0, description="gamma: coefficient of variation of inter-arrival times.")


class SyntheticWorkload(_Strict):
    type: Literal["synthetic"] = "synthetic"
    arrival: ArrivalConfig = ArrivalConfig()
    prompt_len: LengthDist = LengthDist(kind="constant", value=512)
    output_len: LengthDist = LengthDist(kind="constant", value=128)
    num_requests: int | None = Field(1000, ge=1, description="How many requests (or use duration_s).")
    duration_s: float | None = Field(None, gt=0, description="Generate arrivals until this time.")
    prefix_groups: int = Field(0, ge=0, description="Requests share one of N prompt prefixes (0 = none).")
    prefix_len: int = Field(0, ge=0, description="Shared prefix length in tokens.")
    n: int = Field(1, ge=1, le=64, description=(
        "Parallel samples per request (vLLM SamplingParams.n); the samples share the prompt's KV blocks."))
    best_of_prune_at: int | None = Field(None, ge=1, description=(
        "Best-of-N with early pruning: after this many output tokens only best_of_keep samples go on."))
    best_of_keep: int = Field(1, ge=1, description="Samples kept at best_of_prune_at.")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> SyntheticWorkload:
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")
        return self


class TraceWorkload(_Strict):
    type: Literal["trace"] = "trace"
    path: str = Field(description="Trace file; 'builtin:azure_conv' names the bundled Azure trace.")
    format: Literal["auto", "azure", "mooncake", "generic"] = Field("auto")
    rate_scale: float = Field(1.0, gt=0, description="Multiply the arrival rate (divide timestamps).")
    limit: int | None = Field(None, ge=1, description="Take the first N requests.")
    start_s: float | None = Field(None, ge=0, description="Keep requests arriving at or after this time.")
    end_s: float | None = Field(None, gt=0, description="Keep requests arriving before this time.")
    hash_block_tokens: int = Field(512, ge=1, description="Tokens per hash id (Mooncake: 512).")


WorkloadConfig = Annotated[SyntheticWorkload | TraceWorkload, Field(discriminator="type")]


# --------------------------------------------------------------------------- SLOs / run


class SloConfig(_Strict):
    ttft_s: float | None = Field(None, gt=0, description="Time-to-first-token limit.")
    tpot_s: float | None = Field(None, gt=0, description="Mean time-per-output-token limit.")
    e2e_s: float | None = Field(None, gt=0, description="End-to-end latency limit.")


class RunConfig(_Strict):
    seed: int = 0
    reference: bool = Field(False, description="Use the step-by-step reference engine (slow oracle).")
    check_invariants: bool = Field(False, description="Assert engine invariants every step (debug).")
    record_steps: bool = Field(True, description=(
        "Keep the per-step series (steps.parquet). Off for very long runs: memory then stays "
        "at about 80 bytes a request plus the requests in flight."))


# --------------------------------------------------------------------------- cluster

RouterName = Literal["round_robin", "random", "least_outstanding", "least_kv", "least_work",
                     "power_of_two", "prefix_affinity", "predicted_ttft"]


class PoolConfig(_Strict):
    """Identical replicas (data parallelism): GPU type, parallelism and engine of each."""

    name: str
    role: Literal["colocated", "prefill", "decode"] = Field(
        "colocated", description="colocated serves whole requests; prefill/decode split them.")
    num_replicas: int = Field(1, ge=1)
    gpu: str | GpuConfig | None = Field(None, description="Catalog name or custom GPU; None: hardware.gpu.")
    parallel: ParallelConfig | None = Field(None, description="None: the scenario's parallel section.")
    engine: EngineConfig | None = Field(None, description="None: the scenario's engine section.")
    links: LinksConfig = LinksConfig()


class KvLinkConfig(_Strict):
    """The link KV caches cross between replicas (disaggregation, migration)."""

    bandwidth_gbps: float | None = Field(None, gt=0, description=(
        "GB/s one way of one link; None: the sender's per-GPU network bandwidth x min(GPUs of "
        "sender, receiver), as each TP rank sends its shard over its own NIC."))
    latency_us: float | None = Field(None, ge=0, description="None: the catalog's network latency.")
    shared_by: Literal["receiver", "sender", "cluster"] = Field(
        "receiver", description="Transfers into one replica (or out of one, or all) share one link equally.")


class DisaggConfig(_Strict):
    decode_prefill_fraction: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "Balanced disaggregation (MicroServing): the decode replica computes this tail fraction "
        "of the prompt and the first token."))
    colocate_below_tokens: int = Field(0, ge=0, description=(
        "Prompts shorter than this skip the prefill pool and are served whole by a decode replica."))


class MigrationConfig(_Strict):
    enabled: bool = Field(False, description="Llumnix-style live migration of running requests.")
    interval_s: float = Field(0.5, gt=0, description="How often the most and least loaded are compared.")
    threshold: float = Field(0.2, gt=0, le=1, description="KV-load gap (fraction of blocks) that migrates.")


class ClusterConfig(_Strict):
    """Pools of replicas behind a router; absent means the single replica of the scenario."""

    pools: list[PoolConfig] = Field(min_length=1)
    router: RouterName = Field("round_robin", description="Picks a replica (servesim.cluster.router).")
    decode_router: RouterName | None = Field(None, description="Router of the decode pool; None: router.")
    staleness_s: float = Field(0.0, ge=0, description="The router sees replica state this long ago.")
    prefix_load_cap: int = Field(8, ge=0, description=(
        "prefix_affinity: only replicas with at most this many more outstanding requests than the "
        "least loaded compete."))
    link: KvLinkConfig = KvLinkConfig()
    disaggregation: DisaggConfig = DisaggConfig()
    migration: MigrationConfig = MigrationConfig()

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        roles = {p.role for p in self.pools}
        if ("prefill" in roles) != ("decode" in roles):
            raise ValueError("a disaggregated cluster needs both a prefill and a decode pool")
        if "prefill" in roles and "colocated" in roles:
            raise ValueError("mixing colocated and prefill/decode pools is not supported; use "
                             "disaggregation.colocate_below_tokens to serve short prompts on decode replicas")
        return self


class Scenario(_Strict):
    """One simulation: model on hardware with an engine config, serving a workload."""

    name: str = "scenario"
    model: ModelConfig = ModelConfig()
    hardware: HardwareConfig = HardwareConfig()
    parallel: ParallelConfig = ParallelConfig()
    engine: EngineConfig = EngineConfig()
    workload: WorkloadConfig = TraceWorkload(path="builtin:azure_conv")
    slo: SloConfig = SloConfig(ttft_s=2.0, tpot_s=0.1)
    run: RunConfig = RunConfig()
    cluster: ClusterConfig | None = Field(None, description=(
        "Pools, router, disaggregation (docs/cluster.md); None: one replica of hardware/parallel/engine."))


# --------------------------------------------------------------------------- loading


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = d
    for k in keys[:-1]:
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[k] = nxt
        cur = nxt
    cur[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``engine.max_num_seqs=64`` -> ("engine.max_num_seqs", 64); values parse as YAML scalars."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, for example engine.max_num_seqs=64")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _format_validation_error(err: Any, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if not (isinstance(p, str) and p in ("synthetic", "trace")))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = e.get("input")
        quiet = isinstance(got, dict) or e["type"] in ("extra_forbidden", "missing")
        got_s = "" if quiet else f" (got {got!r})"
        lines.append(f"{source}: {loc or '<root>'}: {msg}{got_s}")
    return "\n".join(lines)


def scenario_from_dict(data: dict[str, Any], source: str = "<scenario>",
                       overrides: list[str] | None = None) -> Scenario:
    from pydantic import ValidationError

    data = dict(data or {})
    if overrides and "workload" not in data and any(o.startswith("workload.") for o in overrides):
        # Overriding a field of the default workload: start from the default's fields.
        data["workload"] = Scenario.model_fields["workload"].default.model_dump(exclude_defaults=True)
        data["workload"]["type"] = "trace"
    for text in overrides or []:
        key, value = parse_override(text)
        _set_path(data, key, value)
    wl = data.get("workload")
    if isinstance(wl, dict) and "type" not in wl:
        # The type may be left out when it is obvious: a trace names its path.
        data["workload"] = {**wl, "type": "trace" if "path" in wl else "synthetic"}
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None


def load_scenario(path: str | Path | None = None, overrides: list[str] | None = None) -> Scenario:
    """Read a YAML or TOML scenario file (or the built-in default when ``path`` is None)."""
    if path is None:
        return scenario_from_dict({}, "<default scenario>", overrides)
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such scenario file")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as err:  # noqa: BLE001 - parser errors differ by library
        raise ConfigError(f"{p}: cannot parse: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, found {type(data).__name__}")
    scenario = scenario_from_dict(data, str(p), overrides)
    return _resolve_relative_paths(scenario, p.parent)


def _resolve_relative_paths(s: Scenario, base: Path) -> Scenario:
    """Trace, model and hardware-profile paths in a scenario file are relative to the file."""

    def fix(path: str | None) -> str | None:
        if path is None or path.startswith("builtin:"):
            return path
        q = Path(path).expanduser()
        if not q.is_absolute() and (base / q).exists():
            return str(base / q)
        return path

    updates: dict[str, Any] = {}
    wl = s.workload
    if isinstance(wl, TraceWorkload):
        updates["workload"] = wl.model_copy(update={"path": fix(wl.path)})
    elif isinstance(wl, SyntheticWorkload):
        upd = {}
        for fld in ("prompt_len", "output_len"):
            dist = getattr(wl, fld)
            if dist.trace:
                upd[fld] = dist.model_copy(update={"trace": fix(dist.trace)})
        if upd:
            updates["workload"] = wl.model_copy(update=upd)
    if s.hardware.profile:
        fixed = fix(s.hardware.profile)
        if fixed != s.hardware.profile:
            updates["hardware"] = s.hardware.model_copy(update={"profile": fixed})
    name = s.model.name
    if "/" in name or name.endswith(".json"):
        fixed = fix(name)
        if fixed != name:
            updates["model"] = s.model.model_copy(update={"name": fixed})
    return s.model_copy(update=updates) if updates else s
