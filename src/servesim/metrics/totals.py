"""What a replica accumulates over the run (``ReplicaTotals``, with its KV offload tiers'
``OffloadTotals``): the engine adds to them at every step, so they are compiled with it
(mypyc, ``setup.py``): a field's update is a native attribute write, not a lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim.catalog.gpus import GpuSpec


@dataclass(slots=True)
class OffloadTotals:
    """What a replica's KV offload tiers did over the run (``engine/kv_offload.py``).

    Tokens are prompt tokens looked up at a request's first admission, split by the tier that
    held them (the GPU's prefix cache first); bytes and seconds are per GPU (each GPU moves
    its own shard over its own host link, in parallel).
    """

    backend: str = ""
    block_size: int = 0  # tokens per offloaded block
    num_cpu_blocks: int = 0
    num_disk_blocks: int = 0
    num_query_tokens: int = 0
    num_gpu_hit_tokens: int = 0
    num_cpu_hit_tokens: int = 0
    num_disk_hit_tokens: int = 0
    num_loads: int = 0  # requests that loaded KV from a lower tier
    load_bytes: float = 0.0
    load_s: float = 0.0  # copy time of the loads (bytes / bandwidth, disk reads included)
    load_wait_s: float = 0.0  # native: from a load's start to its end, queueing on the copy stream included
    num_stored_blocks: int = 0
    store_bytes: float = 0.0
    store_s: float = 0.0  # copy time of the stores
    num_store_skips: int = 0  # stores refused for want of evictable blocks (retried later)
    num_cpu_evictions: int = 0
    num_disk_evictions: int = 0
    step_transfer_s: float = 0.0  # seconds added to steps by copies the forward waits for (lmcache)


@dataclass(slots=True)
class ReplicaTotals:
    """Aggregates one replica accumulates over the run (for utilization, MFU/MBU, energy)."""

    num_gpus: int = 1
    num_gpu_blocks: int = 0
    busy_s: float = 0.0  # time with a batch in flight (GPU + CPU overhead)
    gpu_s: float = 0.0  # GPU time only
    flops: float = 0.0  # per GPU
    bytes: float = 0.0  # HBM bytes per GPU
    num_steps: int = 0
    num_batched_tokens: int = 0  # tokens scheduled over all steps (prefill chunks + decodes)
    num_run_steps: int = 0  # of which simulated inside skip-ahead runs (lazy engine: no event each)
    num_preemptions: int = 0
    kv_block_s: float = 0.0  # integral of used KV blocks over time (block-seconds)
    # Waiting requests integrated over its recorded steps (num_waiting x duration_s summed, as
    # ``StepSeries.waiting_s_by_replica`` sums them; 0 when no step series is kept)
    waiting_s: float = 0.0
    peak_kv_blocks: int = 0
    num_prefix_query_tokens: int = 0  # prompt tokens looked up in the prefix cache
    num_prefix_hit_tokens: int = 0  # of which found cached
    # Clusters (servesim.cluster): which pool, its role and GPU (None: Result.gpu), and
    # what crossed the replica's boundary.
    pool: str = ""
    role: str = ""
    gpu: GpuSpec | None = None
    bubble_s: float = 0.0  # GPU time idle in pipeline bubbles (pp > 1)
    # vLLM's API server in front of it (engine.frontend): seconds of work (requests' handling,
    # outputs' detokenizing and streaming); a server shared by data-parallel ranks counts on
    # its first rank only; -1: no front end.
    frontend_busy_s: float = -1.0
    num_routed: int = 0  # requests the router sent here (incl. hand-offs and migrations)
    num_kv_transfers: int = 0  # KV caches received (disaggregation, migration)
    kv_transfer_bytes: float = 0.0
    kv_transfer_s: float = 0.0  # sum over received transfers of send-to-delivery time
    num_migrations_out: int = 0
    lora: Any = None  # engine.lora: the replica's engine.lora.LoraTotals (None: LoRA off)
    # Autoscaled or failed replicas: seconds their GPUs were provisioned (loading weights,
    # serving, draining); -1: the whole run (a static fleet).
    provisioned_s: float = -1.0
    provisioned_from_s: float = 0.0  # when it started (its GPUs held from then on)
    # Energy (J) of its GPUs when the cluster's operations priced it interval by interval
    # (power capping changes the clock); -1: the summary prices it from the totals.
    energy_j: float = -1.0
    offload: OffloadTotals | None = None  # its KV offload tiers (engine.kv_offload), if any
