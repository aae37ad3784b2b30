"""The engine's KV offload tiers: vLLM's native CPU offloading or LMCache's CPU and disk tiers.

vLLM turns offloading on with ``--kv-offloading-size`` (GiB of host memory, all ranks
together) and ``--kv-offloading-backend native|lmcache`` (``vllm/config/cache.py``;
``vllm/config/vllm.py`` maps ``native`` to the ``OffloadingConnector`` with
``cpu_bytes_to_use = size * 2**30`` and ``lmcache`` to ``LMCacheConnectorV1`` with
``lmcache.max_local_cpu_size = size / (tp * pp)`` per rank). The simulation of either is in
``engine/kv_offload.py``; docs/kv_offload.md says what is modelled and what is simplified.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict

#: LMCache's default chunk (``chunk_size`` in ``lmcache/v1/config.py``): the unit it stores and finds.
LMCACHE_CHUNK_TOKENS = 256


class KVOffloadConfig(_Strict):
    """Lower KV tiers below the GPU's prefix cache (off by default)."""

    backend: Literal["none", "native", "lmcache"] = Field(
        "none",
        description=(
            "none: no offloading (the default without cpu_size_gib; a cpu_size_gib without a backend "
            "is native, vLLM's default --kv-offloading-backend); native: vLLM's OffloadingConnector "
            "(CPU tier, blocks stored as they "
            "are computed, loads asynchronous: the request waits, others run); lmcache: LMCache's "
            "connector (CPU and optional disk tiers, prompt chunks stored, loads inside the step)."
        ),
        json_schema_extra={"vllm": "--kv-offloading-backend"},
    )
    cpu_size_gib: float = Field(
        0.0,
        ge=0,
        description=(
            "Host memory for offloaded KV, in GiB (2^30 bytes), all GPUs of the replica together, as "
            "vLLM's --kv-offloading-size."
        ),
        json_schema_extra={"vllm": "--kv-offloading-size"},
    )
    disk_size_gib: float = Field(
        0.0,
        ge=0,
        description=(
            "lmcache: local-disk tier, GiB for the replica (LMCACHE_LOCAL_DISK with "
            "LMCACHE_MAX_LOCAL_DISK_SIZE per rank times the ranks); 0: no disk tier."
        ),
        json_schema_extra={"vllm": "LMCACHE_MAX_LOCAL_DISK_SIZE (env)"},
    )
    eviction_policy: Literal["lru", "arc"] = Field(
        "lru",
        description=(
            "Eviction in the CPU tier: lru (vLLM's LRUOffloadingManager, the default; LMCache's default "
            "cache_policy) or arc (native only: vLLM's ARCOffloadingManager, eviction_policy in "
            "kv_connector_extra_config)."
        ),
    )
    block_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Tokens per offloaded block, a multiple of engine.block_size; None: engine.block_size "
            "for native (vLLM's default), 256 for lmcache (its chunk_size)."
        ),
        json_schema_extra={"unit": "tokens"},
    )
    host_gb_per_s: float | None = Field(
        None,
        gt=0,
        description=(
            "Host<->GPU copy bandwidth per GPU and direction, GB/s; None: the GPU catalog's "
            "host link (PCIe Gen4/Gen5 measured class, NVLink-C2C for GB200)."
        ),
    )
    disk_read_gb_per_s: float = Field(
        6.5,
        gt=0,
        description=(
            "lmcache disk tier: read bandwidth per replica, GB/s (a PCIe Gen4 NVMe SSD's sequential "
            "read, about 7 GB/s spec, 6.5 sustained)."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _size_alone_offloads_natively(cls, data: Any) -> Any:
        """A size without a backend offloads with vLLM's default backend, native
        (``CacheConfig.kv_offloading_backend = "native"``: ``--kv-offloading-size`` alone turns
        offloading on); ``backend: none`` written out keeps it off whatever the size."""
        if not isinstance(data, dict) or "backend" in data:
            return data
        try:
            size = float(data.get("cpu_size_gib") or 0.0)
        except (TypeError, ValueError):
            return data  # the field's own validation names it
        return {**data, "backend": "native"} if size > 0 else data

    @model_validator(mode="after")
    def _check(self) -> KVOffloadConfig:
        if self.backend != "none" and self.cpu_size_gib <= 0:
            raise ValueError(f"backend {self.backend} needs cpu_size_gib > 0 (vLLM's --kv-offloading-size)")
        if self.eviction_policy == "arc" and self.backend != "native":
            raise ValueError("eviction_policy arc: only the native backend (vLLM's ARC manager) has it")
        if self.disk_size_gib > 0 and self.backend != "lmcache":
            raise ValueError("disk_size_gib: only the lmcache backend has a disk tier")
        return self

    @property
    def enabled(self) -> bool:
        return self.backend != "none"

    def tier_block_size(self, gpu_block_size: int) -> int:
        """Tokens per offloaded block for a GPU block size (the backend's default if unset)."""
        if self.block_size is not None:
            return self.block_size
        return LMCACHE_CHUNK_TOKENS if self.backend == "lmcache" else gpu_block_size
