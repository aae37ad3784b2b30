"""What every rule of ``perf.execution_path`` reads: a GPU's SM (compute capability x 10),
the vLLM releases where the rules change, a server's boolean environment variable as vLLM
reads it, and ``Choice``, one default with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.catalog.gpus import GpuSpec

#: SM of each catalog GPU (compute capability x 10); AMD's MI300X has none.
SM_OF: dict[str, int] = {
    "A100-80GB": 80,
    "L40S": 89,
    "L4": 89,
    "H100-SXM": 90,
    "H200": 90,
    "B200": 100,
    "GB200": 100,
    "B300": 103,
}
#: Release boundaries of the rules (``perf.execution_path``'s and ``perf.moe_backend``'s docs).
V0_11_0, V0_11_1, V0_12_0, V0_13_0 = (0, 11, 0), (0, 11, 1), (0, 12, 0), (0, 13, 0)
V0_14_0, V0_16_0, V0_17_0 = (0, 14, 0), (0, 16, 0), (0, 17, 0)


@dataclass(frozen=True)
class Choice:
    """One default of the path: what vLLM runs and why (file and version range)."""

    value: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"value": self.value, "reason": self.reason}


def sm_of(gpu: GpuSpec | str) -> int | None:
    """The GPU's compute capability x 10 (80, 89, 90, 100, 103; None off the NVIDIA catalog)."""
    return SM_OF.get(gpu if isinstance(gpu, str) else gpu.name)


def flag(env: dict[str, str], name: str) -> bool | None:
    """An environment variable as vLLM's ``envs`` reads a boolean, ``bool(int(value))``
    (None: unset; ``engine.vllm_env`` holds integer strings only)."""
    if name not in env:
        return None
    return bool(int(env[name]))
