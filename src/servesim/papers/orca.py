"""Orca (Yu et al., "Orca: A Distributed Serving System for Transformer-Based Generative
Models", OSDI'22), Fig. 10: iteration-level scheduling reaches up to 36.9x the throughput of
FasterTransformer's request-level (static) batching at the same latency (GPT-3 175B).

Here: OPT-13B on one A100-80GB (servesim has no GPT-3 175B multi-node setup), lognormal
lengths (median 160 in, 250 out), Poisson at 4 req/s (beyond both capacities, so throughput
is the service rate); both with batches of 16 and KV reserved for max_model_len (2048), so
only the batching differs. Throughput = output tokens / time to finish them all.
"""

from __future__ import annotations

import numpy as np

from servesim.papers.base import Outcome
from servesim.papers.common import lognormal_lengths


def run(quick: bool) -> Outcome:
    from servesim.catalog.gpus import get_gpu
    from servesim.catalog.hf_config import load_model
    from servesim.config import EngineConfig
    from servesim.perf.roofline import RooflinePerfModel
    from servesim.sim import run_engine
    from servesim.workload.base import Workload

    perf = RooflinePerfModel(load_model("OPT-13B"), get_gpu("A100-80GB"))
    rng = np.random.default_rng(2)
    n = 200 if quick else 1000
    wl = Workload(
        np.cumsum(rng.exponential(1 / 4, n)),
        lognormal_lengths(rng, n, 160, 0.9, 4, 1024),
        lognormal_lengths(rng, n, 250, 0.9, 4, 1024),
    )
    thr, rows = {}, []
    for system, policy in (("orca", "orca"), ("fastertransformer", "static")):
        rec = run_engine(
            wl,
            EngineConfig(policy=policy, max_num_seqs=16, max_model_len=2048),  # type: ignore[arg-type]
            perf,
            3000,
            2048,
        ).records
        thr[system] = float(rec.num_output_tokens.sum() / (np.nanmax(rec.finished_s) - rec.arrival_s[0]))
        rows.append(
            {"system": system, "output_tokens_per_s": thr[system], "mean_e2e_s": float(np.nanmean(rec.e2e_s))}
        )
    return Outcome(
        {"throughput": thr["orca"] / thr["fastertransformer"]},
        rows,
        [f"throughput: iteration-level {thr['orca']:.0f} tok/s, static {thr['fastertransformer']:.0f} tok/s"],
    )
