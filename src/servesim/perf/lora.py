"""What LoRA adapters cost a step, the GPU memory and the loads: vLLM's punica path.

Modelled on vLLM v0.11-v0.19 (``vllm/lora/layers/*``, ``vllm/lora/ops/triton_ops/``
``lora_shrink_op.py`` and ``lora_expand_op.py``, ``vllm/lora/model_manager.py``,
``vllm/lora/worker_manager.py``):

* **Wrapped layers.** With ``--enable-lora`` every linear layer of the decoder is replaced
  by its LoRA twin: ``qkv_proj`` (slices q, k, v), ``o_proj``, ``gate_up_proj`` (slices gate,
  up), ``down_proj``. Each holds stacked buffers ``lora_a_stacked`` (max_loras x
  max_lora_rank x d_in) and ``lora_b_stacked`` (max_loras x d_out x max_lora_rank) per slice,
  allocated when the model loads, so they are part of the weights the profiling run sees
  and come out of the KV cache. With tensor parallelism (``fully_sharded_loras`` off, the
  default) a column-parallel layer keeps A whole and shards B's d_out, a row-parallel one
  (o, down) shards A's d_in and keeps B whole.
* **Kernels.** Each wrapped layer runs one shrink (x @ A^T: 2 r d_in FLOPs per token and
  slice) and one expand (y += s @ B^T: 2 r d_out FLOPs per token and slice) over the tokens
  of requests with an adapter (tokens of the base model carry lora id -1 and are skipped).
  ``r`` is max_lora_rank: an adapter of lower rank sits zero-padded in its slot, and the
  kernels run over the slot's full rank. The kernels read the weights of the step's
  distinct adapters, the tokens' activations (shrink: x; expand: y read and written) and a
  float32 intermediate of r values per token and slice (written by shrink, read by expand).
  A module an adapter does not hold is a zeroed slot: the kernels run over it all the same.
* **Loads.** An adapter not in host memory is read from disk whole (every module it holds,
  every layer: ``LoRAModel.from_local_checkpoint`` on the CPU); one not in a GPU slot is
  copied host to GPU (this GPU's shard). Both happen inside the step that first needs
  it (``set_active_adapters`` before the forward pass), so the step waits for them.

* **Experts** (vLLM 0.11.1 and later: ``FusedMoEWithLoRA``, ``vllm/lora/layers/fused_moe.py``,
  first in 0.11.1, absent from 0.11.0; ``vllm/lora/ops/triton_ops/fused_moe_lora_op.py``).
  An MoE layer's experts get stacked buffers per slot and expert, ``w1``/``w3`` (gate, up:
  A r x hidden, B intermediate/tp x r) and ``w2`` (down: A r x intermediate/tp, B hidden x r),
  3 r (hidden + intermediate/tp) values per expert, all of the layer's experts (no expert
  parallelism: vLLM asserts it off). Each MoE layer runs ``moe_lora_align_block_size`` (the
  tokens sorted by adapter, then expert) and two ``fused_moe_lora`` calls, gate/up before the
  activation and down before the sum, each a shrink and an expand over every (token, chosen
  expert) pair with an adapter: 2 r x 3 (hidden + intermediate/tp) FLOPs per pair. They read
  the A/B weights of each (adapter, expert) pair the step routes to, taken as the step's
  adapter tokens split evenly over its adapters and routed uniformly (an adapter with n
  tokens touches E (1 - (1 - k/E)^n) of the E experts). The intermediate of r values per
  pair and slice is in the activation dtype (16-bit), not float32. Attention, shared experts
  and the dense layers' MLPs keep the dense path above. Before 0.11.1 vLLM wraps no expert
  (``is_moe_model`` warns that adapters must not hold expert weights): refused.

Simplifications: the kernels are timed on a roofline (FLOPs at ``kernel_flops_efficiency``
of peak, bytes at ``kernel_bandwidth_efficiency`` of HBM bandwidth, whichever is longer)
plus a fixed cost per kernel, not from measurements; the tensor-parallel all-gather of a
row-parallel layer's shrink output (r values per token) is left out; CUDA graphs are taken
to be captured with LoRA (vLLM's ``cudagraph_specialize_lora``, on by default), so they
change nothing; MLA attention (DeepSeek, Kimi) is not modelled (refused). Experts: the
padding of each (adapter, expert) group of tokens to the kernel's BLOCK_SIZE_M is not
counted; the zeroed intermediates and the add of the expand's output are counted for the
adapter tokens only (vLLM runs them over the step's tokens); the router gate's LoRA twin
(hidden x experts) is left out; the base experts keep the kernel servesim times for the
version (vLLM switches a LoRA model's experts to its Triton fused-MoE kernel, Marlin for
MXFP4); which architectures declare LoRA support (``SupportsLoRA``: Mixtral, Qwen2-MoE,
Qwen3-MoE, gpt-oss in 0.11.1; not MiniMax-M2) is not checked; with pipeline parallelism
the largest stage is taken to hold ceil(L/pp) of the dense and of the MoE layers each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.config import EngineConfig, ParallelConfig
from servesim.config.lora import LoraConfig
from servesim.config.vllm_version import VLLM_DEFAULT_VERSION, version_tuple
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats, PerfModel
from servesim.perf.pipelined import stage_head_s

#: Wrapped layers per decoder layer (qkv, o, gate_up, down): each runs a shrink and an expand.
LORA_LAYERS_PER_DECODER_LAYER = 4
_FP32_BYTES = 4
#: The first vLLM version with LoRA on fused-MoE experts (``FusedMoEWithLoRA``).
MOE_LORA_SINCE = "0.11.1"
#: Kernels of one MoE layer's expert LoRA: moe_lora_align_block_size, then a shrink and an
#: expand for gate/up and for down.
MOE_LORA_KERNELS_PER_LAYER = 5
_ATTENTION: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP: tuple[str, ...] = ("gate_proj", "up_proj", "down_proj")


def lora_dtype_bytes(lora: LoraConfig, model: ModelSpec) -> float:
    """Bytes per adapter weight: 2 for float16/bfloat16; auto takes the model's dtype (a
    quantized base model's adapters stay in its 16-bit activation dtype)."""
    return 4.0 if lora.lora_dtype == "auto" and model.dtype == "float32" else 2.0


def check_lora_model(model: ModelSpec, version: str, ep: int = 1, dp: int = 1) -> None:
    """vLLM's refusals (and servesim's) of LoRA on ``model``: MLA attention is not modelled;
    experts need vLLM 0.11.1 (``FusedMoEWithLoRA``) and no expert or data parallelism."""
    if model.kv_lora_rank or model.q_lora_rank:
        raise ConfigError(
            f"engine.lora: {model.name} has MLA attention; LoRA is modelled for standard "
            "attention only (dense models, and MoE models from vLLM 0.11.1)"
        )
    if not model.num_experts:
        return
    if version_tuple(version) < version_tuple(MOE_LORA_SINCE):
        raise ConfigError(
            f"engine.lora: {model.name} has experts; vLLM {version} has no LoRA for them (fused-MoE "
            f"LoRA, FusedMoEWithLoRA, first appears in vLLM {MOE_LORA_SINCE}): expected "
            f"engine.version {MOE_LORA_SINCE} or later, or a dense model"
        )
    if ep > 1 or dp > 1:
        raise ConfigError(
            f"engine.lora: {model.name} has experts; vLLM's fused-MoE LoRA runs without expert "
            "parallelism (it asserts use_ep off) and servesim models it without data parallelism: "
            "expected parallel.expert_parallel_size and data_parallel_size 1"
        )


def module_dims(model: ModelSpec, tp: int = 1, inter: int | None = None) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) on one of ``tp`` GPUs of each wrapped linear module (Hugging Face names),
    the MLP ``inter`` wide (None: the dense ``intermediate_size``; an MoE model's shared
    expert or one expert: theirs).

    Column-parallel q/k/v/gate/up shard d_out; row-parallel o/down shard d_in. K and V
    heads are replicated when there are fewer than ``tp`` (vLLM's QKVParallelLinear).
    """
    if model.kv_lora_rank or model.q_lora_rank:
        raise ConfigError(
            f"engine.lora: {model.name} has MLA attention; LoRA is modelled for standard attention only"
        )
    h, hd = model.hidden_size, model.head_dim
    q = model.num_attention_heads * hd
    kv = max(1, model.num_kv_heads // tp) * hd
    inter = model.intermediate_size if inter is None else inter
    return {
        "q_proj": (h, q // tp),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q // tp, h),
        "gate_proj": (h, inter // tp),
        "up_proj": (h, inter // tp),
        "down_proj": (inter // tp, h),
    }


def _split_layers(model: ModelSpec, pp: int) -> tuple[int, int]:
    """(dense-MLP layers, MoE layers) on the largest of ``pp`` stages (ceil of each)."""
    moe = model.num_layers - model.num_dense_layers if model.num_experts else 0
    dense = model.num_layers - moe
    return -(-dense // pp), -(-moe // pp)


def _target_elems(model: ModelSpec, tp: int, pp: int, targets: Sequence[str]) -> int:
    """Values per unit of rank of an adapter holding ``targets`` on one GPU (tp, pp): the
    attention modules of every layer, the MLP ones of the dense layers, and on MoE layers those
    of the shared expert and of every expert."""
    dense_layers, moe_layers = _split_layers(model, pp)
    layers = dense_layers + moe_layers
    attn = [m for m in targets if m in _ATTENTION]
    mlp = [m for m in targets if m in _MLP]
    total = layers * _sum_dims(module_dims(model, tp), attn) + dense_layers * _sum_dims(
        module_dims(model, tp), mlp
    )
    if moe_layers:
        shared = model.shared_expert_intermediate_size
        if shared:
            total += moe_layers * _sum_dims(module_dims(model, tp, shared), mlp)
        expert = module_dims(model, tp, model.moe_intermediate_size)
        total += moe_layers * model.num_experts * _sum_dims(expert, mlp)
    return total


def _sum_dims(dims: dict[str, tuple[int, int]], modules: Sequence[str]) -> int:
    return sum(dims[m][0] + dims[m][1] for m in modules)


@dataclass(frozen=True, slots=True)
class LoraCosts:
    """The LoRA figures of one GPU of a deployment (``lora_costs`` builds it).

    elems_per_rank: sum over this GPU's layers and the dense path's wrapped modules
        (attention; the MLP of dense layers; an MoE layer's shared expert) of (d_in + d_out).
    act_elems_per_token: sum over the same of (d_in + 2 d_out): activation values the shrink
        and expand kernels move per token.
    expert_elems_per_rank: 3 (hidden + expert width / tp): the A/B values of one expert of one
        MoE layer (w1, w3, w2) per unit of rank; 0 for a dense model.
    expert_act_elems: sum over one expert's gate, up and down of (d_in + 2 d_out).
    """

    max_loras: int
    max_lora_rank: int
    num_layers: int  # on this GPU (the largest pipeline stage)
    elems_per_rank: int
    act_elems_per_token: int
    weight_bytes: float  # per adapter weight
    act_bytes: float  # per activation value
    peak_flops: float
    hbm_bytes_per_s: float
    flops_efficiency: float
    bandwidth_efficiency: float
    kernel_overhead_s: float
    disk_bytes_per_s: float
    pcie_bytes_per_s: float
    #: Adapter id (1-based, in LoraConfig.adapter_list order) -> (bytes on disk, bytes
    #: copied to this GPU); index 0 is the base model (nothing to load).
    adapter_bytes: tuple[tuple[float, float], ...]
    num_slices: int = 0  # the dense path's slices on this GPU (one fp32 intermediate each)
    num_wrapped: int = 0  # the dense path's wrapped linear layers (a shrink and an expand each)
    num_moe_layers: int = 0  # MoE layers on this GPU (their experts wrapped: vLLM 0.11.1+)
    num_experts: int = 0  # experts of each MoE layer on this GPU (all: no expert parallelism)
    top_k: int = 0  # experts each token is routed to
    expert_elems_per_rank: int = 0
    expert_act_elems: int = 0

    @property
    def slot_elems_per_rank(self) -> int:
        """Values of one adapter slot per unit of rank on this GPU: dense path and experts."""
        return self.elems_per_rank + self.num_moe_layers * self.num_experts * self.expert_elems_per_rank

    @property
    def buffer_bytes(self) -> float:
        """GPU memory of the stacked A/B buffers: max_loras slots of max_lora_rank."""
        return self.max_loras * self.max_lora_rank * self.slot_elems_per_rank * self.weight_bytes

    def flops(self, num_lora_tokens: int) -> float:
        """Shrink + expand FLOPs of a step: 2 x tokens x max_lora_rank x (the dense path's
        sum of (d_in + d_out), plus top_k experts' on each MoE layer)."""
        per_token = self.elems_per_rank + self.num_moe_layers * self.top_k * self.expert_elems_per_rank
        return 2.0 * num_lora_tokens * self.max_lora_rank * per_token

    def experts_touched(self, num_lora_tokens: int, num_loras: int) -> float:
        """Expected (adapter, expert) pairs of one MoE layer a step routes to: its adapter
        tokens split evenly over its ``num_loras`` adapters, each token picking ``top_k``
        of the ``num_experts`` uniformly: E (1 - (1 - k/E)^(tokens / adapters)) per adapter."""
        if not self.num_moe_layers or num_lora_tokens == 0:
            return 0.0
        e, k = self.num_experts, self.top_k
        per_adapter = num_lora_tokens / max(num_loras, 1)
        return max(num_loras, 1) * e * (1.0 - (1.0 - k / e) ** per_adapter)

    def bytes(self, num_lora_tokens: int, num_loras: int) -> float:
        """HBM bytes of a step's shrink and expand kernels: the weights of its ``num_loras``
        adapters (on MoE layers, of the experts its tokens route to), the tokens' activations
        and the intermediates (float32 on the dense path, 16-bit on the experts')."""
        if num_lora_tokens == 0:
            return 0.0
        r = self.max_lora_rank
        weights = num_loras * r * self.elems_per_rank * self.weight_bytes
        acts = num_lora_tokens * self.act_elems_per_token * self.act_bytes
        inter = 2.0 * num_lora_tokens * r * self.num_slices * _FP32_BYTES
        if self.num_moe_layers:
            pairs = num_lora_tokens * self.top_k * self.num_moe_layers  # (token, expert) pairs
            touched = self.experts_touched(num_lora_tokens, num_loras) * self.num_moe_layers
            weights += touched * r * self.expert_elems_per_rank * self.weight_bytes
            acts += pairs * self.expert_act_elems * self.act_bytes
            inter += 2 * pairs * r * 3 * self.act_bytes  # w1, w3, w2: written by shrink, read by expand
        return weights + acts + inter

    def kernel_s(self, num_lora_tokens: int, num_loras: int) -> float:
        """Time of a step's shrink and expand kernels (0 without adapter tokens)."""
        if num_lora_tokens == 0:
            return 0.0
        compute = self.flops(num_lora_tokens) / (self.peak_flops * self.flops_efficiency)
        memory = self.bytes(num_lora_tokens, num_loras) / (self.hbm_bytes_per_s * self.bandwidth_efficiency)
        launches = 2 * self.num_wrapped + MOE_LORA_KERNELS_PER_LAYER * self.num_moe_layers
        return launches * self.kernel_overhead_s + max(compute, memory)

    def load_s(self, adapter: int, from_disk: bool) -> float:
        """Seconds to make ``adapter`` resident: its checkpoint read from disk (when not in
        host memory) plus this GPU's shard copied over PCIe."""
        disk, gpu = self.adapter_bytes[adapter]
        return (disk / self.disk_bytes_per_s if from_disk else 0.0) + gpu / self.pcie_bytes_per_s


def lora_costs(
    lora: LoraConfig,
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int = 1,
    pp: int = 1,
    pcie_gb_per_s: float = 25.0,
    version: str = VLLM_DEFAULT_VERSION,
    ep: int = 1,
    dp: int = 1,
) -> LoraCosts:
    """The LoRA figures of one GPU of ``model`` on ``gpu`` with ``tp`` x ``pp`` (``lora``
    enabled) under vLLM ``version`` (experts: 0.11.1 and later, ``check_lora_model``)."""
    check_lora_model(model, version, ep, dp)
    dense_layers, moe_layers = _split_layers(model, pp)
    layers = dense_layers + moe_layers
    wb = lora_dtype_bytes(lora, model)
    dims = module_dims(model, tp)
    attn = {m: dims[m] for m in _ATTENTION}
    mlp = {m: dims[m] for m in _MLP}
    shared = module_dims(model, tp, model.shared_expert_intermediate_size) if moe_layers else {}
    shared_mlp = {m: shared[m] for m in _MLP} if model.shared_expert_intermediate_size else {}
    expert = {m: d for m, d in module_dims(model, tp, model.moe_intermediate_size).items() if m in _MLP}

    def acts(ds: dict[str, tuple[int, int]]) -> int:
        return sum(d_in + 2 * d_out for d_in, d_out in ds.values())

    def elems(ds: dict[str, tuple[int, int]]) -> int:
        return sum(d_in + d_out for d_in, d_out in ds.values())

    # The dense path: attention everywhere; the MLP on dense layers, the shared expert on MoE ones.
    mlp_layers = (dense_layers, mlp), (moe_layers, shared_mlp)
    adapter_bytes = [(0.0, 0.0)]
    for a in lora.adapter_list():
        targets = a.target_modules or lora.target_modules
        disk = a.rank * _target_elems(model, 1, 1, targets) * wb
        on_gpu = a.rank * _target_elems(model, tp, pp, targets) * wb
        adapter_bytes.append((disk, on_gpu))
    return LoraCosts(
        max_loras=lora.max_loras,
        max_lora_rank=lora.max_lora_rank,
        num_layers=layers,
        elems_per_rank=layers * elems(attn) + sum(n * elems(ds) for n, ds in mlp_layers),
        act_elems_per_token=layers * acts(attn) + sum(n * acts(ds) for n, ds in mlp_layers),
        weight_bytes=wb,
        act_bytes=2.0,
        peak_flops=gpu.flops_for("bfloat16"),
        hbm_bytes_per_s=gpu.mem_bw,
        flops_efficiency=lora.kernel_flops_efficiency,
        bandwidth_efficiency=lora.kernel_bandwidth_efficiency,
        kernel_overhead_s=lora.kernel_overhead_s,
        disk_bytes_per_s=lora.disk_gb_per_s * 1e9,
        pcie_bytes_per_s=pcie_gb_per_s * 1e9,
        adapter_bytes=tuple(adapter_bytes),
        num_slices=layers * len(attn) + sum(n * len(ds) for n, ds in mlp_layers),
        # qkv and o per layer; gate_up and down per dense MLP or shared expert
        num_wrapped=2 * layers + sum(2 * n for n, ds in mlp_layers if ds),
        num_moe_layers=moe_layers,
        num_experts=model.num_experts if moe_layers else 0,
        top_k=model.num_experts_per_tok if moe_layers else 0,
        expert_elems_per_rank=elems(expert) if moe_layers else 0,
        expert_act_elems=acts(expert) if moe_layers else 0,
    )


@dataclass(slots=True)
class LoraCostModel:
    """``base`` plus a step's LoRA kernels and adapter loads (``BatchStats.num_lora_tokens``,
    ``num_loras``, ``lora_load_s``, which ``engine.lora.LoraScheduler`` fills)."""

    base: PerfModel
    costs: LoraCosts

    def batch_time(self, stats: BatchStats) -> float:
        t = self.base.batch_time(stats)
        if stats.num_lora_tokens:
            t += self.costs.kernel_s(stats.num_lora_tokens, stats.num_loras)
        return t + stats.lora_load_s

    def last_stage_s(self, stats: BatchStats) -> float:
        """The wrapped model's last-stage share (``perf.pipelined.stage_times``)."""
        return stage_head_s(self.base, stats)

    def batch_flops(self, stats: BatchStats) -> float:
        return self.base.batch_flops(stats) + self.costs.flops(stats.num_lora_tokens)

    def batch_bytes(self, stats: BatchStats) -> float:
        return self.base.batch_bytes(stats) + self.costs.bytes(stats.num_lora_tokens, stats.num_loras)


def lora_perf_model(
    engine: EngineConfig, model: ModelSpec, gpu: GpuSpec, parallel: ParallelConfig, perf: PerfModel
) -> PerfModel:
    """``perf``, plus the LoRA kernels and loads where ``engine.lora`` is enabled."""
    if not engine.lora.enabled:
        return perf
    costs = lora_costs(
        engine.lora,
        model,
        gpu,
        parallel.tensor_parallel_size,
        parallel.pipeline_parallel_size,
        engine.pcie_gb_per_s,
        engine.version,
        parallel.expert_parallel_size,
        parallel.data_parallel_size,
    )
    return LoraCostModel(perf, costs)
