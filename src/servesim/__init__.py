"""servesim: simulate and plan LLM inference serving, iteration by iteration."""

from servesim.config import Scenario, load_scenario

__version__ = "0.1.0"

__all__ = ["Scenario", "load_scenario", "simulate", "compiled", "__version__"]


def compiled() -> bool:
    """Whether the engine's hot path runs as mypyc-compiled C (see setup.py), not Python."""
    from servesim.engine import lazy

    return not lazy.__file__.endswith(".py")


def simulate(scenario: Scenario | dict | str | None = None, *, progress: bool = False):
    """Run one simulation and return its ``Result`` (records, step series and summary).

    ``scenario`` may be a ``Scenario``, a plain dict in the scenario schema, a path to a
    YAML/TOML file, or None for the built-in default scenario.
    """
    from servesim.sim import simulate as _simulate

    return _simulate(scenario, progress=progress)
