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
    vtc,
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
    vtc.PAPER,
    Paper(
        "speculative-decoding",
        "Speculative decoding",
        "Leviathan, Kalman and Matias, Fast Inference from Transformers via Speculative Decoding, "
        "ICML'23 (arXiv 2211.17192); Chen et al., Accelerating Large Language Model Decoding with "
        "Speculative Sampling, arXiv 2302.01318 (2023)",
        "2x-3x faster decoding with identical outputs, a small draft model proposing tokens the target "
        "verifies in one pass",
        {
            "model": "T5-XXL (11B) with a T5-small draft; Chinchilla 70B (Chen et al.)",
            "gpus": "TPU-v4",
            "workload": "translation (WMT En-De) and summarization (CNN/DM), batch 1",
            "slo": "-",
            "baseline": "the target decoding alone (T5X)",
            "metric": "walltime speedup",
        },
        (),
        note="Not run as the paper's experiment: servesim has no encoder-decoder (T5) or Chinchilla "
        "model, and it takes the draft's acceptance rate as an input (engine.speculative.acceptance_rate) "
        "where the paper measures it from the two models' distributions, so a speedup here is the "
        "paper's Theorem 3.8, (1 - a^(k+1)) / ((1 - a)(k c + 1)), at the rate given. "
        "tests/test_policy_papers.py holds servesim's low-load TPOT gain to that formula (Llama-3.1-8B "
        "on an H100, a = 0.7, k = 4, c = 0.05: 2.31x) and checks that it shrinks at high load.",
    ),
]

PAPERS: dict[str, Paper] = {p.key: p for p in _PAPERS}


def get_paper(name: str) -> Paper:
    from servesim.errors import ServesimError

    key = name.lower().replace("_", "-").replace(" ", "-")
    for p in _PAPERS:
        if key in (p.key, p.name.lower().replace(" ", "-")):
            return p
    raise ServesimError(f"unknown paper {name!r}; servesim reproduce --list names them: {', '.join(PAPERS)}")
