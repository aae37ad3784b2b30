"""The README and docs/ say what the code does: every command they show runs, every file they
name exists, the quick start's report is today's, and the figures quoted from the code are
the code's.

Commands are the ``servesim ...`` lines of the fenced shell blocks (``bash``, ``console``,
``sh`` or unlabelled) of README.md and docs/**/*.md, with ``\\`` continuations joined and
``VAR=value`` lines of the same file substituted, and the whole commands quoted in the
prose. Each runs in-process through the CLI from the repository root (doc paths are relative
to it); a ``-o``/``--output`` value is moved into a temporary folder so that nothing is
written into the checkout. A ``| jq PATH`` after
a ``--json`` command checks that the path is in the JSON.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servesim.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SHELL_BLOCKS = {"", "bash", "console", "sh", "shell"}

# Commands that do not run here, each a regular expression for the whole command and the reason.
SKIP = {
    r"servesim calibrate measurements/.*": "$D is the full public measurement sets (Vidur's profiling "
    "data, Splitwise's perf_model.csv), not bundled; "
    "tests/test_calibrate.py fits the bundled subsets",
    r"servesim calibrate steps\.csv .*": "a step log of the user's own engine (tests/test_calibrate.py runs "
    "the command on a generic step CSV)",
    r"servesim calibrate short\.json long\.json .*": "engine logs of the user's own",
    r"servesim validate --data-dir path/to/data": "the full public measurement sets, not bundled",
    r"servesim validate --open-loop( RUNS/ .*)?": "the public open-loop GPU runs, not bundled; "
    "tests/test_inference_perf.py replays a run folder",
    r"servesim validate --suite vllm-cpu --recordings mine/": "recordings of the user's own",
    r"servesim profile .*": "needs torch and a CUDA device",
    r"servesim serve .*": "serves until interrupted; tests/test_serve.py starts the server and talks to it",
    r"servesim calibrate prof/ .*": "reads what `servesim profile` writes",
    # Not missing, but slow: tests/test_validate.py computes the same checks (validate_all) and
    # runs the command line on them.
    r"servesim validate --suite silicon( --cross-group)?( --output \S+)?": "simulates about a thousand "
    "measured runs (minutes); tests/test_silicon.py runs five rows end to end",
    r"servesim validate --suite vllm-cpu --cross-fit": "fits every CPU recording in turn (about a minute); "
    "tests/test_validate.py runs a cheap cross-fit",
    r"servesim reproduce (sarathi-serve|llumnix(-priority|-cost)?|splitwise|orca|heteroscale|block|vllm) "
    r"--quick( --output \S+)?": "a capacity search, rate sweep or compressed day of 15-100 s of CPU; "
    "tests/test_reproduce.py runs it",
    r"servesim capacity examples/capacity_slo\.yaml --stable 0\.1 --no-progress": "25 capacity searches "
    "(about 13 s of CPU); tests/test_capacity_cli.py runs it (slow) and checks the figures "
    "docs/planning.md quotes",
    r"servesim validate( --suite vllm-cpu)?": "replays the bundled CPU recordings (10-20 s of one core "
    "per command); tests/test_validate.py checks the same rows "
    "and the command",
}

# Every documented simulation runs as written, on at most this many requests (the doc commands
# take minutes on 2 cores in full; what can break in a doc command is its fields and values,
# which a short run checks). The README's default run is compared in full below.
CAP = 200
CAP_FIELD = {
    "trace": "workload.limit",
    "synthetic": "workload.num_requests",
    "benchmark": "workload.num_prompts",
    "sessions": "workload.num_sessions",
    "mixture": "workload.num_requests",
    "agents": "workload.num_tasks",
    "reasoning": "workload.num_questions",
}


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    argv: tuple[str, ...]  # after "servesim"
    jq: str | None  # the path a "| jq PATH" after it reads

    @property
    def text(self) -> str:
        return shlex.join(["servesim", *self.argv])


def fenced_blocks(text: str):
    """(language, first line number, lines) of each fenced code block of a Markdown text."""
    lang, lines, start = None, [], 0
    for n, line in enumerate(text.splitlines(), 1):
        fence = line.strip()
        if lang is None and fence.startswith("```"):
            lang, lines, start = fence[3:].strip(), [], n + 1
        elif lang is not None and fence == "```":
            yield lang, start, lines
            lang = None
        elif lang is not None:
            lines.append(line)


def doc_commands(path: Path) -> list[DocCommand]:
    env: dict[str, str] = {}
    out = []
    for lang, start, lines in fenced_blocks(path.read_text(encoding="utf-8")):
        if lang not in SHELL_BLOCKS:
            continue
        i = 0
        while i < len(lines):
            n, text = start + i, lines[i]
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            assignment = re.match(r"\s*([A-Z_]+)=(\S*)\s*(#.*)?$", text)
            if assignment:
                env[assignment[1]] = assignment[2]
                continue
            if not re.search(r"(^|[;&|]\s*)servesim\s", text):
                continue
            lex = shlex.shlex(text, posix=True, punctuation_chars=";&|")
            lex.whitespace_split, lex.commenters = True, "#"
            tokens = []
            for tok in lex:
                for k, v in env.items():
                    tok = tok.replace("${" + k + "}", v).replace("$" + k, v)
                tokens.append(tok)
            parts: list[list[str]] = [[]]
            seps: list[str] = []
            for tok in tokens:
                if tok in (";", "&&", "|"):
                    parts.append([])
                    seps.append(tok)
                else:
                    parts[-1].append(tok)
            for k, part in enumerate(parts):
                if part and part[0] == "servesim":
                    piped = k < len(seps) and seps[k] == "|" and parts[k + 1][:1] == ["jq"]
                    out.append(
                        DocCommand(
                            f"{path.relative_to(ROOT)}:{n}",
                            tuple(part[1:]),
                            parts[k + 1][1] if piped else None,
                        )
                    )
    return out


def inline_commands(path: Path) -> list[DocCommand]:
    """``servesim ...`` in backticks in the prose: those that are a whole command (``servesim
    version``, ``servesim catalog models``, a ``simulate`` with arguments); a bare command name
    (``servesim calibrate``) or one with a placeholder (``--output DIR``) is a name, not a command."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", lambda m: "\n" * m[0].count("\n"), text, flags=re.S | re.M)
    out = []
    for m in re.finditer(r"`servesim ([^`]+)`", prose):
        argv = m[1].split()
        if any(re.fullmatch(r"[A-Z]+", a) for a in argv):
            continue
        if argv[0] in ("version", "catalog") or len(argv) > 1:
            out.append(
                DocCommand(
                    f"{path.relative_to(ROOT)}:{prose.count(chr(10), 0, m.start()) + 1}", tuple(argv), None
                )
            )
    return out


COMMANDS = [c for doc in DOCS for c in [*doc_commands(doc), *inline_commands(doc)]]


def skip_reason(cmd: DocCommand) -> str | None:
    for pattern, reason in SKIP.items():
        if re.fullmatch(pattern, cmd.text):
            return reason
    return None


def workload_type(argv: list[str]) -> str:
    """The workload type a ``simulate`` command line runs (the scenario file's, or the default's)."""
    valued = ("--set", "-o", "--output", "--records-format")
    files = [a for k, a in enumerate(argv[1:], 1) if not a.startswith("-") and argv[k - 1] not in valued]
    if not files:
        return "trace"
    data = yaml.safe_load((ROOT / files[0]).read_text(encoding="utf-8")) or {}
    return (data.get("workload") or {}).get("type", "trace")


def capped(argv: list[str]) -> list[str]:
    return [*argv, "--set", f"{CAP_FIELD[workload_type(argv)]}={CAP}"]


def invoke(argv: list[str], tmp_path: Path, monkeypatch):
    """Run ``servesim argv`` from the repository root, its outputs moved into ``tmp_path``."""
    monkeypatch.chdir(ROOT)
    argv = list(argv)
    for k, a in enumerate(argv[:-1]):
        if a in ("-o", "--output"):
            argv[k + 1] = str(tmp_path / Path(argv[k + 1]).name)
    return CliRunner().invoke(app, argv, catch_exceptions=False)


def test_the_docs_have_commands_and_every_skip_is_used() -> None:
    assert len(COMMANDS) >= 30
    texts = [c.text for c in COMMANDS]
    for pattern in SKIP:
        assert any(re.fullmatch(pattern, t) for t in texts), f"unused skip: {pattern}"


def with_run_folders(cmd: DocCommand, argv: list[str], tmp_path: Path, monkeypatch) -> list[str]:
    """A report or compare of ``runs/NAME``: first run (capped) the command above it in the same
    doc that writes ``--output runs/NAME``, as a reader would, then point the argument there."""
    file, line = cmd.where.rsplit(":", 1)
    out = list(argv)
    for k, a in enumerate(argv[1:], 1):
        if not a.startswith("runs/") or argv[k - 1] in ("-o", "--output"):
            continue
        writers = [
            c
            for c in COMMANDS
            if c.where.rsplit(":", 1)[0] == file
            and int(c.where.rsplit(":", 1)[1]) < int(line)
            and c.argv[0] == "simulate"
            and a in c.argv
            and c.argv[list(c.argv).index(a) - 1] in ("-o", "--output")
        ]
        assert writers, f"{cmd.where}: no command above it writes {a}"
        res = invoke([*capped(list(writers[-1].argv)), "--no-progress"], tmp_path, monkeypatch)
        assert res.exit_code == 0, f"{writers[-1].where}: {res.output[-2000:]}"
        out[k] = str(tmp_path / Path(a).name)
    return out


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.where)
def test_doc_command_runs(cmd: DocCommand, tmp_path, monkeypatch) -> None:
    reason = skip_reason(cmd)
    if reason:
        pytest.skip(reason)
    argv = list(cmd.argv)
    if argv[0] in ("report", "compare"):
        argv = with_run_folders(cmd, argv, tmp_path, monkeypatch)
    if argv[0] == "simulate":
        argv = capped(argv)
        if "--json" not in argv:
            argv.append("--no-progress")
    res = invoke(argv, tmp_path, monkeypatch)
    assert res.exit_code == 0, f"{cmd.where}: {cmd.text}\n{res.output[-2000:]}"
    if cmd.jq is not None:
        node = json.loads(res.stdout)
        for key in cmd.jq.strip(".").split("."):
            assert key in node, f"{cmd.where}: {cmd.jq} is not in the JSON"
            node = node[key]


# -- the quick start's report -----------------------------------------------------------------


def readme_report() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text[text.index("## Quick start") : text.index("## Using it")]
    blocks = [lines for lang, _, lines in fenced_blocks(quick) if lang == ""]
    assert blocks, "the quick start quotes no report"
    return blocks[0]


def test_readme_report_is_todays_default_run(monkeypatch) -> None:
    """Every line the README quotes is a line of ``servesim simulate --no-progress`` today, in
    the same order ("..." stands for lines left out; the wall-time line varies)."""
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(app, ["simulate", "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    printed = [ln.rstrip() for ln in res.stdout.splitlines()]
    at = 0
    for line in readme_report():
        line = line.rstrip()
        if line in ("...", "") or line.startswith("simulated "):
            continue
        assert line in printed[at:], f"README quotes {line!r}; the default run prints:\n{res.stdout}"
        at = printed.index(line, at) + 1


# -- files the docs name ----------------------------------------------------------------------

PATH_RE = re.compile(r"(?<![\w./-])((?:src|tests|examples|benchmarks|docs|tools)/[\w.*/-]*[\w*/])")
MODULE_RE = re.compile(r"(?<![\w./-])(servesim/[\w/-]*\.(?:py|md|json|gz))")  # a file of the package


def test_every_path_the_docs_name_exists() -> None:
    missing = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for path in [*PATH_RE.findall(line), *("src/" + p for p in MODULE_RE.findall(line))]:
                path = path.rstrip("/.")
                if "*" in path:
                    found = any(ROOT.glob(path))
                else:
                    found = (ROOT / path).exists()
                if not found:
                    missing.append(f"{doc.relative_to(ROOT)}:{n}: {path}")
    assert not missing, "\n".join(missing)


# -- examples ---------------------------------------------------------------------------------

# The Mooncake example reads the user's copy of the trace; here it reads the bundled first
# 1,000 requests of it.
EXAMPLE_SETS = {
    "mooncake_prefix_cache.yaml": [
        "--set",
        f"workload.path={ROOT / 'tests/fixtures/traces/mooncake_conversation_1000.jsonl.gz'}",
    ]
}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example: Path, tmp_path, monkeypatch) -> None:
    argv = capped(["simulate", str(example.relative_to(ROOT))]) + EXAMPLE_SETS.get(example.name, [])
    res = invoke([*argv, "--no-progress", "-o", "out"], tmp_path, monkeypatch)
    assert res.exit_code == 0, res.output[-2000:]
    assert (tmp_path / "out" / "summary.json").is_file()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_files_and_counts(example: Path) -> None:
    """A file an example reads is bundled or named as the user's own copy; a request count its
    comments give is the file's."""
    text = example.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    wl = data.get("workload") or {}
    path = wl.get("path")
    assert "../" not in text and not re.search(r"(^|\s)/\w", re.sub(r"#.*", "", text)), example.name
    if path and not path.startswith("builtin:") and not (example.parent / path).exists():
        assert re.search(r"your (own )?copy", text), f"{example.name}: {path} is absent, not named the user's"
    comments = " ".join(re.findall(r"#(.*)", text))
    counts = {int(c.replace(",", "")) for c in re.findall(r"(\d[\d,]*) requests", comments)}
    counts |= {int(c) for c in re.findall(r"--num-prompts (\d+)", comments)}
    given = wl.get("limit") or wl.get("num_requests") or wl.get("num_prompts")
    assert counts <= {given}, f"{example.name}: comments say {counts}, the file {given}"


def test_mooncake_example_says_what_its_run_shows() -> None:
    """The Mooncake example's comment states its run's rejections, saturation, attainment and
    prefix-cache hits (on the bundled start of the trace): each figure is the run's."""
    from servesim import simulate
    from servesim.config import load_scenario

    example = ROOT / "examples" / "mooncake_prefix_cache.yaml"
    comment = " ".join(re.findall(r"#(.*)", example.read_text(encoding="utf-8")))
    comment = re.sub(r"\s+", " ", comment)

    def run(*sets: str) -> dict:
        return simulate(load_scenario(example, [*EXAMPLE_SETS[example.name][1::2], *sets])).summary

    s = run()
    assert s["counts"]["num_rejected"] == 0 and "none rejected" in comment
    assert not s["saturation"]["saturated"] and "not saturated" in comment
    assert f"{s['slo']['attainment']['all']:.0%} meet both SLOs" in comment
    assert f"TTFT p99 {s['latency']['ttft_s']['p99']:.0f} s" in comment
    assert f"finds {s['utilization']['overall']['prefix_hit_rate']:.1%} of prompt tokens" in comment
    assert f"KV cache holds ({s['memory'][0]['kv_capacity_tokens'] / 1e3:.0f}k tokens" in comment
    assert f"at 65536, {run('engine.max_model_len=65536')['counts']['num_rejected']} are" in comment
    off = run("engine.enable_prefix_caching=false")["slo"]["attainment"]["all"]
    assert f"(off: attainment {off:.0%})" in comment
    big = run("engine.num_gpu_blocks_override=400000")["utilization"]["overall"]["prefix_hit_rate"]
    assert f"engine.num_gpu_blocks_override=400000 finds {big:.1%}" in comment


def test_bursty_example_says_what_its_run_shows() -> None:
    from servesim import simulate
    from servesim.config import load_scenario

    example = ROOT / "examples" / "bursty_synthetic.yaml"
    comment = re.sub(r"\s+", " ", " ".join(re.findall(r"#(.*)", example.read_text(encoding="utf-8"))))
    s = simulate(load_scenario(example, [])).summary
    assert not s["saturation"]["saturated"] and s["counts"]["num_rejected"] == 0
    assert "not saturated, none rejected" in comment
    assert f"{s['slo']['attainment']['all']:.1%} of requests meet both SLOs" in comment
    assert f"(TTFT p90 {s['latency']['ttft_s']['p90']:.2f} s against the 1 s limit)" in comment


@pytest.mark.slow
def test_guide_figures_are_the_runs() -> None:
    """docs/guide.md's comparison (vLLM V1, Sarathi-Serve, a disaggregated pair on 2,000
    requests of the Azure trace) and its Mooncake run quote what the code gives today."""
    from servesim import simulate
    from servesim.config import load_scenario

    guide = re.sub(r"\s+", " ", (ROOT / "docs" / "guide.md").read_text(encoding="utf-8"))

    def run(*sets: str) -> dict:
        return simulate(load_scenario(None, list(sets))).summary

    def ms(s: dict, metric: str, p: str) -> float:
        return s["latency"][metric][p] * 1e3

    base = "workload.limit=2000"
    v1, sarathi = run(base), run(base, "engine.policy=sarathi")
    disagg = run(
        base,
        'cluster={"pools":[{"name":"prefill","role":"prefill","num_replicas":1},'
        '{"name":"decode","role":"decode","num_replicas":1}]}',
    )
    assert (
        f"p99 TTFT {ms(sarathi, 'ttft_s', 'p99'):.0f} ms against {ms(v1, 'ttft_s', 'p99'):.0f} ms, "
        f"median TPOT "
        f"{ms(sarathi, 'tpot_s', 'p50'):.1f} ms against {ms(v1, 'tpot_s', 'p50'):.1f} ms"
    ) in guide
    assert (
        f"({ms(disagg, 'tpot_s', 'p50'):.1f} ms median, {ms(disagg, 'tpot_s', 'p99'):.1f} ms p99 against "
        f"vLLM V1's {ms(v1, 'tpot_s', 'p99'):.1f} ms"
    ) in guide
    cost = [s["cost"]["usd_per_million_output_tokens"] for s in (disagg, v1)]
    assert f"(${cost[0]:.2f} against ${cost[1]:.2f} per million output tokens)" in guide
    for s in (v1, sarathi, disagg):
        assert s["counts"]["num_rejected"] == 0 and not s["saturation"]["saturated"]

    trace = [
        f"workload.path={ROOT / 'tests/fixtures/traces/mooncake_conversation_1000.jsonl.gz'}",
        "workload.format=mooncake",
    ]
    assert run(*trace)["saturation"]["saturated"]  # at its own rate: "one H100 saturates"
    mc = run(*trace, "workload.rate_scale=0.4")
    assert not mc["saturation"]["saturated"]
    assert f"(attainment {mc['slo']['attainment']['all']:.0%})" in guide
    assert f"finds only {mc['utilization']['overall']['prefix_hit_rate']:.1%} of prompt tokens" in guide
    assert f"({mc['memory'][0]['kv_capacity_tokens'] / 1e3:.0f}k tokens;" in guide
    big = run(*trace, "workload.rate_scale=0.4", "engine.num_gpu_blocks_override=400000")
    assert f"6.4M tokens, finds {big['utilization']['overall']['prefix_hit_rate']:.1%})" in guide


# -- figures quoted from the code -------------------------------------------------------------


def test_memory_plan_figures_in_perf_model_md() -> None:
    from servesim.config import Scenario
    from servesim.deployment import resolve_deployment

    doc = (ROOT / "docs" / "perf_model.md").read_text(encoding="utf-8")
    doc = re.sub(r"\s+", " ", doc)
    dep = resolve_deployment(Scenario())
    plan = dep.plan
    assert dep.engine.max_num_batched_tokens == 8192
    assert f"{dep.engine.gpu_memory_utilization} utilisation" in doc
    assert f"{plan.kv_bytes_per_token:.0f} B" in doc
    assert f"{plan.num_gpu_blocks:,} blocks" in doc
    assert f"{round(plan.kv_capacity_tokens / 1000)}k tokens" in doc
    assert f"{plan.activation_bytes / 2**30:.2f} GiB" in doc
    assert f"max_num_seqs {dep.engine.max_num_seqs}" in doc
    mla = resolve_deployment(
        Scenario(
            model={"name": "deepseek-ai/DeepSeek-V3"},
            hardware={"gpu": "H200"},
            parallel={"tensor_parallel_size": 8},
        )
    )
    assert f"{mla.plan.kv_bytes_per_token:,.0f} B" in doc


def test_default_scenario_figures() -> None:
    from servesim.config import TraceWorkload
    from servesim.workload import load_workload

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    workloads = (ROOT / "docs" / "workloads.md").read_text(encoding="utf-8")
    conv = load_workload(TraceWorkload(path="builtin:azure_conv"))
    code = load_workload(TraceWorkload(path="builtin:azure_code"))
    n_conv, n_code = len(conv.arrival_s), len(code.arrival_s)
    assert f"{n_conv:,} requests" in readme and f"{n_conv:,} requests" in workloads
    assert f"{n_code:,}\nrequests" in workloads or f"{n_code:,} requests" in workloads
    minutes = (conv.arrival_s[-1] - conv.arrival_s[0]) / 60
    assert f"~{minutes:.0f} min" in workloads


def test_chunked_prefill_figures_in_policies_md() -> None:
    """How many prompts of the default trace exceed the default token budget, and the longest."""
    from servesim.config import Scenario, TraceWorkload
    from servesim.deployment import resolve_deployment
    from servesim.workload import load_workload

    doc = re.sub(r"\s+", " ", (ROOT / "docs" / "policies.md").read_text(encoding="utf-8"))
    budget = resolve_deployment(Scenario()).engine.max_num_batched_tokens
    prompts = load_workload(TraceWorkload(path="builtin:azure_conv")).num_prompt_tokens
    over = int((prompts > budget).sum())
    words = {1: "one prompt exceeds"}.get(over, f"{over:,} prompts exceed")
    assert f"{len(prompts):,} requests, budget {budget:,} tokens) {words} the budget" in doc
    assert f"(the longest is {int(prompts.max()):,} tokens)" in doc


def test_cpu_recording_step_counts_in_fidelity_md() -> None:
    from servesim.calibration.engine_logs import read_engine_log

    doc = re.sub(r"\s+", " ", (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8")).replace("**", "")
    folder = ROOT / "tests" / "fixtures" / "vllm_timing"
    logs = {
        p.relative_to(folder).with_suffix("").as_posix(): len(read_engine_log(p).stats)
        for p in [*folder.glob("*.json"), *folder.glob("session2/*.json")]
    }
    assert f"every one of the {sum(logs.values()):,} steps of the eleven recordings" in doc
    assert len(logs) == 11
    assert f"Fitted on rate1.json's {logs['rate1']:,} steps" in doc
    assert f"its {logs['session2/long0.25']:,} steps are scheduled exactly" in doc
    assert f"rate1.5, {logs['rate1.5']:,} vs" in doc and f"rate2.5, {logs['rate2.5']} vs" in doc


def benchmark_commands() -> list[tuple[str, list[str]]]:
    """``python benchmarks/...`` commands quoted in the docs (they run for minutes: the test
    checks the script exists and takes the options quoted)."""
    out = []
    for doc in DOCS:
        for m in re.finditer(r"`python3? (benchmarks/\S+\.py)([^`]*)`", doc.read_text(encoding="utf-8")):
            out.append((m[1], m[2].split()))
    return out


@pytest.mark.parametrize(
    ("script", "args"), benchmark_commands(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_benchmark_commands_take_their_options(script: str, args: list[str]) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    for flag in (a for a in args if a.startswith("--")):
        assert flag in res.stdout, f"{script} has no {flag}"
