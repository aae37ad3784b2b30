"""Pack B200's per-tensor FP8 GEMM table of vLLM 0.24.0 (vLLM's CUTLASS ``scaled_mm``).

The packed B200 tables of vLLM 0.19.0 (``tools/pack_kernels.py``) time per-tensor FP8
GEMMs no faster than bf16 ones at compute-bound shapes: AIConfigurator's collector of
that table built the layer with static activation scales, which vLLM 0.14-0.19 runs on
SM100 through FlashInfer's ``bmm_fp8(..., "auto")``, and ran it outside FlashInfer's
autotuner, so every shape timed the fallback tactic of its first runner (FlashInfer's
CUTLASS SM100 GEMM), where a served engine autotunes it at startup
(``servesim.perf.kernel_layers``, ``_gemm_table``). AIConfigurator's vLLM 0.24.0 table of
B200, at the same source commit, names the kernel of each row (``kernel_source``): its
``fp8`` rows time ``CutlassFP8ScaledMMLinearKernel`` (per-token dynamic activation scales,
vLLM's ``cutlass_scaled_mm``, whose SM100 tile configurations are the same in vLLM 0.10.1,
0.19.0 and 0.24.0), its ``bfloat16`` rows ``torch.nn.functional.linear``.

This tool writes those two dtypes' rows into ``src/servesim/data/kernels/b200_sxm_0.24.0_gemm.npz``
in ``tools/pack_kernels.py``'s layout (``gemm.<dtype>.{m,n,k,lat}``, latencies in ms as
float32, NaN where not measured, repeats averaged, nothing fitted), with the source
repository, commit, file and the rows' kernel names in its ``meta``. The file is not in
``index.json``: no engine version reads its tables but the FP8 GEMMs that fall back on it.

    python tools/pack_served_gemm.py AICONFIGURATOR_REPO [--rev REV]

``AICONFIGURATOR_REPO`` is a clone of github.com/ai-dynamo/aiconfigurator (a bare one
does); the table is read from ``REV`` (default HEAD) with ``git show``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from _aic import git
from pack_kernels import _grid, _planes

OUT = Path(__file__).resolve().parents[1] / "src" / "servesim" / "data" / "kernels"
GPU, VERSION = "b200_sxm", "0.24.0"
TABLE = f"aic-core/src/aiconfigurator_core/systems/data/{GPU}/gemm/vllm/{VERSION}/gemm_perf.parquet"
#: The dtypes packed and the one kernel each dtype's rows must name.
KERNELS = {"fp8": "CutlassFP8ScaledMMLinearKernel", "bfloat16": "torch.nn.functional.linear"}


def pack(repo: Path, rev: str) -> dict[str, object]:
    """Write the npz; return its summary (file, bytes, sha256 and meta)."""
    commit = git(repo, "rev-parse", rev).decode().strip()
    t = pq.read_table(io.BytesIO(git(repo, "show", f"{commit}:{TABLE}")))
    d = {
        c: np.asarray(t.column(c).to_pylist())
        for c in ("gemm_dtype", "kernel_source", "m", "n", "k", "latency")
    }
    arrays: dict[str, np.ndarray] = {}
    for dt, kernel in KERNELS.items():
        s = d["gemm_dtype"] == dt
        found = sorted(set(d["kernel_source"][s].tolist()))
        if found != [kernel]:
            raise ValueError(f"{TABLE}: {dt} rows name {found}, expected [{kernel!r}]")
        axes = [np.unique(d[a][s]) for a in ("m", "n", "k")]
        arrays.update({f"gemm.{dt}.m": axes[0], f"gemm.{dt}.n": axes[1], f"gemm.{dt}.k": axes[2]})
        arrays[f"gemm.{dt}.lat"] = _grid(axes, [d[a][s] for a in ("m", "n", "k")], d["latency"][s])
    meta = {
        "gpu": GPU,
        "vllm_version": VERSION,
        "source": "https://github.com/ai-dynamo/aiconfigurator",
        "commit": commit,
        "tables": [TABLE],
        "kernels": KERNELS,
        "float_arrays": sorted(k for k, v in arrays.items() if v.dtype == np.float32),
    }
    stored: dict[str, Any] = {k: (_planes(v) if v.dtype == np.float32 else v) for k, v in arrays.items()}
    stored["meta"] = np.array(json.dumps(meta))
    stored.update({f"shape.{k}": np.array(v.shape) for k, v in arrays.items() if v.dtype == np.float32})
    out = OUT / f"{GPU}_{VERSION}_gemm.npz"
    np.savez_compressed(out, **stored)
    return {
        "file": out.name,
        "bytes": out.stat().st_size,
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a clone of github.com/ai-dynamo/aiconfigurator")
    ap.add_argument("--rev", default="HEAD", help="the commit to read the table from (default HEAD)")
    a = ap.parse_args(argv)
    try:
        info = pack(a.repo, a.rev)
    except subprocess.CalledProcessError as err:
        print(f"{a.repo}: {err.stderr.decode().strip()}", file=sys.stderr)
        return 1
    except ValueError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"wrote {OUT / str(info['file'])} ({int(str(info['bytes'])) / 1e3:.1f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
