"""The options of the commands whose signatures are long (``calibrate``, ``validate``,
``capacity``, ``plan``), one ``Annotated`` alias each, grouped by command: a command's
signature is then the list of its options' names, which reads in one screen, and their help
texts are here. ``servesim.cli_measured`` and ``servesim.cli_commands`` use them.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class CalibrateKind(StrEnum):
    auto = "auto"
    operators = "operators"
    splitwise = "splitwise"
    engine_log = "engine-log"


# --------------------------------------------------------------------------- calibrate
# ``servesim calibrate``: measurements fitted to a hardware profile.

CalibrateSources = Annotated[
    list[Path],
    typer.Argument(
        help="Measurements: a Vidur profiling tree (compute/, network/), Splitwise's perf_model.csv, "
        "or record.py step logs (JSON) / step CSVs (several are fitted together).",
        show_default=False,
    ),
]
CalibrateOutput = Annotated[Path, typer.Option("--output", "-o", help="Profile JSON to write.")]
CalibrateKindOption = Annotated[
    CalibrateKind, typer.Option(help="Kind of measurements (auto: from the file).")
]
CalibrateGpu = Annotated[
    str | None,
    typer.Option(
        help="GPU the measurements were taken on (operators: h100/a100; splitwise: A100-80GB/H100-SXM; "
        "engine-log: a catalog name)."
    ),
]
CalibrateHardware = Annotated[
    Path | None,
    typer.Option(
        help="engine-log: YAML/JSON of a custom accelerator (hardware.gpu fields: name, bf16_tflops, "
        "mem_gb, mem_bw_tb_per_s, ...), stored in the profile."
    ),
]
CalibrateFitParams = Annotated[
    str | None,
    typer.Option("--fit", help="Comma-separated parameters to fit instead of the kind's default set."),
]
CalibrateTables = Annotated[
    bool,
    typer.Option(
        "--tables", help="operators: embed the measured tables (the profiled model interpolates in them)."
    ),
]
CalibrateName = Annotated[str | None, typer.Option(help="Name stored in the profile.")]
CalibrateNetwork = Annotated[
    bool, typer.Option(help="operators: fit the link to network/<gpu>_dgx/all_reduce.csv when present.")
]
CalibrateModel = Annotated[
    str | None,
    typer.Option(
        help="engine-log: the model the steps ran (a preset name or a config.json); required for a "
        "step CSV, overrides a record.py log's own."
    ),
]
CalibrateTp = Annotated[int, typer.Option(min=1, help="engine-log: the engine's tensor-parallel degree.")]

# --------------------------------------------------------------------------- validate
# ``servesim validate``: predictions against measured runs.

ValidateDataDir = Annotated[
    Path | None,
    typer.Option(
        help="A folder of measurement sets laid out as measurements/splitwise, measurements/distserve, "
        "measurements/vidur_profiling (for example the full public sets). Default: the subsets "
        "bundled with servesim."
    ),
]
ValidateRecordings = Annotated[
    Path | None,
    typer.Option(
        help="Real vLLM CPU recordings, one session per folder (the folder and each subfolder "
        "holding a rate1.json). Default: the recordings bundled with servesim."
    ),
]
ValidateSuite = Annotated[
    list[str] | None,
    typer.Option(
        help="Suites to run (repeatable): operators, splitwise, distserve, vllm-cpu, silicon. Default: "
        "all but silicon (it simulates 1,064 measured GPU runs: a few minutes)."
    ),
]
ValidateOutput = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        file_okay=False,
        help="A folder for report files (silicon: silicon_runs.csv, silicon_groups.json and .md).",
    ),
]
ValidateThreshold = Annotated[
    float | None,
    typer.Option(
        help="Fail when any row's mean absolute error exceeds this percentage "
        "(default: each row's goal; rows known to miss theirs are reported, not failed)."
    ),
]
ValidateCrossFit = Annotated[
    bool,
    typer.Option(
        "--cross-fit",
        help="vllm-cpu: also fit on each recording of a session in turn and report its "
        "held-out error on the others (needs scipy; ~30 s more).",
    ),
]
ValidateCrossGroup = Annotated[
    bool,
    typer.Option(
        "--cross-group",
        help="silicon: also predict each (model, GPU) group with the host floor refitted "
        "without it, beside the in-sample errors (the suite about 3x as long; "
        "--output also writes silicon_cross_group.json and .md).",
    ),
]
ValidateBench = Annotated[
    list[Path] | None,
    typer.Option(
        "--bench",
        dir_okay=False,
        help="Instead of the bundled sets: a result file of your own `vllm bench serve --save-result` "
        "run, or an inference-perf stage_N_lifecycle_metrics.json or summary_lifecycle_metrics.json "
        "(the config.yaml beside it gives the load) (repeatable), replayed on --scenario and compared "
        "figure by figure.",
    ),
]
ValidateOpenLoop = Annotated[
    list[Path] | None,
    typer.Option(
        "--open-loop",
        file_okay=False,
        help="Instead of the bundled sets: a folder of real open-loop runs of inference-perf against "
        "vllm serve (repeatable; each run a folder of exp-config.yaml, config.yaml, replay.json, "
        "ground_truth.json and model_config.json, docs/fidelity.md), replayed on --scenario's GPU "
        "and vLLM version.",
    ),
]
ValidateScenario = Annotated[
    Path | None,
    typer.Option(
        "--scenario",
        dir_okay=False,
        help="With --bench: the scenario of the deployment the benchmark ran against (model, GPU, "
        "parallelism, engine, vLLM version); its workload is replaced by the run's. With "
        "--open-loop: the GPU and vLLM version (the run folder gives the rest).",
    ),
]
ValidateOverrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="With --bench or --open-loop: override one scenario field (repeatable).",
    ),
]

# --------------------------------------------------------------------------- capacity
# ``servesim capacity``: the highest rate meeting the SLO targets.

CapacityScenario = Annotated[
    Path | None,
    typer.Argument(help="Scenario file (YAML or TOML); omit for the built-in default.", show_default=False),
]
CapacityOverrides = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Override one scenario field (repeatable)."),
]
CapacityOutput = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", file_okay=False, help="Directory to write capacity.json and probes.csv into."
    ),
]
CapacityPrecision = Annotated[
    float, typer.Option(help="Stop when the bracket's width is at most this share of its low end.")
]
CapacityMaxRate = Annotated[
    float | None,
    typer.Option(
        help="Highest rate to try, requests/s (sessions, tasks or questions/s for those workloads)."
    ),
]
CapacityMinRate = Annotated[
    float | None,
    typer.Option(help="Lowest rate to try, in --max-rate's unit (default: the scenario's rate / 1024)."),
]
CapacityNoEarlyStop = Annotated[
    bool, typer.Option("--no-early-stop", help="Run every probe whole (no cut on a prefix's clear miss).")
]
CapacitySeeds = Annotated[
    int,
    typer.Option(
        help="Search again at this many seeds in all and report the answer's 95% prediction "
        "interval (1: not measured)."
    ),
]
CapacityStable = Annotated[
    float | None,
    typer.Option(
        help="Double the workload's request count until the interval's half-width is at most "
        "this share of the answer (e.g. 0.1), up to --max-requests."
    ),
]
CapacityMaxRequests = Annotated[
    int | None,
    typer.Option(help="The most requests --stable grows a run to (default: 16 times the scenario's)."),
]
CapacityJsonOut = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
CapacityQuiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")]
CapacityNoProgress = Annotated[bool, typer.Option("--no-progress", help="No progress bar.")]

# --------------------------------------------------------------------------- plan
# ``servesim plan``: the configuration search (a plan file, or the short form).

PlanFile = Annotated[
    Path | None,
    typer.Argument(
        help="Plan file: a scenario with a plan: section of ranges (docs/planning.md). Omit for the "
        "short form (--model, --gpus, ...).",
        show_default=False,
    ),
]
PlanOverrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help=("Override a scenario field, or a range with plan.X (repeatable)."),
    ),
]
PlanModel = Annotated[str | None, typer.Option(help="Short form: model preset or config.json.")]
PlanGpus = Annotated[str, typer.Option(help="Short form: GPU names to try, comma-separated.")]
PlanTotalGpus = Annotated[int, typer.Option(help="Short form: GPUs a deployment may use at most.")]
PlanIsl = Annotated[int | None, typer.Option(help="Short form: prompt tokens of each request.")]
PlanOsl = Annotated[int | None, typer.Option(help="Short form: output tokens of each request.")]
PlanTrace = Annotated[str | None, typer.Option(help="Short form: a trace instead of --isl/--osl.")]
PlanRate = Annotated[float, typer.Option(help="Short form: target arrival rate, requests/s.")]
PlanTtft = Annotated[float | None, typer.Option(help="Short form: TTFT limit, seconds.")]
PlanTpot = Annotated[float | None, typer.Option(help="Short form: TPOT limit, seconds.")]
PlanConfidence = Annotated[
    float | None,
    typer.Option(
        help="Short form: hold the SLO at the high end of the predictions' calibrated interval of this "
        "level (0.8; slo.confidence in a plan file)."
    ),
]
PlanNumRequests = Annotated[int, typer.Option(help="Short form: requests simulated per candidate.")]
PlanBackend = Annotated[str, typer.Option(help="inprocess, process (all cores) or ray.")]
PlanWorkers = Annotated[int | None, typer.Option(help="Processes / Ray CPUs (default: all cores).")]
PlanAddress = Annotated[str | None, typer.Option(help="--backend ray: the cluster (default: a local one).")]
PlanOutput = Annotated[
    Path | None,
    typer.Option("--output", "-o", file_okay=False, help="Directory for the plan's files and cache."),
]
PlanCache = Annotated[Path | None, typer.Option(help="Result cache directory (default: --output).")]
PlanObjective = Annotated[str | None, typer.Option(help="Rank by cost ($/hour), gpus or energy (J/token).")]
PlanTop = Annotated[int, typer.Option(help="Rows of the ranked table.")]
PlanJsonOut = Annotated[bool, typer.Option("--json", help="Print counts, best and Pareto fronts as JSON.")]
PlanNoProgress = Annotated[bool, typer.Option("--no-progress", help="No progress bar.")]
