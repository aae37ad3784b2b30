"""Pack the `vllm serve` settings of InferenceMAX's benchmark scripts, version by version.

The InferenceMAX rows of ``silicon_vllm.csv`` were measured by SemiAnalysis' InferenceMAX
(now InferenceX, github.com/SemiAnalysisAI/InferenceX, Apache-2.0): one shell script per
(model, precision, GPU) starts ``vllm serve`` with its own flags, then runs the benchmark
client. The flags changed over time (a FP8 KV cache, a larger CUDA-graph capture size, a
token budget of twice the prompt, ...), so a row ran with the flags of the script's
version at the row's ``measured=`` time. This tool reads every version of the scripts named
in ``SCRIPTS`` from a local clone's git history and writes, per script, the versions'
commit, commit time and the settings servesim models (engine and model fields), with the
flags and environment variables it records but does not model, and the benchmark client's
``--max-concurrency`` where a version fixes it to a number instead of the run's ``$CONC``
(``client``), into
``src/servesim/data/inferencemax_servers.json``. The package reads only that file.

    python tools/pack_inferencemax_servers.py PATH_TO_INFERENCEX_CLONE
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "inferencemax_servers.json"

#: (model_path, precision, system) of silicon_vllm.csv -> the script's base name.
SCRIPTS = {
    ("meta-llama/Llama-3.1-70B", "fp4", "b200_sxm"): "70b_fp4_b200",
    ("meta-llama/Llama-3.1-70B", "fp8", "h200_sxm"): "70b_fp8_h200",
    ("openai/gpt-oss-120b", "fp4", "b200_sxm"): "gptoss_fp4_b200",
    ("openai/gpt-oss-120b", "fp4", "h100_sxm"): "gptoss_fp4_h100",
    ("MiniMaxAI/MiniMax-M2.5", "fp8", "b200_sxm"): "minimaxm2.5_fp8_b200",
    ("MiniMaxAI/MiniMax-M2.5", "fp8", "b300_sxm"): "minimaxm2.5_fp8_b300",
    ("MiniMaxAI/MiniMax-M2.5", "fp8", "h100_sxm"): "minimaxm2.5_fp8_h100",
    ("MiniMaxAI/MiniMax-M2.5", "fp8", "h200_sxm"): "minimaxm2.5_fp8_h200",
    ("MiniMaxAI/MiniMax-M2.5", "fp4", "b200_sxm"): "minimaxm2.5_fp4_b200",
    ("MiniMaxAI/MiniMax-M2.5", "fp4", "b300_sxm"): "minimaxm2.5_fp4_b300",
    ("moonshotai/Kimi-K2.5", "fp4", "b200_sxm"): "kimik2.5_fp4_b200",
    ("moonshotai/Kimi-K2.5", "fp4", "b300_sxm"): "kimik2.5_fp4_b300",
    ("moonshotai/Kimi-K2.5", "int4", "b200_sxm"): "kimik2.5_int4_b200",
    ("moonshotai/Kimi-K2.5", "int4", "h200_sxm"): "kimik2.5_int4_h200",
}
#: Where the scripts lived over time (the vLLM ones; TensorRT-LLM and SGLang scripts differ).
LOCATIONS = (
    "benchmarks/{}.sh",
    "benchmarks/{}_docker.sh",
    "benchmarks/{}_slurm.sh",
    "benchmarks/single_node/{}.sh",
    "benchmarks/single_node/fixed_seq_len/{}.sh",
)

# A flag given on the command line (--name value / --name=value) or in the YAML config the
# older scripts write (name: value).
_VALUE = r"""(\$\(\([^)]*\)\)|"[^"]*"|'[^']*'|[^\s'"\\]+)"""


def _flag(text: str, name: str) -> list[str]:
    pat = rf"(?:--{name}(?:=|\s+)|^\s*{name}:\s*){_VALUE}"
    return [v.strip("'\"") for v in re.findall(pat, text, flags=re.MULTILINE)]


def _present(text: str, name: str) -> bool:
    return re.search(rf"(?:--{name}\b|^\s*{name}:\s*true)", text, flags=re.MULTILINE) is not None


#: The benchmark's own variables, kept as names (``_tokens`` evaluates them per row).
_RUN_VARS = ("ISL", "OSL", "CONC", "TP")


def _resolve(text: str, value: str, conflicts: list[str], depth: int = 0) -> str:
    """``$NAME`` / ``${NAME}`` of a shell variable the script assigns (``NAME=value``),
    replaced by its value; the benchmark's own variables are left as they are."""
    m = re.fullmatch(r"\$\{?([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}?", value)
    if not m or m.group(1) in _RUN_VARS:
        return value
    vals = sorted(
        {
            v.strip("'\"")
            for v in re.findall(rf"^\s*(?:export\s+)?{m.group(1)}={_VALUE}", text, flags=re.MULTILINE)
        }
    )
    if len(vals) > 1:
        conflicts.append(f"${m.group(1)}: {', '.join(vals)}")
    if vals and vals[0] == value and m.group(2) is not None:
        return m.group(2)  # NAME=${NAME:-default}: the default
    if vals:
        return vals[0] if vals[0] == value or depth > 2 else _resolve(text, vals[0], conflicts, depth + 1)
    if m.group(2) is not None:
        return m.group(2)
    conflicts.append(f"${m.group(1)}: not assigned in the script")
    return value


def _one(text: str, name: str, conflicts: list[str]) -> str | None:
    vals = sorted({_resolve(text, v, conflicts) for v in _flag(text, name)})
    if len(vals) > 1:
        conflicts.append(f"{name}: {', '.join(vals)}")
    return vals[0] if vals else None


def _tokens(expr: str) -> int | str:
    """A token count, or an expression in ISL / OSL / CONC (``2*ISL``), or ``unparsed: ...``
    (a construct this parser does not follow; servesim leaves that setting at its default)."""
    if expr.isdigit():
        return int(expr)
    m = re.fullmatch(r"\$\(\(\s*\$?(ISL|OSL|CONC)\s*\*\s*(\d+)\s*\)\)", expr)
    if m:
        return f"{m.group(2)}*{m.group(1)}"
    m = re.fullmatch(r"\$\(\(\s*(\d+)\s*\*\s*\$?(ISL|OSL|CONC)\s*\)\)", expr)
    if m:
        return f"{m.group(1)}*{m.group(2)}"
    m = re.fullmatch(r"\$\{?(ISL|OSL|CONC)\}?", expr)
    if m:
        return m.group(1)
    return f"unparsed: {expr}"


def _ep_when(text: str) -> str:
    """When a script that has ``--enable-expert-parallel`` passes it: ``"ep>1"`` behind a test
    of the run's EP size above 1 (``[ "$EP_SIZE" -gt 1 ]``), else ``"always"`` (no test, or
    ``-ge 1``, which every run's EP size passes: the MiniMax-M2.5 FP8 scripts of March 2026)."""
    guards = re.findall(r'\$\{?EP_SIZE(?::-\d+)?\}?"?\s+-(ge|gt)\s+(\d+)', text)
    return "ep>1" if guards and all(int(n) + (op == "gt") > 1 for op, n in guards) else "always"


def parse(text: str) -> dict[str, Any]:
    """The settings of one version of a script (see the module doc)."""
    conflicts: list[str] = []
    engine: dict[str, Any] = {}
    model: dict[str, Any] = {}
    if (v := _one(text, "gpu-memory-utilization", conflicts)) is not None:
        engine["gpu_memory_utilization"] = float(v)
    if (v := _one(text, "block-size", conflicts)) is not None:
        engine["block_size"] = int(v)
    if (v := _one(text, "max-num-batched-tokens", conflicts)) is not None:
        engine["max_num_batched_tokens"] = _tokens(v)
    if (v := _one(text, "max-num-seqs", conflicts)) is not None:
        engine["max_num_seqs"] = _tokens(v)
    cap = _one(text, "max-cudagraph-capture-size", conflicts) or _one(text, "cuda-graph-sizes", conflicts)
    if cap is not None:
        engine["max_cudagraph_capture_size"] = _tokens(cap)
    modes = sorted(set(re.findall(r'cudagraph_mode\\?"\s*:\s*\\?"(\w+)', text)))
    if len(modes) > 1:
        conflicts.append(f"cudagraph_mode: {', '.join(modes)}")
    if modes:
        engine["cudagraph_mode"] = modes[0].lower()
    if _present(text, "async-scheduling"):
        engine["async_scheduling"] = True
    if _present(text, "no-enable-prefix-caching"):
        engine["enable_prefix_caching"] = False
    if _present(text, "enforce-eager"):
        engine["enforce_eager"] = True
    if (v := _one(text, "kv-cache-dtype", conflicts)) is not None:
        model["kv_cache_dtype"] = v
    recorded: dict[str, Any] = {}
    for name in ("stream-interval", "data-parallel-size"):
        if (v := _one(text, name, conflicts)) is not None:
            recorded[name] = v
    if _present(text, "enable-expert-parallel"):
        recorded["enable-expert-parallel"] = _ep_when(text)
    if "fuse_allreduce_rms" in text or "enable_fi_allreduce_fusion" in text:
        recorded["allreduce-rms-fusion"] = True
    env = dict(
        sorted(set(re.findall(r"^\s*(?:export\s+)?(VLLM_[A-Z0-9_]+)=(\S+)", text, flags=re.MULTILINE)))
    )
    client: dict[str, Any] = {}
    if (v := _one(text, "max-concurrency", conflicts)) is not None and v.isdigit():
        client["max_concurrency"] = int(v)  # a fixed number, not the run's $CONC
    return {
        "engine": engine,
        "model": model,
        "recorded": recorded,
        "env": env,
        "client": client,
        "conflicts": conflicts,
    }


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _logged(repo: Path, paths: list[str], *refs: str) -> list[dict[str, Any]]:
    """The versions of the script at ``paths`` in the history of ``refs`` (default HEAD),
    one per commit time: the docker and slurm variants of a commit agree (checked)."""
    log = _git(repo, "log", *refs, "--format=%H %cI", "--name-only", "--", *paths)
    out: list[dict[str, Any]] = []
    commit = when = ""
    for line in log.splitlines():
        head = re.fullmatch(r"([0-9a-f]{40}) (\S+)", line)
        if head:
            commit = head.group(1)
            when = datetime.fromisoformat(head.group(2)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        elif line.strip():
            try:
                text = _git(repo, "show", f"{commit}:{line.strip()}")
            except subprocess.CalledProcessError:
                continue  # the commit deleted it
            if "vllm serve" not in text:
                continue
            out.append({"from": when, "commit": commit, "path": line.strip(), **parse(text)})
    by_time: dict[str, dict[str, Any]] = {}
    for v in sorted(out, key=lambda v: (v["from"], v["path"])):
        kept = by_time.setdefault(v["from"], v)
        if kept is not v and (kept["engine"], kept["model"]) != (v["engine"], v["model"]):
            kept["conflicts"].append(f"{v['path']} differs from {kept['path']}")
    return list(by_time.values())


def versions(repo: Path, base: str) -> list[dict[str, Any]]:
    """Every version of one script: commit, UTC commit time, path, settings (oldest first).

    The versions of the main line, and before its first one the versions of the pull-request
    branches that added the script (``"branch": true``): a run measured before the script
    was merged is the pull request's own benchmark, of the branch's script at that time
    (MiniMax-M2.5 FP4 B200's vLLM-nightly runs of 3 April 2026, five days before the merge,
    ran without the later token budget and CUDA-graph capture size)."""
    paths = [p.format(base) for p in LOCATIONS]
    main = _logged(repo, paths)
    if not main:
        return []
    on_main = {v["commit"] for v in main}
    early = [
        dict(v, branch=True)
        for v in _logged(repo, paths, "--all")
        if v["commit"] not in on_main and v["from"] < main[0]["from"]
    ]
    return early + main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a clone of github.com/SemiAnalysisAI/InferenceX, with history")
    args = ap.parse_args(argv)
    scripts = {}
    for (model, precision, system), base in sorted(SCRIPTS.items(), key=lambda kv: kv[1]):
        vs = versions(args.repo, base)
        if not vs:
            print(f"{base}: no version found", file=sys.stderr)
            return 1
        for v in vs:
            if v["conflicts"]:
                print(f"{base} {v['commit'][:9]}: {'; '.join(v['conflicts'])}", file=sys.stderr)
        scripts[base] = {"model_path": model, "precision": precision, "system": system, "versions": vs}
    OUT.write_text(
        json.dumps(
            {
                "source": "github.com/SemiAnalysisAI/InferenceX (Apache-2.0): the vllm serve lines of "
                "benchmarks/**/<script>.sh, every version in its git history",
                "scripts": scripts,
            },
            indent=1,
        )
        + "\n"
    )
    num_versions = sum(len(s["versions"]) for s in scripts.values())
    print(f"wrote {OUT} ({num_versions} versions of {len(scripts)} scripts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
