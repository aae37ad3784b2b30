"""Checks of a layout against the model it serves, as vLLM refuses to start on them.

These need the model's architecture (layers, experts), which the config alone does not
hold, so they run where the model is known: the memory plan calls ``check_layout`` for
one replica and for every pool of a cluster alike.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.config.parts import ParallelConfig


class _Model(Protocol):
    """What the checks read of a ``catalog.ModelSpec`` (config sits beside catalog, not above)."""

    @property
    def name(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def is_moe(self) -> bool: ...


def check_layout(model: _Model, parallel: ParallelConfig) -> None:
    """Pipeline stages and expert parallelism the model can take."""
    pp, ep = parallel.pipeline_parallel_size, parallel.expert_parallel_size
    if pp > model.num_layers:
        raise ConfigError(f"parallel.pipeline_parallel_size ({pp}) exceeds the {model.num_layers} layers "
                          f"of {model.name}: each pipeline stage needs at least one layer")
    if ep > 1 and not model.is_moe:
        raise ConfigError(f"parallel.expert_parallel_size ({ep}) needs a mixture-of-experts model, and "
                          f"{model.name} is dense (no experts); set expert_parallel_size: 1")


def min_gpu_blocks(engine: EngineConfig, max_model_len: int) -> int:
    """KV blocks one max_model_len sequence needs, plus vLLM's null block."""
    return math.ceil(max_model_len / engine.block_size) + 1


def check_gpu_blocks_override(engine: EngineConfig, max_model_len: int) -> None:
    """``num_gpu_blocks_override`` must hold one max-length sequence (else it never runs)."""
    n = engine.num_gpu_blocks_override
    need = min_gpu_blocks(engine, max_model_len)
    if n is not None and n < need:
        raise ConfigError(
            f"engine.num_gpu_blocks_override ({n}) is below the {need} blocks one max_model_len="
            f"{max_model_len} sequence needs ({need - 1} of {engine.block_size} tokens, plus vLLM's null "
            f"block); raise it to at least {need} or lower engine.max_model_len")
