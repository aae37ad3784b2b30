"""``servesim profile``: time a model's operators on the local device (needs torch).

For a grid of token counts, one transformer layer's operators are timed with random
weights in the model's shapes (one tensor-parallel rank's shard): the QKV and output
projections, the MLP's up (gate+up) and down GEMMs, the two RMSNorms, rotary embedding,
activation and residual add. They are written in Vidur's operator-profile format
(``compute/<device>/<model>/mlp.csv``, times in ms with min/max/mean/median/std), so
``servesim calibrate`` reads them like Vidur's own. Attention is timed too, over a grid
of context lengths (prefill chunks and decode batches), into ``attention.csv`` beside it.

Timing: ``repeats`` runs after ``warmup`` runs, each measured with ``time.perf_counter``
around the operator (and the device's ``synchronize`` on a GPU); the table holds their
statistics. This is the operator's wall time including framework dispatch, which on a CPU
in eager mode is what the engine pays too.

Before any timing the inputs are checked (the grid, the tensor-parallel degree against
the model's heads) and so is the device: one the installed torch cannot use is refused
in one line, with nothing written (``profile_checks``). While timing, each completed row is appended to
``mlp.partial.csv`` / ``attention.partial.csv``; both are renamed to their final names
only when the whole profile is measured, so an interrupted run keeps what it measured
under names ``calibrate`` does not read, and never leaves a final pair from two runs.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from servesim.catalog.models import ModelSpec
from servesim.errors import ServesimError
from servesim.profile_checks import check_device, check_inputs, import_torch
from servesim.profile_layers import attention_rows, layer_ops, time_stats

DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXTS = (128, 512, 2048)
DEFAULT_BATCHES = (1, 4, 16)

#: Vidur's operator names, in its column order.
OPS = (
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)

_STATS = ("min", "max", "mean", "median", "std")
_MLP_META = (
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "vocab_size",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
)
MLP_FIELDS = tuple(f"time_stats.{op}.{s}" for op in OPS for s in _STATS) + _MLP_META
ATTENTION_FIELDS = (
    ("kind", "num_tokens", "context_len", "batch_size")
    + tuple(f"time_stats.attention.{s}" for s in _STATS)
    + ("num_tensor_parallel_workers",)
)


class ProfileInterrupted(KeyboardInterrupt):
    """Ctrl-C while timing; ``str()`` says what was kept (the rows measured so far)."""


def _timer(torch: Any, device: str, warmup: int, repeats: int) -> Callable[[Callable[[], Any]], list[float]]:
    kind = device.partition(":")[0]
    sync = getattr(torch, kind).synchronize if kind != "cpu" else (lambda: None)

    def run(fn: Callable[[], Any]) -> list[float]:
        with torch.inference_mode():
            for _ in range(warmup):
                fn()
            sync()
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                sync()
                out.append((time.perf_counter() - t0) * 1e3)
        return out

    return run


class _RowFile:
    """A CSV written row by row to ``<stem>.partial.csv`` (flushed after each row, created
    with its folder on the first), renamed to ``<stem>.csv`` by ``finish``."""

    def __init__(self, final: Path, fields: Sequence[str]) -> None:
        self.final, self.fields, self.rows = final, list(fields), 0
        self.partial = final.with_name(f"{final.stem}.partial{final.suffix}")
        self._file: IO[str] | None = None
        self._writer: Any = None

    def write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.partial.open("w", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self.fields)
            self._writer.writeheader()
        self._writer.writerow(row)
        self._file.flush()
        self.rows += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def finish(self) -> Path:
        self.close()
        os.replace(self.partial, self.final)
        return self.final


def count_points(tokens: Sequence[int], contexts: Sequence[int], batches: Sequence[int]) -> int:
    """How many timings a profile of this grid takes (each operator at each shape)."""
    attention = sum(sum(1 for t in tokens if 1 < t <= c) + len(batches) for c in contexts)
    return len(OPS) * len(tokens) + attention


def _make_bar(total: int) -> Any:
    """The rich progress bar of a profile, on stderr, with the time left."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("profiling {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    bar.add_task("", total=total)
    return bar


def _stderr_is_tty() -> bool:
    return sys.stderr.isatty()


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[str], None]]:
    """Yield ``step(description)``, called before each timing; a bar only on a terminal."""
    if not enabled or not _stderr_is_tty():
        yield lambda what: None
        return
    bar = _make_bar(total)
    (task,) = bar.task_ids
    first = True

    def step(what: str) -> None:
        nonlocal first
        bar.update(task, description=what, advance=0 if first else 1)
        first = False

    bar.start()
    try:
        yield step
        bar.update(task, completed=total)
    finally:
        bar.stop()


def _oom_errors(torch: Any) -> tuple[type[Exception], ...]:
    """The installed torch's out-of-memory exceptions (caught to keep what was measured)."""
    return tuple(
        c
        for c in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
        if isinstance(c, type) and issubclass(c, Exception)
    )


def _profile_folder(out_dir: Path, device_name: str, model: ModelSpec) -> Path:
    """``out_dir/compute/<device_name>/<model>``, refused before anything is timed when the
    name is not a plain directory name or a file stands in its way."""
    if not device_name or device_name in (".", "..") or any(c in device_name for c in "/\\"):
        raise ServesimError(f"--device-name {device_name!r}: expected a plain directory name")
    folder = out_dir / "compute" / device_name / model.name.lstrip("/").replace("..", "_")
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ServesimError(f"--output {out_dir}: {parent} exists and is not a directory")
            break
    return folder


def _mlp_row_keys(model: ModelSpec, num_tokens: int, tp: int) -> dict[str, Any]:
    """The model's columns of an mlp.csv row (Vidur's names)."""
    return {
        "n_head": model.num_attention_heads,
        "n_kv_head": model.num_kv_heads,
        "n_embd": model.hidden_size,
        "n_expanded_embd": model.intermediate_size,
        "vocab_size": model.vocab_size,
        "use_gated_mlp": model.mlp_gated,
        "num_tokens": num_tokens,
        "num_tensor_parallel_workers": tp,
    }


def profile_operators(
    model: ModelSpec,
    out_dir: Path,
    device_name: str = "cpu",
    device: str = "cpu",
    tp: int = 1,
    tokens: Sequence[int] = DEFAULT_TOKENS,
    contexts: Sequence[int] = DEFAULT_CONTEXTS,
    batches: Sequence[int] = DEFAULT_BATCHES,
    warmup: int = 2,
    repeats: int = 5,
    progress: bool = False,
) -> list[Path]:
    """Time one layer's operators of ``model`` (one TP rank) and write the profile files.

    Returns the paths written: ``out_dir/compute/<device_name>/<model>/mlp.csv`` and
    ``attention.csv`` beside it. Inputs and the device are checked first (a ServesimError,
    nothing written). ``progress``: a bar with the time left on stderr (on a terminal).
    Ctrl-C raises ProfileInterrupted saying which ``*.partial.csv`` rows were kept.
    """
    check_inputs(model, tp, tokens, contexts, batches, warmup, repeats)
    folder = _profile_folder(out_dir, device_name, model)
    torch = import_torch()
    check_device(torch, device)
    dtype = getattr(torch, model.dtype if model.dtype in ("bfloat16", "float16", "float32") else "bfloat16")
    timing = _Timing(_timer(torch, device, warmup, repeats))

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, dtype=dtype, device=device) * 0.02

    total = count_points(tokens, contexts, batches)
    mlp = _RowFile(folder / "mlp.csv", MLP_FIELDS)
    attention = _RowFile(folder / "attention.csv", ATTENTION_FIELDS)

    def kept(stopped: str) -> str:
        return _kept(stopped, timing.done, total, mlp, attention, len(tokens), folder)

    oom = _oom_errors(torch)
    try:
        with _progress(progress, total) as step:
            timing.step = step
            _time_mlp(torch, model, tp, tokens, rand, timing.point, mlp)
            for row in attention_rows(torch, timing.point, rand, model, tp, tokens, contexts, batches):
                attention.write(row)
    except KeyboardInterrupt:
        raise ProfileInterrupted(kept("interrupted")) from None
    except oom as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ServesimError(f"{device} ran out of memory ({first}); " + kept("stopped")) from None
    finally:
        mlp.close()
        attention.close()
    return [mlp.finish(), attention.finish()]


@dataclass
class _Timing:
    """Times the points one at a time, each a step of the progress bar, counting those done
    (what an interrupted run says it kept)."""

    timed: Callable[[Callable[[], Any]], list[float]]
    step: Callable[[str], None] = lambda what: None
    done: int = 0

    def point(self, what: str, fn: Callable[[], Any]) -> list[float]:
        self.step(what)
        ms = self.timed(fn)
        self.done += 1
        return ms


def _time_mlp(
    torch: Any,
    model: ModelSpec,
    tp: int,
    tokens: Sequence[int],
    rand: Callable[..., Any],
    time_point: Callable[[str, Callable[[], Any]], list[float]],
    mlp: _RowFile,
) -> None:
    """One ``mlp.csv`` row per token count: every operator of ``OPS`` on one layer's weights
    (one TP rank's share)."""
    h, hd = model.hidden_size, model.head_dim
    nq, nkv = model.num_attention_heads // tp, model.kv_heads_per_rank(tp)
    q, kv, width = nq * hd, nkv * hd, model.intermediate_size // tp
    up = (2 if model.mlp_gated else 1) * width
    w_qkv, w_o, w_up, w_down = rand(h, q + 2 * kv), rand(q, h), rand(h, up), rand(width, h)
    w_norm, emb = rand(h), rand(model.vocab_size // tp, h)
    for t in tokens:
        ops = layer_ops(torch, model, t, rand, (w_qkv, w_o, w_up, w_down, w_norm, emb), tp)
        row: dict[str, Any] = {}
        for name in OPS:
            row.update(time_stats(time_point(f"{name} at {t} tokens", ops[name]), name))
        mlp.write(row | _mlp_row_keys(model, t, tp))


def _kept(
    stopped: str, done: int, total: int, mlp: _RowFile, attention: _RowFile, num_tokens: int, folder: Path
) -> str:
    """What a run stopped after ``done`` of ``total`` timings kept, for its message."""
    files = [(f, n) for f, n in ((mlp, num_tokens), (attention, total - len(OPS) * num_tokens)) if f.rows]
    if not files:
        return f"{stopped} after {done} of {total} timings; no row was complete, nothing was kept"
    rows = " and ".join(f"{f.rows} of {n} {f.final.stem} rows ({f.partial.name})" for f, n in files)
    names = " and ".join(f.final.name for f, _ in files)
    return (
        f"{stopped} after {done} of {total} timings; kept {rows} in {folder} "
        f"(calibrate reads them once renamed to {names})"
    )
