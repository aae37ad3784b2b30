"""vLLM versions as a scenario writes them (``engine.version``): reading one, checking how
it is written, and the range of versions whose rules servesim has read."""

from __future__ import annotations

import re

#: A vLLM version as its releases and wheels are numbered: MAJOR.MINOR[.PATCH], an optional
#: leading v, and PEP 440 pre/post/dev and local suffixes ('0.11.0rc2', '0.15.1.post1',
#: '0.10.2.dev57+g1234abc').
_VERSION_RE = re.compile(
    r"[vV]?\d+\.\d+(?:\.\d+)?(?:[-.]?(?:rc|a|b|alpha|beta|post|dev)\d*)*(?:\+[0-9A-Za-z.]+)?"
)


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.19.0' -> (0, 19, 0); 'v0.15' -> (0, 15). Non-numeric suffixes ('rc1') are dropped."""
    out: list[int] = []
    for part in version.lstrip("vV").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
    if not out:
        raise ValueError(f"not a vLLM version: {version!r}")
    return tuple(out)


#: The newest vLLM version modelled (the newest the bundled kernel tables measure).
VLLM_DEFAULT_VERSION = "0.19.0"
#: The vLLM versions whose rules servesim has read: the execution-path rules from v0.10.1
#: (docs/perf_model.md, "vLLM's default execution path"), the engine defaults up to v0.32
#: (``engine_defaults``). A version outside runs with the nearest end's rules (every
#: version-dependent rule is a threshold within this range), with a notice.
VLLM_OLDEST_KNOWN = "0.10.1"
VLLM_NEWEST_KNOWN = "0.32"


def check_version(version: str) -> str:
    """``version`` if it is written as a vLLM version is, else a ValueError saying what was expected."""
    if not _VERSION_RE.fullmatch(version.strip()):
        raise ValueError(
            f"not a vLLM version: {version!r} (expected MAJOR.MINOR[.PATCH] as vLLM's releases are "
            f"numbered, e.g. {VLLM_DEFAULT_VERSION!r})"
        )
    return version


def version_notice(version: str) -> str:
    """A line saying which version's behaviour is used for a ``version`` outside the range
    servesim knows ('' inside it)."""
    v, oldest, newest = (
        version_tuple(version),
        version_tuple(VLLM_OLDEST_KNOWN),
        version_tuple(VLLM_NEWEST_KNOWN),
    )
    if v < oldest:
        return (
            f"engine.version {version} is older than any vLLM servesim models ({VLLM_OLDEST_KNOWN} to "
            f"{VLLM_NEWEST_KNOWN}): vLLM {VLLM_OLDEST_KNOWN}'s behaviour is used"
        )
    if v[:2] > newest:
        return (
            f"engine.version {version} is newer than any vLLM servesim models ({VLLM_OLDEST_KNOWN} to "
            f"{VLLM_NEWEST_KNOWN}): vLLM {VLLM_NEWEST_KNOWN}'s behaviour is used"
        )
    return ""
