"""The serving systems of the literature, each with its paper's headline experiment in the
paper's own setup (``servesim reproduce NAME``; docs/papers.md).

``PAPERS`` maps a short name to a ``Paper``: the headline as published, the setup as the
paper states it (model, GPUs, workload, SLO, baseline, metric), the figures with the range
servesim's must land in, and, where servesim runs it, the experiment. Each paper servesim
runs is declared beside its experiment, as its module's ``PAPER``; a paper without an
experiment is declared here, with its figure and setup only.
"""

from __future__ import annotations

from servesim.papers import (
    apex,
    block,
    distserve,
    dynasor,
    heteroscale,
    llumnix,
    llumnix_cost,
    llumnix_priority,
    mcsf,
    microserving,
    orca,
    polca,
    sarathi,
    splitwise,
    vllm,
    vllm_offload,
)
from servesim.papers.base import Figure, Outcome, Paper

__all__ = ["PAPERS", "Figure", "Outcome", "Paper", "get_paper"]

_PAPERS = [
    sarathi.PAPER,
    polca.PAPER,
    block.PAPER,
    microserving.PAPER,
    orca.PAPER,
    vllm.PAPER,
    vllm_offload.PAPER,
    distserve.PAPER,
    splitwise.PAPER,
    llumnix.PAPER,
    llumnix_priority.PAPER,
    llumnix_cost.PAPER,
    heteroscale.PAPER,
    apex.PAPER,
    dynasor.PAPER,
    Paper(
        "burstgpt",
        "BurstGPT",
        "Wang et al., BurstGPT: A Real-world Workload Dataset to Optimize LLM Serving Systems, "
        "arXiv 2401.17644 (2024)",
        "LLM request inter-arrivals fit a Gamma distribution (bursty), request lengths a Zipf",
        {
            "model": "ChatGPT / GPT-4 on Azure OpenAI",
            "gpus": "-",
            "workload": "Azure OpenAI GPT service traces",
            "slo": "-",
            "baseline": "Poisson arrivals",
            "metric": "fitted distributions",
        },
        (),
        note="A characterization with no single figure to reproduce; servesim generates Gamma arrivals "
        "(workload.arrival.process: gamma) but has no Zipf length kind and no BurstGPT trace.",
    ),
    mcsf.PAPER,
]

PAPERS: dict[str, Paper] = {p.key: p for p in _PAPERS}


def get_paper(name: str) -> Paper:
    from servesim.errors import ServesimError

    key = name.lower().replace("_", "-").replace(" ", "-")
    for p in _PAPERS:
        if key in (p.key, p.name.lower().replace(" ", "-")):
            return p
    raise ServesimError(f"unknown paper {name!r}; servesim reproduce --list names them: {', '.join(PAPERS)}")
