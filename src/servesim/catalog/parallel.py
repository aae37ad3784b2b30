"""Which parallel layouts a model admits: the ones vLLM would start.

vLLM refuses a tensor-parallel size that does not divide the attention heads
(``ModelConfig.verify_with_parallel_config``), and shards KV heads only evenly: each rank
holds ``num_kv_heads / tp`` of them, or, with fewer KV heads than ranks, one KV head that
``tp / num_kv_heads`` ranks replicate (``QKVParallelLinear``), so one of the two must divide
the other. servesim's expert parallelism spreads the experts evenly over the EP groups (each
holds ``num_experts / ep``), so the EP size must divide the experts; vLLM would give the
remainder to the first ranks, whose extra experts this model does not time.

Each pipeline stage needs at least one layer (vLLM's ``get_pp_indices`` gives every stage a
slice of the layers), so the PP size cannot exceed the layers.

A pure function of the model and the parallel config, checked wherever the two meet (one
replica, and every pool of a cluster), so no layout vLLM refuses reaches the perf model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.catalog.models import ModelSpec
    from servesim.config import ParallelConfig


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_parallel(model: ModelSpec, parallel: ParallelConfig, field: str = "parallel") -> None:
    """Raise a ConfigError naming ``field``'s entry when ``parallel`` is a layout vLLM (or
    servesim's even expert split) cannot run ``model`` with."""
    tp, ep = parallel.tensor_parallel_size, parallel.expert_parallel_size
    pp = parallel.pipeline_parallel_size
    heads, kv = model.num_attention_heads, model.num_kv_heads
    if pp > model.num_layers:
        raise ConfigError(
            f"{field}.pipeline_parallel_size: {pp} exceeds the {model.num_layers} layers "
            f"of {model.name}: each pipeline stage needs at least one layer"
        )
    if heads % tp:
        raise ConfigError(
            f"{field}.tensor_parallel_size: {tp} does not divide the {heads} attention heads of "
            f"{model.name} (vLLM requires it); expected one of {_divisors(heads)}"
        )
    if kv % tp and tp % kv:
        raise ConfigError(
            f"{field}.tensor_parallel_size: {tp} neither divides the {kv} KV heads of {model.name} "
            f"nor is a multiple of them (vLLM splits KV heads evenly over the ranks or replicates "
            f"each on a whole number of ranks)"
        )
    la = model.linear_attention  # Gated DeltaNet: key and value heads split by TP (vLLM's divide)
    if la is not None and (la.num_key_heads % tp or la.num_value_heads % tp):
        raise ConfigError(
            f"{field}.tensor_parallel_size: {tp} does not divide the {la.num_key_heads} linear-attention "
            f"key heads and {la.num_value_heads} value heads of {model.name} (vLLM splits both); "
            f"expected one of {_divisors(la.num_key_heads)}"
        )
    if ep > 1 and not model.is_moe:
        raise ConfigError(f"{field}.expert_parallel_size: {ep}, but {model.name} has no experts; expected 1")
    if ep > 1 and model.num_experts % ep:
        raise ConfigError(
            f"{field}.expert_parallel_size: {ep} does not divide the {model.num_experts} experts of "
            f"{model.name}; expected one of {_divisors(model.num_experts)} (that also divides "
            f"tensor_parallel_size {tp})"
        )
