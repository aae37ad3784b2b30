"""Build hook: compile the engine's hot path with mypyc (everything else is in pyproject.toml).

The modules in ``COMPILED`` are plain, typed Python; mypyc turns them into C extensions that
make the same decisions 1.5-2x faster (docs/speed.md). They stay importable as Python: a
build without a C compiler or without mypyc falls back to them, and so does an editable
install (``pip install -e .``), where compiled copies beside the sources would shadow every
later edit. ``SERVESIM_COMPILE=1`` forces compilation (an error if it fails, compiled
copies in place for an editable install), ``SERVESIM_COMPILE=0`` turns it off.
"""

import os
import sys

from setuptools import setup

COMPILED = [
    "servesim/engine/events.py",
    "servesim/engine/arrivals.py",
    "servesim/engine/request.py",
    "servesim/engine/kv_free_queue.py",
    "servesim/engine/kv_counting.py",
    "servesim/engine/scheduler.py",
    "servesim/engine/decode_runs.py",
    "servesim/engine/lazy.py",
    "servesim/engine/run_rows.py",
    "servesim/engine/step_accounts.py",
    "servesim/engine/replica.py",
    "servesim/engine/batch_queue.py",
    "servesim/engine/frontend.py",
    "servesim/engine/run_stream.py",
    "servesim/engine/lockstep.py",
    "servesim/metrics/itl.py",
    "servesim/metrics/req_status.py",
    "servesim/metrics/flat_runs.py",
    "servesim/metrics/step_series.py",
    "servesim/metrics/step_stream.py",
    "servesim/metrics/totals.py",
    "servesim/metrics/writer.py",
    "servesim/perf/base.py",
    "servesim/perf/kernel_step.py",
    "servesim/perf/work_step.py",
]
BUILDS = {"build", "build_ext", "bdist_wheel", "install", "develop", "editable_wheel"}


def ext_modules() -> list:
    mode = os.environ.get("SERVESIM_COMPILE", "auto").strip().lower()
    if mode in ("0", "false", "no", "off") or not BUILDS & set(sys.argv):
        return []  # metadata-only hooks (egg_info, dist_info) need no extensions
    forced = mode in ("1", "true", "yes", "on")
    if not forced and ("editable_wheel" in sys.argv or "develop" in sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        if forced:
            raise
        return []
    paths = [os.path.join("src", p) for p in COMPILED]
    try:
        # --no-warn-unused-configs: [tool.mypy] overrides name modules this build does not check,
        # and mypyc fails on any message, notes included
        flags = ["--follow-imports=silent", "--ignore-missing-imports", "--no-warn-unused-configs"]
        exts = mypycify([*flags, *paths], opt_level="3", group_name="servesim_engine")
    except BaseException:  # a type error mypyc cannot compile: build pure Python instead
        if forced:
            raise
        print("servesim: mypyc could not compile the engine; installing pure Python", file=sys.stderr)
        return []
    for e in exts:
        e.optional = not forced  # no working C compiler: pure Python instead of a failed install
    return exts


setup(ext_modules=ext_modules())
