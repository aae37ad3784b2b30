"""The silicon suite's known misses (``validate/silicon.py``): per (group, metric) the
median |error| this suite measured and the reason servesim misses its goal there
(docs/fidelity.md, section 5). Filled from what the suite measured, never by moving a goal;
a mark whose row meets its goal is stale, and the suite's output says so on that row."""

from __future__ import annotations

_EAGER_H100 = (
    "over-predicted on its 1k prompts (median +22%; the 8k ones -20%): a 1,024-token "
    "prefill is above the 512-token CUDA-graph capture of its PIECEWISE mode and runs "
    "without graphs, and the host floor of such steps (fitted on Llama-3.1-70B's runs "
    "alone, carried by kernel count: 62 layers x 1.31 ms) puts it at 81 ms; the H100 rows "
    "of Qwen3-32B, another cluster, measure 0.84 of their floor-bound predictions too, "
    "the H200 rows of this model 0.94-0.97; its own 1k runs imply 0.51 ms a reference layer "
    "for that floor, the same model on H200 with the same vLLM 0.18.0 image 0.78 "
    "(validate/silicon_floor.py): a property of the machine, which the rows do not record"
)
#: Known misses, by (group or "all runs", metric), measured by this suite (median |error|,
#: ``servesim validate --suite silicon``), with the reason servesim misses the goal.
SILICON_KNOWN_BAD: dict[tuple[str, str], str] = {
    ("Kimi-K2.5 fp4 b300_sxm", "TTFT"): (
        "23% (22 runs; median +23%, its 1k prompts +21-59%): the B200 recipe these runs served, with "
        "CUDA graphs only up to 2 x CONC tokens, measured 170 ms at 4 clients on B200 and 84 ms on "
        "B300 (TP 4, vLLM 0.17.0; the CUDA 12.9 image on B200, the CUDA 13.0 one on B300); "
        "servesim's host floor of steps without graphs is one figure for every machine and puts "
        "both at 129 ms; the runs imply 0.46-0.51 ms a reference layer for that floor on B300 "
        "and 1.04-1.10 on B200 (validate/silicon_floor.py), the same checkpoint, version, TP "
        "and flags: a property of the machine, which the rows do not record"
    ),
    ("MiniMax-M2.5 fp8 h100_sxm", "TTFT"): "22% (30 runs), " + _EAGER_H100,
}
