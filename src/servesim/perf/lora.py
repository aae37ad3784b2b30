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

Simplifications: the kernels are timed on a roofline (FLOPs at ``kernel_flops_efficiency``
of peak, bytes at ``kernel_bandwidth_efficiency`` of HBM bandwidth, whichever is longer)
plus a fixed cost per kernel, not from measurements; the tensor-parallel all-gather of a
row-parallel layer's shrink output (r values per token) is left out; CUDA graphs are taken
to be captured with LoRA (vLLM's ``cudagraph_specialize_lora``, on by default), so they
change nothing; dense models only (vLLM's fused-MoE LoRA and MLA layers are not modelled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servesim.catalog.gpus import GpuSpec
from servesim.catalog.models import ModelSpec
from servesim.config import EngineConfig, ParallelConfig
from servesim.config.lora import LORA_MODULES, LoraConfig
from servesim.errors import ConfigError
from servesim.perf.base import BatchStats, PerfModel

#: Wrapped layers per decoder layer (qkv, o, gate_up, down): each runs a shrink and an expand.
LORA_LAYERS_PER_DECODER_LAYER = 4
_FP32_BYTES = 4


def lora_dtype_bytes(lora: LoraConfig, model: ModelSpec) -> float:
    """Bytes per adapter weight: 2 for float16/bfloat16; auto takes the model's dtype (a
    quantized base model's adapters stay in its 16-bit activation dtype)."""
    return 4.0 if lora.lora_dtype == "auto" and model.dtype == "float32" else 2.0


def module_dims(model: ModelSpec, tp: int = 1) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) on one of ``tp`` GPUs of each wrapped module (Hugging Face names).

    Column-parallel q/k/v/gate/up shard d_out; row-parallel o/down shard d_in. K and V
    heads are replicated when there are fewer than ``tp`` (vLLM's QKVParallelLinear).
    """
    if model.num_experts or model.kv_lora_rank or model.q_lora_rank:
        raise ConfigError(
            f"engine.lora: {model.name} has experts or MLA attention; LoRA is modelled for dense "
            "models with standard attention only"
        )
    h, hd = model.hidden_size, model.head_dim
    q = model.num_attention_heads * hd
    kv = max(1, model.num_kv_heads // tp) * hd
    inter = model.intermediate_size
    return {
        "q_proj": (h, q // tp),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q // tp, h),
        "gate_proj": (h, inter // tp),
        "up_proj": (h, inter // tp),
        "down_proj": (inter // tp, h),
    }


def _sum_dims(dims: dict[str, tuple[int, int]], modules: Sequence[str]) -> int:
    return sum(dims[m][0] + dims[m][1] for m in modules)


@dataclass(frozen=True, slots=True)
class LoraCosts:
    """The LoRA figures of one GPU of a deployment (``lora_costs`` builds it).

    elems_per_rank: sum over this GPU's layers and wrapped modules of (d_in + d_out): the
        weights of one adapter slot are ``max_lora_rank x elems_per_rank`` values.
    act_elems_per_token: sum over the layers and modules of (d_in + 2 d_out): activation
        values the shrink and expand kernels move per token.
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

    @property
    def buffer_bytes(self) -> float:
        """GPU memory of the stacked A/B buffers: max_loras slots of max_lora_rank."""
        return self.max_loras * self.max_lora_rank * self.elems_per_rank * self.weight_bytes

    def flops(self, num_lora_tokens: int) -> float:
        """Shrink + expand FLOPs of a step: 2 x tokens x max_lora_rank x sum(d_in + d_out)."""
        return 2.0 * num_lora_tokens * self.max_lora_rank * self.elems_per_rank

    def bytes(self, num_lora_tokens: int, num_loras: int) -> float:
        """HBM bytes of a step's shrink and expand kernels: the weights of its ``num_loras``
        adapters, the tokens' activations and the float32 intermediate."""
        if num_lora_tokens == 0:
            return 0.0
        weights = num_loras * self.max_lora_rank * self.elems_per_rank * self.weight_bytes
        acts = num_lora_tokens * self.act_elems_per_token * self.act_bytes
        slices = self.num_layers * len(LORA_MODULES)  # one intermediate per slice
        inter = 2 * num_lora_tokens * self.max_lora_rank * slices * _FP32_BYTES
        return weights + acts + inter

    def kernel_s(self, num_lora_tokens: int, num_loras: int) -> float:
        """Time of a step's shrink and expand kernels (0 without adapter tokens)."""
        if num_lora_tokens == 0:
            return 0.0
        compute = self.flops(num_lora_tokens) / (self.peak_flops * self.flops_efficiency)
        memory = self.bytes(num_lora_tokens, num_loras) / (self.hbm_bytes_per_s * self.bandwidth_efficiency)
        launches = 2 * LORA_LAYERS_PER_DECODER_LAYER * self.num_layers
        return launches * self.kernel_overhead_s + max(compute, memory)

    def load_s(self, adapter: int, from_disk: bool) -> float:
        """Seconds to make ``adapter`` resident: its checkpoint read from disk (when not in
        host memory) plus this GPU's shard copied over PCIe."""
        disk, gpu = self.adapter_bytes[adapter]
        return (disk / self.disk_bytes_per_s if from_disk else 0.0) + gpu / self.pcie_bytes_per_s


def lora_costs(
    lora: LoraConfig, model: ModelSpec, gpu: GpuSpec, tp: int = 1, pp: int = 1, pcie_gb_per_s: float = 25.0
) -> LoraCosts:
    """The LoRA figures of one GPU of ``model`` on ``gpu`` with ``tp`` x ``pp`` (``lora`` enabled)."""
    dims = module_dims(model, tp)
    full = module_dims(model, 1)
    layers = -(-model.num_layers // pp)
    wb = lora_dtype_bytes(lora, model)
    per_layer = _sum_dims(dims, LORA_MODULES)
    adapter_bytes = [(0.0, 0.0)]
    for a in lora.adapter_list():
        targets = a.target_modules or lora.target_modules
        disk = a.rank * model.num_layers * _sum_dims(full, targets) * wb
        on_gpu = a.rank * layers * _sum_dims(dims, targets) * wb
        adapter_bytes.append((disk, on_gpu))
    return LoraCosts(
        max_loras=lora.max_loras,
        max_lora_rank=lora.max_lora_rank,
        num_layers=layers,
        elems_per_rank=layers * per_layer,
        act_elems_per_token=layers * sum(d_in + 2 * d_out for d_in, d_out in dims.values()),
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
    )
    return LoraCostModel(perf, costs)
