"""What the packers of AIConfigurator's tables share (``pack_served_moe.py``,
``pack_mla_module.py``): a file of one commit of a clone, and the command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def git(repo: Path, *args: str) -> bytes:
    """``git -C repo args...``'s output (a bare clone does)."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def run(
    doc: str,
    pack: Callable[[Path, str], dict[str, Any]],
    out: Path,
    summary: Callable[[dict[str, Any]], str],
    argv: list[str] | None = None,
) -> int:
    """``tool AICONFIGURATOR_REPO [--rev REV]``: ``pack(repo, rev)`` written to ``out`` as
    compact JSON, and one line saying what was written; 1 with git's message on failure."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a clone of github.com/ai-dynamo/aiconfigurator")
    ap.add_argument("--rev", default="HEAD", help="the commit to read the tables from (default HEAD)")
    a = ap.parse_args(argv)
    try:
        data = pack(a.repo, a.rev)
    except subprocess.CalledProcessError as err:
        print(f"{a.repo}: {err.stderr.decode().strip()}", file=sys.stderr)
        return 1
    out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {out} ({summary(data)})")
    return 0
