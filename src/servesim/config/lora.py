"""The ``engine.lora`` section: vLLM's multi-LoRA serving and the adapters requests name.

The flags mirror vLLM's ``LoRAConfig`` (``vllm/config/lora.py``, v0.11 and later:
``--enable-lora``, ``--max-loras``, ``--max-lora-rank``, ``--max-cpu-loras``,
``--lora-dtype``). The adapters are given by name and rank (``adapters``) or as a count of
equal-rank adapters (``num_adapters``); requests name theirs in a trace column (``adapter``
or ``lora``) or draw one from ``popularity`` over the adapters. What servesim does with
them is ``servesim.engine.lora`` (scheduler, adapter slots) and ``servesim.perf.lora``
(kernels, memory, load times).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from servesim.config._base import _Strict

#: The ranks vLLM accepts for ``--max-lora-rank`` (``vllm/config/lora.py``: ``MaxLoRARanks``).
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: The Hugging Face names of the linear layers vLLM wraps with LoRA in a dense decoder
#: (``packed_modules_mapping``: q/k/v_proj -> qkv_proj, gate/up_proj -> gate_up_proj).
LoraModule = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_MODULES: tuple[LoraModule, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)


class LoraAdapterConfig(_Strict):
    """One adapter: its name (as requests give it), rank and the modules it adapts."""

    name: str = Field(min_length=1, description="The adapter's name, as a trace's adapter column gives it.")
    rank: int = Field(ge=1, le=512, description="The adapter's rank r (at most engine.lora.max_lora_rank).")
    target_modules: tuple[LoraModule, ...] | None = Field(
        None,
        description="The modules the adapter's checkpoint holds (None: engine.lora.target_modules).",
    )


class LoraConfig(_Strict):
    """vLLM's multi-LoRA serving (off by default)."""

    enabled: bool = Field(
        False,
        description="Serve LoRA adapters on the base model.",
        json_schema_extra={"vllm": "--enable-lora"},
    )
    max_loras: int = Field(
        1,
        ge=1,
        description=(
            "GPU adapter slots: at most this many distinct adapters in one step (the scheduler skips "
            "a waiting request whose adapter would exceed it)."
        ),
        json_schema_extra={"vllm": "--max-loras"},
    )
    max_lora_rank: int = Field(
        16,
        description=(
            "Rank of every GPU slot: the LoRA buffers and the kernels' work are sized by it, whatever "
            "the adapters' own ranks (vLLM pads each adapter to it)."
        ),
        json_schema_extra={"vllm": "--max-lora-rank"},
    )
    max_cpu_loras: int | None = Field(
        None,
        ge=1,
        description=(
            "Adapters kept in host memory (LRU); an adapter beyond them is read from disk again "
            "(None: max_loras, as vLLM)."
        ),
        json_schema_extra={"vllm": "--max-cpu-loras"},
    )
    lora_dtype: Literal["auto", "float16", "bfloat16"] = Field(
        "auto",
        description="Data type of the adapters' weights (auto: the model's).",
        json_schema_extra={"vllm": "--lora-dtype"},
    )
    target_modules: tuple[LoraModule, ...] = Field(
        default_factory=lambda: tuple(LORA_MODULES),
        description=(
            "The modules the adapters' checkpoints hold (their size on disk and over PCIe). The GPU "
            "buffers and kernels cover every linear layer of the model whatever this says, as vLLM's."
        ),
    )
    adapters: tuple[LoraAdapterConfig, ...] = Field(
        default_factory=tuple,
        description="The adapters by name and rank (or leave empty and set num_adapters).",
    )
    num_adapters: int = Field(
        0,
        ge=0,
        le=100_000,
        description=(
            "Without adapters: this many adapters named lora-1, lora-2, ... of rank adapter_rank "
            "(at most 100,000: each is a named record of the run)."
        ),
    )
    adapter_rank: int | None = Field(
        None,
        ge=1,
        le=512,
        description="The rank of the num_adapters adapters (None: max_lora_rank).",
    )
    popularity: Literal["uniform", "zipf"] = Field(
        "uniform",
        description=(
            "How requests without an adapter column pick one: uniform over the adapters, or Zipf "
            "(the k-th adapter, in list order, with weight 1 / k^zipf_exponent)."
        ),
    )
    zipf_exponent: float = Field(1.0, gt=0, description="popularity zipf: the exponent.")
    base_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="popularity: the share of requests that use the base model (no adapter).",
    )
    seed: int = Field(0, ge=0, description="Seed of the adapters' draws.")
    disk_gb_per_s: float = Field(
        2.0,
        gt=0,
        description=(
            "Read bandwidth of an adapter's checkpoint into host memory (GB/s), when it is not "
            "among the max_cpu_loras in host memory; host-to-GPU copies use engine.pcie_gb_per_s."
        ),
    )
    kernel_flops_efficiency: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Fraction of peak FLOP/s the shrink/expand kernels reach (a round figure, not fitted).",
    )
    kernel_bandwidth_efficiency: float = Field(
        0.6,
        gt=0,
        le=1,
        description="Fraction of HBM bandwidth the shrink/expand kernels reach (a round figure, not fitted).",
    )
    kernel_overhead_s: float = Field(
        2e-6,
        ge=0,
        description="Fixed cost of each shrink or expand kernel (two per wrapped layer and step).",
    )

    @model_validator(mode="after")
    def _check(self) -> LoraConfig:
        if self.max_lora_rank not in VLLM_MAX_LORA_RANKS:
            raise ValueError(
                f"max_lora_rank {self.max_lora_rank} is not one vLLM accepts "
                f"({', '.join(map(str, VLLM_MAX_LORA_RANKS))})"
            )
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}), "
                "as vLLM requires"
            )
        if self.adapters and self.num_adapters:
            raise ValueError("give adapters or num_adapters, not both")
        names = [a.name for a in self.adapters]
        if len(set(names)) != len(names):
            raise ValueError(f"adapter names must be unique: {names}")
        for a in self.adapters:
            if a.rank > self.max_lora_rank:
                raise ValueError(
                    f"adapter {a.name!r} has rank {a.rank}, above max_lora_rank {self.max_lora_rank} "
                    "(vLLM refuses to load it)"
                )
        if self.adapter_rank is not None and self.adapter_rank > self.max_lora_rank:
            raise ValueError(f"adapter_rank {self.adapter_rank} is above max_lora_rank {self.max_lora_rank}")
        if self.enabled and not self.adapters and not self.num_adapters:
            raise ValueError("enabled: name the adapters (adapters) or give their number (num_adapters)")
        return self

    @property
    def cpu_slots(self) -> int:
        """Adapters held in host memory (vLLM: ``max_cpu_loras``, default ``max_loras``)."""
        return self.max_loras if self.max_cpu_loras is None else self.max_cpu_loras

    def adapter_list(self) -> list[LoraAdapterConfig]:
        """The adapters, named ones or ``num_adapters`` generated ones, in popularity order."""
        if self.adapters:
            return list(self.adapters)
        rank = self.adapter_rank or self.max_lora_rank
        return [LoraAdapterConfig(name=f"lora-{k}", rank=rank) for k in range(1, self.num_adapters + 1)]
