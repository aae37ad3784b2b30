"""The request stream of an inference-perf run, from inference-perf's own config file.

inference-perf (kubernetes-sigs/inference-perf) is the load generator of llm-d and of the
BLIS simulator's ground-truth runs. Given the YAML it runs with (the profile a user writes,
or the resolved ``config.yaml`` it writes into its results folder), this module builds the
requests it would send, so a run can be predicted before it is made. Modelled, from the
source of ``inference_perf/loadgen/load_timer.py`` and
``inference_perf/datagen/synthetic/shared_prefix_datagen.py`` (2026):

- **Load** (``load.type``): ``constant``: each stage of ``rate`` x ``duration`` requests
  has exponential gaps normalised to sum to the stage's duration
  (``ConstantLoadTimer``); ``poisson``: each second a Poisson(rate) number of requests,
  spread over that second the same way (``PoissonLoadTimer``). Stages run one after the
  other, ``load.interval`` seconds apart. inference-perf seeds these draws from the clock;
  servesim from the workload's ``seed``.
- **Data** (``data.type``): ``shared_prefix``: ``num_groups`` system prompts of
  ``system_prompt_len`` tokens, each followed by ``num_prompts_per_group`` questions of
  ``question_len`` tokens; request ``i`` sends prompt ``i mod N`` (``load_lazy_data``), so
  every prompt recurs every N requests and a prefix cache holds, besides the group's
  system prompt, the whole earlier copy of the prompt. With ``enable_multi_turn_chat``
  prompt ``i mod N`` is one user's, sent round after round; the prompts are taken to
  repeat unchanged, as the per-request token counts of the recorded runs show (each
  request's prompt length equals that of the request N before it in 99.4% of them).
  Newer inference-perf versions carry the conversation history into the prompt: not
  modelled. ``random`` / ``synthetic``: ``input_distribution`` and ``output_distribution``
  (normal, lognormal, uniform or fixed; clipped to [min, max] and rounded, as
  ``generate_distribution``), request ``i`` taking the ``i``-th draw, no shared prefixes.
- **Output lengths**: with ``server.ignore_eos`` (inference-perf's default for
  ``vllm``), the engine generates exactly ``max_tokens``; without it the model's EOS
  would end a response earlier, which no simulator can know: servesim then generates
  ``max_tokens`` and a notice says so.
- **Prompt lengths**: the configured length plus the tokenizer's special tokens
  (``num_special_tokens``, 1 for Llama's BOS). inference-perf builds prompts of random
  tokens decoded to text; the server's re-tokenization of that text can differ from the
  nominal length (the BLIS runs' Llama-2 prompts measure 4.7% above it): not modelled.

Refused with the field named: sweeps (their stages depend on a saturation probe), the
``concurrent`` and trace-replay load types, and datasets servesim does not carry
(ShareGPT downloads, CNN/DailyMail, billsum, multimodal data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from servesim.errors import ConfigError
from servesim.workload.base import Workload
from servesim.workload.limits import check_memory
from servesim.workload.notices import add_notice, notice

#: Tokens per prompt-identity unit of the generated prompts (vLLM's default KV block size).
HASH_BLOCK_TOKENS = 16
#: inference-perf's defaults (``inference_perf/config``): a shared-prefix group's system
#: prompt, question and output lengths, groups and prompts per group.
SHARED_PREFIX_DEFAULTS = {
    "num_groups": 10,
    "num_prompts_per_group": 10,
    "system_prompt_len": 100,
    "question_len": 50,
    "output_len": 50,
}
_ALIASES = {"num_unique_system_prompts": "num_groups", "num_users_per_system_prompt": "num_prompts_per_group"}
_DIST_KEYS = ("min", "max", "mean", "std_dev", "type", "total_count", "variance", "skew")
_SUPPORTED_DATA = ("shared_prefix", "random", "synthetic")
_SUPPORTED_LOAD = ("constant", "poisson")


def read_config(path: str | Path) -> dict[str, Any]:
    """inference-perf's YAML config (the profile or the resolved ``config.yaml``), as a dict."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such inference-perf config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: cannot read: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: not YAML: {str(err).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"{p}: not readable: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{p}: expected a mapping with 'data' and 'load' sections (inference-perf's "
            f"config), got {'an empty file' if data is None else 'a ' + type(data).__name__}"
        )
    return data


def _section(cfg: dict[str, Any], key: str, src: str) -> dict[str, Any]:
    sec = cfg.get(key) or {}
    if not isinstance(sec, dict):
        raise ConfigError(f"{src}: '{key}' must be a mapping, got {type(sec).__name__}")
    return sec


def _modelled_type(
    section: dict[str, Any], name: str, default: str, supported: tuple[str, ...], why: str, src: str
) -> str:
    """``section``'s ``type`` (lower case), refused where servesim does not model it."""
    kind = str(section.get("type", default)).lower()
    if kind not in supported:
        raise ConfigError(
            f"{src}: {name}.type {kind!r} is not modelled; expected one of {', '.join(supported)} ({why})"
        )
    return kind


def _number(value: Any, field: str, src: str, *, positive: bool = True) -> float:
    """A number of the config; a numeric string (YAML reads 1e20 as one) is read as inference-perf's
    pydantic models read it, as a number."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{src}: {field} must be a number, got {value!r}")
    if positive and not value > 0:
        raise ConfigError(f"{src}: {field} must be > 0, got {value!r}")
    if not np.isfinite(value):
        raise ConfigError(f"{src}: {field} must be a finite number, got {value!r}")
    return float(value)


def stage_arrivals(
    cfg: dict[str, Any], rng: np.random.Generator, src: str, rate_scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Send times (s from the first stage's start) and each request's stage index; every
    stage's rate times ``rate_scale``."""
    load = _section(cfg, "load", src)
    kind = _modelled_type(load, "load", "constant", _SUPPORTED_LOAD, "open-loop rates", src)
    if load.get("sweep"):
        raise ConfigError(
            f"{src}: load.sweep: a sweep's stages follow from a saturation probe of the real "
            "server; give load.stages (rate and duration of each) instead"
        )
    stages = load.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ConfigError(f"{src}: load.stages must be a non-empty list of {{rate, duration}}")
    interval = _number(load.get("interval", 1.0), "load.interval", src, positive=False)
    total = 0.0  # the stages' requests, refused before any is drawn if memory cannot hold them
    for k, st in enumerate(stages):
        if isinstance(st, dict):
            rate = _number(st.get("rate"), f"load.stages[{k}].rate", src) * rate_scale
            total += rate * _number(st.get("duration"), f"load.stages[{k}].duration", src)
    check_memory(total, f"{src}: load.stages (rate x duration)")
    times: list[np.ndarray] = []
    index: list[np.ndarray] = []
    start = 0.0
    for k, st in enumerate(stages):
        if not isinstance(st, dict):
            raise ConfigError(f"{src}: load.stages[{k}] must be a mapping with rate and duration")
        rate = _number(st.get("rate"), f"load.stages[{k}].rate", src) * rate_scale
        duration = _number(st.get("duration"), f"load.stages[{k}].duration", src)
        if kind == "constant":
            t = _normalised_gaps(rng, rate, duration)
        else:
            parts = []
            for second in range(int(duration)):
                n = int(rng.poisson(rate))
                if n:
                    parts.append(second + _normalised_gaps(rng, float(n), 1.0))
            t = np.concatenate(parts) if parts else np.empty(0)
        times.append(start + t)
        index.append(np.full(len(t), k, np.int64))
        start += duration + interval
    return np.concatenate(times), np.concatenate(index)


def _normalised_gaps(rng: np.random.Generator, rate: float, duration: float) -> np.ndarray:
    """``ConstantLoadTimer``: int(rate x duration) exponential gaps scaled to sum to ``duration``."""
    n = int(rate * duration)
    if n == 0:
        return np.empty(0)
    gaps = rng.exponential(1.0 / rate, n)
    return np.cumsum(gaps * (duration / gaps.sum()))


def sample_lengths(dist: Any, count: int, rng: np.random.Generator, field: str, src: str) -> np.ndarray:
    """inference-perf's ``Distribution`` (or a fixed int) drawn ``count`` times, clipped and rounded."""
    if isinstance(dist, int) and not isinstance(dist, bool):
        if dist < 0:
            raise ConfigError(f"{src}: {field} must be >= 0, got {dist}")
        return np.full(count, dist, np.int64)
    if not isinstance(dist, dict):
        raise ConfigError(
            f"{src}: {field} must be a token count or a distribution "
            f"{{min, max, mean, std_dev, type}}, got {dist!r}"
        )
    bad = [k for k in dist if k not in _DIST_KEYS]
    if bad:
        raise ConfigError(
            f"{src}: {field}.{bad[0]} is not a field of inference-perf's distribution; "
            f"expected {', '.join(_DIST_KEYS)}"
        )
    lo, hi = int(dist.get("min", 10)), int(dist.get("max", 1024))
    mean = float(dist.get("mean", 512))
    std = (
        float(dist["variance"]) ** 0.5
        if dist.get("variance") is not None
        else float(dist.get("std_dev", 200))
    )
    kind = str(dist.get("type", "normal")).lower()
    if lo > hi:
        raise ConfigError(f"{src}: {field}: min {lo} > max {hi}")
    if kind == "fixed":
        return np.full(count, int(mean), np.int64)
    if kind == "uniform":
        x = rng.uniform(lo, hi, count)
    elif kind == "lognormal":
        shifted = mean - lo if mean > lo else 1.0
        s2 = np.log(1.0 + (std / shifted) ** 2)
        x = rng.lognormal(np.log(shifted) - s2 / 2.0, np.sqrt(s2), count) + lo
    elif kind == "normal":
        if not lo <= mean <= hi:
            raise ConfigError(f"{src}: {field}: mean {mean:g} outside [min {lo}, max {hi}]")
        x = rng.normal(mean, std, count)
    else:
        raise ConfigError(
            f"{src}: {field}.type {kind!r} is not modelled; expected normal, lognormal, uniform or fixed"
        )
    return np.clip(np.round(np.clip(x, lo, hi)), lo, hi).astype(np.int64)


def _shared_prefix(
    sp: dict[str, Any], rng: np.random.Generator, src: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(system prompt length, question length, output length, group) of each of the N prompts,
    in the order requests send them (inference-perf shuffles them once with its seeded rng)."""
    sp = {_ALIASES.get(k, k): v for k, v in sp.items()}
    for key in ("question_distribution", "output_distribution"):
        if sp.get(key) is not None:
            sp[key.replace("_distribution", "_len")] = sp.pop(key)
    known = (
        *SHARED_PREFIX_DEFAULTS,
        "seed",
        "enable_multi_turn_chat",
        "question_distribution",
        "output_distribution",
    )
    bad = [k for k in sp if k not in known and k != "multimodal"]
    if bad:
        raise ConfigError(
            f"{src}: data.shared_prefix.{bad[0]} is not a shared-prefix field; expected {', '.join(known)}"
        )
    if sp.get("multimodal"):
        raise ConfigError(f"{src}: data.shared_prefix.multimodal: multimodal prompts are not modelled")
    v = {**SHARED_PREFIX_DEFAULTS, **{k: x for k, x in sp.items() if x is not None}}
    groups = int(_number(v["num_groups"], "data.shared_prefix.num_groups", src))
    per = int(_number(v["num_prompts_per_group"], "data.shared_prefix.num_prompts_per_group", src))
    sys_len = sample_lengths(v["system_prompt_len"], groups, rng, "data.shared_prefix.system_prompt_len", src)
    q = np.concatenate(
        [
            sample_lengths(v["question_len"], per, rng, "data.shared_prefix.question_len", src)
            for _ in range(groups)
        ]
    )
    out = np.concatenate(
        [
            sample_lengths(v["output_len"], per, rng, "data.shared_prefix.output_len", src)
            for _ in range(groups)
        ]
    )
    group = np.repeat(np.arange(groups, dtype=np.int64), per)
    order = rng.permutation(groups * per)
    return sys_len[group][order], q[order], out[order], group[order]


def prompt_hash_ids(
    sys_len: int, prompt_len: int, group: int, prompt: int, unit: int = HASH_BLOCK_TOKENS
) -> tuple[int, ...]:
    """Identity of each ``unit`` tokens of a shared-prefix prompt: units wholly inside the
    group's system prompt are the group's, the rest the prompt's own (equal ids at equal
    positions are equal tokens, as prefix caching matches them)."""
    n = -(-prompt_len // unit)
    shared = sys_len // unit
    return tuple((group << 20) + b if b < shared else (1 << 40) + (prompt << 20) + b for b in range(n))


def generate_inference_perf(
    path: str | Path, seed: int = 0, num_special_tokens: int = 1, rate_scale: float = 1.0
) -> Workload:
    """The requests inference-perf sends for the config at ``path`` (see the module's docstring),
    every stage's rate times ``rate_scale``."""
    src = str(path)
    cfg = read_config(path)
    rng = np.random.default_rng(seed)
    data = _section(cfg, "data", src)
    kind = _modelled_type(
        data,
        "data",
        "mock",
        _SUPPORTED_DATA,
        "datasets are downloaded by inference-perf, not carried by servesim",
        src,
    )
    meta: dict[str, Any] = {}
    arrival, stage = stage_arrivals(cfg, rng, src, rate_scale)
    n = len(arrival)
    if n == 0:
        raise ConfigError(f"{src}: load.stages send no request (rate x duration < 1 in every stage)")
    hash_ids = None
    if kind == "shared_prefix":
        prompt, output, hash_ids = _shared_prefix_requests(data, n, rng, src, num_special_tokens)
    else:
        prompt, output = _distribution_requests(data, n, rng, src, num_special_tokens)
    _add_notices(meta, cfg, prompt, output, src)
    meta["stage"] = stage
    meta["inference_perf"] = {
        "data": kind,
        "load": str(_section(cfg, "load", src).get("type", "constant")),
        "stages": int(stage.max()) + 1,
    }
    wl = Workload(
        arrival_s=arrival.astype(np.float64),
        num_prompt_tokens=np.maximum(prompt, 1).astype(np.int64),
        num_output_tokens=np.maximum(output, 1).astype(np.int64),
        hash_ids=hash_ids,
        hash_block_tokens=HASH_BLOCK_TOKENS,
        source=f"inference-perf {src}",
        meta=meta,
    )
    wl.validate()
    return wl


def _shared_prefix_requests(
    data: dict[str, Any], n: int, rng: np.random.Generator, src: str, num_special_tokens: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """``data.type: shared_prefix``: the prompts (system prompt + question), outputs and hash
    ids of ``n`` requests, cycling through the generated prompts in order."""
    sp = data.get("shared_prefix")
    if not isinstance(sp, dict):
        raise ConfigError(f"{src}: data.type shared_prefix needs a data.shared_prefix mapping")
    sys_len, q_len, out_len, group = _shared_prefix(sp, rng, src)
    p = np.arange(n) % len(sys_len)
    prompt = sys_len[p] + q_len[p] + num_special_tokens
    output = out_len[p]
    units = [
        prompt_hash_ids(
            int(sys_len[j]) + num_special_tokens,
            int(sys_len[j] + q_len[j]) + num_special_tokens,
            int(group[j]),
            j,
        )
        for j in range(len(sys_len))
    ]
    return prompt, output, [units[j] for j in p.tolist()]


def _distribution_requests(
    data: dict[str, Any], n: int, rng: np.random.Generator, src: str, num_special_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """``data.type: random / synthetic``: prompt and output lengths of ``n`` requests, from
    ``total_count`` draws of each distribution (default ``n``) taken in turn."""
    count_in = (data.get("input_distribution") or {}).get("total_count") or n
    count_out = (data.get("output_distribution") or {}).get("total_count") or n
    inp = sample_lengths(
        data.get("input_distribution") or {}, int(count_in), rng, "data.input_distribution", src
    )
    out = sample_lengths(
        data.get("output_distribution") or {}, int(count_out), rng, "data.output_distribution", src
    )
    idx = np.arange(n)
    return inp[idx % len(inp)] + num_special_tokens, out[idx % len(out)]


def _add_notices(
    meta: dict[str, Any], cfg: dict[str, Any], prompt: np.ndarray, output: np.ndarray, src: str
) -> None:
    """Into ``meta``: responses the model's EOS could end early, and lengths of 0 raised to 1."""
    n = len(prompt)
    server = _section(cfg, "server", src)
    if not server.get("ignore_eos", True):
        add_notice(
            meta,
            notice(
                "eos_unknown",
                f"{src}: server.ignore_eos is false: the model's EOS may end "
                "responses before max_tokens, which servesim cannot know; each request "
                "generates its max_tokens",
                n,
                src,
            ),
        )
    zero = int(np.sum(prompt < 1) + np.sum(output < 1))
    if zero:
        add_notice(meta, notice("zero_length_raised", f"{src}: {zero:,} lengths of 0 raised to 1", zero, src))
