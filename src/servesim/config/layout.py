"""Checks of the engine's KV-block knobs that vLLM refuses to start on. The parallel
layout's checks against the model live in ``catalog.parallel``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesim.errors import ConfigError

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig


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
            f"block); raise it to at least {need} or lower engine.max_model_len"
        )
