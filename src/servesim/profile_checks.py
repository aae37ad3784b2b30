"""What ``servesim profile`` checks before it times anything: that torch is installed, that
the options can make a profile (the grid, the tensor-parallel degree against the model's
heads and MLP width), and that the installed torch can use the device. Each refusal is one
line naming the option, with nothing written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.catalog.models import ModelSpec
from servesim.errors import ConfigError, ServesimError

#: Device types this command times on (each has ``torch.<type>.synchronize``, but the CPU).
_DEVICE_TYPES = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "xpu": "XPU"}


def import_torch() -> Any:
    """torch, or a ServesimError naming the extra that installs it."""
    try:
        import torch
    except ImportError:
        raise ServesimError(
            "servesim profile needs torch, which is not installed: pip install 'servesim[profile]' "
            "(a CPU-only build: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
        ) from None
    return torch


def check_inputs(
    model: ModelSpec,
    tp: int,
    tokens: Sequence[int],
    contexts: Sequence[int],
    batches: Sequence[int],
    warmup: int,
    repeats: int,
) -> None:
    """Raise a ServesimError naming the option when a profile of these inputs cannot run."""
    if model.is_moe:
        raise ServesimError(f"{model.name}: profiling MoE experts is not supported")
    for what, values in (("--tokens", tokens), ("--contexts", contexts), ("batches", batches)):
        if not values:
            raise ServesimError(f"{what}: expected at least one positive integer, got none")
        bad = [v for v in values if v < 1]
        if bad:
            raise ServesimError(f"{what}: {bad[0]} is not a positive integer (expected >= 1)")
        dup = sorted({v for v in values if list(values).count(v) > 1})
        if dup:
            raise ServesimError(f"{what}: {dup[0]} is given more than once (expected distinct values)")
    if repeats < 1:
        raise ServesimError(f"--repeats: {repeats}; expected at least 1 timed run per point")
    if warmup < 0:
        raise ServesimError(f"warmup: {warmup}; expected 0 or more")
    if tp < 1:
        raise ServesimError(f"--tp: {tp}; expected a tensor-parallel degree of at least 1")
    from servesim.catalog.parallel import check_parallel
    from servesim.config import ParallelConfig

    try:
        check_parallel(model, ParallelConfig.model_construct(tensor_parallel_size=tp))
    except ConfigError as err:
        raise ServesimError("--tp: " + str(err).removeprefix("parallel.tensor_parallel_size: ")) from None
    if model.intermediate_size % tp:
        raise ServesimError(
            f"--tp: {tp} does not divide the MLP width {model.intermediate_size} of "
            f"{model.name} (each rank holds an equal shard)"
        )


def _devices_here(torch: Any) -> list[str]:
    here = ["cpu"]
    for kind in ("cuda", "xpu"):
        mod = getattr(torch, kind, None)
        try:
            if mod is not None and mod.is_available():
                here += [f"{kind}:{i}" for i in range(int(mod.device_count()))]
        except Exception:  # a backend that cannot even be queried is not usable here
            pass
    try:
        if torch.backends.mps.is_available():
            here.append("mps")
    except Exception:
        pass
    return here


def check_device(torch: Any, device: str, option: str = "--device") -> None:
    """Raise a ServesimError, in one line, when the installed torch cannot time on ``device``."""
    kind, _, index = device.partition(":")
    version = getattr(torch, "__version__", "unknown")

    def refuse(why: str) -> ServesimError:
        return ServesimError(
            f"{option} {device}: the installed torch (version {version}) cannot use it "
            f"({why}; devices here: {', '.join(_devices_here(torch))})"
        )

    if kind not in _DEVICE_TYPES or (index and not index.isdigit()):
        raise refuse(f"expected one of {', '.join(_DEVICE_TYPES)}, optionally with an index such as cuda:1")
    try:
        torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise refuse("torch does not accept this device string") from None
    if kind == "cpu":
        return
    label = _DEVICE_TYPES[kind]
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise refuse("MPS not available")
        return
    mod = getattr(torch, kind, None)
    if mod is None or not mod.is_available():
        why, built = f"{label} not available", getattr(torch, "version", None)
        if kind == "cuda" and getattr(built, "cuda", "") is None and getattr(built, "hip", None) is None:
            why += ": this torch build has no CUDA support"
        raise refuse(why)
    count = int(mod.device_count())
    if index and int(index) >= count:
        raise refuse(
            f"{label} device {index} does not exist: {count} {label} device"
            f"{'' if count == 1 else 's'}, {kind}:0 to {kind}:{count - 1}"
        )
