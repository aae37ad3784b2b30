"""Which benchmark client measured a silicon run, and the workload that client sends.

``silicon_vllm.csv`` gathers runs from two harnesses; its ``silicon_data_source`` column
names the upstream file or database dump of each row, which tells them apart:

* **InferenceMAX / InferenceX** (SemiAnalysis' nightly benchmark; every source but
  AIConfigurator's own per-GPU files: the dated ``source_file=2026-…csv`` sheets, the
  ``db-dump`` rows with their GitHub ``workflow_run_id``, the Kimi gap analysis). Its
  ``benchmarks/benchmark_lib.sh`` runs ``run_benchmark_serving``: the ``bench_serving``
  fork of vLLM's older ``benchmarks/benchmark_serving.py`` with ``--dataset-name random
  --random-range-ratio $RANDOM_RANGE_RATIO --num-prompts $((CONC * 10)) --max-concurrency
  $CONC --request-rate inf --ignore-eos``, and its benchmark client table sets
  ``RANDOM_RANGE_RATIO`` 0.8 for the (ISL, OSL) pairs (1024, 1024), (1024, 8192) and
  (8192, 1024) at 4-64 clients. That script draws lengths uniform in ``[int(0.8 L), L]``
  (``sample_random_requests``), so prompts and outputs vary by up to 20% and the clients
  drift apart instead of moving in lockstep; it sends one ready-check request, then the
  measured run. Later versions of the script add ``--num-warmups 2*CONC``; the rows do
  not say which version ran, and warm-ups end before the measured run starts either way.
* **AIConfigurator's own collection** (``source_file=<gpu>/vllm/<version>/<model>.csv``):
  the rows do not say the client or its lengths; they run as before, fixed lengths
  (``random_range_ratio`` 0) and ``PROMPTS_PER_CLIENT`` requests per client.
"""

from __future__ import annotations

from typing import Any

#: InferenceMAX's benchmark client: ``--random-range-ratio`` and requests per client.
INFERENCEMAX_RANGE_RATIO = 0.8
INFERENCEMAX_PROMPTS_PER_CLIENT = 10

#: Other rows: requests per client, at least ``MIN_PROMPTS``. With fixed lengths the
#: clients stay in step (they start together and finish together), so a few rounds give
#: the steady state; more add run time, not information.
PROMPTS_PER_CLIENT = 10
MIN_PROMPTS = 32


def is_inferencemax(source: str) -> bool:
    """Does ``silicon_data_source`` name an InferenceMAX run (not AIConfigurator's own
    per-GPU collection, whose files sit at ``<gpu>/vllm/<version>/``)?"""
    first = source.split(";")[0].strip()
    return not (first.startswith("source_file=") and "/vllm/" in first)


def bench_workload(source: str, isl: int, osl: int, concurrency: int) -> dict[str, Any]:
    """The ``type: benchmark`` workload of one run, as its harness sent it."""
    wl: dict[str, Any] = {"type": "benchmark", "input_len": isl, "output_len": osl,
                          "max_concurrency": concurrency, "num_warmups": 0, "seed": 0}
    if is_inferencemax(source):
        wl.update(client="benchmark_serving", random_range_ratio=INFERENCEMAX_RANGE_RATIO,
                  num_prompts=INFERENCEMAX_PROMPTS_PER_CLIENT * concurrency)
    else:
        wl.update(random_range_ratio=0.0, num_prompts=max(PROMPTS_PER_CLIENT * concurrency, MIN_PROMPTS))
    return wl
