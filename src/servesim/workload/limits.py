"""How many arrivals a workload may have: what this machine's memory can simulate."""

from __future__ import annotations

import math
import os

from servesim.errors import WorkloadError

#: Bytes a simulated request takes at the least (its workload columns, its record row and
#: its engine object together take several times more): a run of more requests than the
#: machine's memory holds at this size is refused before it starts.
MIN_BYTES_PER_REQUEST = 100


def _memory_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not on this platform: no check
        return math.inf


def check_memory(num_arrivals: float, given: str) -> None:
    """Refuse ``num_arrivals`` (what ``given`` names, e.g. "num_prompts=10") when this
    machine's memory cannot hold them at ``MIN_BYTES_PER_REQUEST`` each."""
    memory = _memory_bytes()
    if num_arrivals * MIN_BYTES_PER_REQUEST > memory:
        raise WorkloadError(
            f"workload: {given} gives about {num_arrivals:.3g} arrivals, more than this "
            f"machine's {memory / 1e9:.0f} GB of memory can simulate (at least "
            f"{MIN_BYTES_PER_REQUEST} bytes each); give fewer"
        )


#: Bytes a simulated replica takes at the least: 4,000 replicas of one pool (Llama-3.1-8B on
#: H100s, the lazy engine) add 25 MB to a run, 6.4 KB each; a fleet larger than the
#: machine's memory holds at this size is refused before it is built.
MIN_BYTES_PER_REPLICA = 6144


def check_replicas(num_replicas: float, given: str) -> None:
    """Refuse a fleet of ``num_replicas`` (what ``given`` names) the machine's memory cannot
    hold at ``MIN_BYTES_PER_REPLICA`` each."""
    memory = _memory_bytes()
    if num_replicas * MIN_BYTES_PER_REPLICA > memory:
        raise WorkloadError(
            f"{given}: {num_replicas:,.0f} replicas, more than this machine's {memory / 1e9:.0f} GB of "
            f"memory can simulate (at least {MIN_BYTES_PER_REPLICA:,} bytes each); give fewer"
        )
