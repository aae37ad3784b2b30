"""``servesim profile``: time a model's operators on the local device (needs torch).

For a grid of token counts, one transformer layer's operators are timed with random
weights in the model's shapes (one tensor-parallel rank's shard): the QKV and output
projections, the MLP's up (gate+up) and down GEMMs, the two RMSNorms, rotary embedding,
activation and residual add. They are written in Vidur's operator-profile format
(``compute/<device>/<model>/mlp.csv``, times in ms with min/max/mean/median/std), so
``servesim calibrate`` reads them like Vidur's own. Attention is timed too, over a grid
of context lengths (prefill chunks and decode batches), into ``attention.csv`` beside it.

Timing: ``repeats`` runs after ``warmup`` runs, each measured with ``time.perf_counter``
around the operator (and ``torch.cuda.synchronize`` on a GPU); the table holds their
statistics. This is the operator's wall time including framework dispatch, which on a CPU
in eager mode is what the engine pays too.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from servesim.catalog.models import ModelSpec
from servesim.errors import ServesimError

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


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ServesimError(
            "servesim profile needs torch: pip install 'servesim[profile]' "
            "(for a CPU-only machine: pip install torch==2.13.0)"
        ) from None
    return torch


def _timer(torch: Any, device: str, warmup: int, repeats: int) -> Callable[[Callable[[], Any]], list[float]]:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

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


def _stats(ms: list[float], name: str) -> dict[str, float]:
    s = sorted(ms)
    mean = sum(s) / len(s)
    std = (sum((x - mean) ** 2 for x in s) / len(s)) ** 0.5
    mid = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    return {
        f"time_stats.{name}.min": s[0],
        f"time_stats.{name}.max": s[-1],
        f"time_stats.{name}.mean": mean,
        f"time_stats.{name}.median": mid,
        f"time_stats.{name}.std": std,
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
) -> list[Path]:
    """Time one layer's operators of ``model`` (one TP rank) and write the profile files.

    Returns the paths written: ``out_dir/compute/<device_name>/<model>/mlp.csv`` and
    ``attention.csv`` beside it.
    """
    torch = _torch()
    if model.is_moe:
        raise ServesimError(f"{model.name}: profiling MoE experts is not supported")
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(
        model.dtype, torch.bfloat16
    )
    h, hd = model.hidden_size, model.head_dim
    nq, nkv = model.num_attention_heads // tp, model.kv_heads_per_rank(tp)
    q, kv, width = nq * hd, nkv * hd, model.intermediate_size // tp
    up = (2 if model.mlp_gated else 1) * width
    timed = _timer(torch, device, warmup, repeats)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, dtype=dtype, device=device) * 0.02

    w_qkv, w_o, w_up, w_down = rand(h, q + 2 * kv), rand(q, h), rand(h, up), rand(width, h)
    w_norm, emb = rand(h), rand(model.vocab_size // tp, h)
    rows = []
    for t in tokens:
        ops = _layer_ops(torch, model, t, rand, (w_qkv, w_o, w_up, w_down, w_norm, emb), tp)
        row: dict[str, Any] = {}
        for name in OPS:
            row.update(_stats(timed(ops[name]), name))
        row.update(
            {
                "n_head": model.num_attention_heads,
                "n_kv_head": model.num_kv_heads,
                "n_embd": h,
                "n_expanded_embd": model.intermediate_size,
                "vocab_size": model.vocab_size,
                "use_gated_mlp": model.mlp_gated,
                "num_tokens": t,
                "num_tensor_parallel_workers": tp,
            }
        )
        rows.append(row)
    folder = out_dir / "compute" / device_name / model.name.lstrip("/").replace("..", "_")
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        _write(folder / "mlp.csv", rows),
        _write(
            folder / "attention.csv",
            _attention_rows(torch, timed, rand, model, tp, tokens, contexts, batches),
        ),
    ]
    return paths


def _layer_ops(
    torch: Any, model: ModelSpec, t: int, rand: Callable[..., Any], weights: tuple[Any, ...], tp: int
) -> dict[str, Callable[[], Any]]:
    """One layer's operators on ``t`` tokens, as closures over fresh inputs."""
    w_qkv, w_o, w_up, w_down, w_norm, emb = weights
    hd, h = model.head_dim, model.hidden_size
    nq, nkv = model.num_attention_heads // tp, model.kv_heads_per_rank(tp)
    width = model.intermediate_size // tp
    x, res, a = rand(t, h), rand(t, h), rand(t, nq * hd)
    ids = torch.randint(0, emb.shape[0], (t,), device=x.device)
    qk = rand(t, nq + nkv, hd)
    cos, sin = rand(t, 1, hd // 2), rand(t, 1, hd // 2)
    gu = rand(t, w_up.shape[1])

    def norm() -> Any:
        y = x + res
        return y * torch.rsqrt(y.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * w_norm

    def rope() -> Any:
        a1, a2 = qk[..., : hd // 2], qk[..., hd // 2 :]
        return torch.cat((a1 * cos - a2 * sin, a2 * cos + a1 * sin), dim=-1)

    def act() -> Any:
        if model.mlp_gated:
            return torch.nn.functional.silu(gu[:, :width]) * gu[:, width:]
        return torch.relu(gu)

    return {
        "emb": lambda: torch.nn.functional.embedding(ids, emb),
        "input_layernorm": norm,
        "attn_pre_proj": lambda: x @ w_qkv,
        "attn_rope": rope,
        "attn_post_proj": lambda: a @ w_o,
        "post_attention_layernorm": norm,
        "mlp_up_proj": lambda: x @ w_up,
        "mlp_act": act,
        "mlp_down_proj": lambda: gu[:, :width] @ w_down,
        "add": lambda: x + res,
    }


def _attention_rows(
    torch: Any,
    timed: Callable[..., list[float]],
    rand: Callable[..., Any],
    model: ModelSpec,
    tp: int,
    tokens: Sequence[int],
    contexts: Sequence[int],
    batches: Sequence[int],
) -> list[dict[str, Any]]:
    """Causal attention of a prefill chunk over its context, and decode over contexts."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    hd, nq, nkv = model.head_dim, model.num_attention_heads // tp, model.kv_heads_per_rank(tp)
    rows = []

    def call(*args: Any, **kw: Any) -> Callable[[], Any]:
        return lambda: sdpa(*args, **kw)

    for c in contexts:
        k = rand(1, nkv, c, hd).repeat_interleave(nq // nkv, 1)
        v = rand(1, nkv, c, hd).repeat_interleave(nq // nkv, 1)
        for t in (t for t in tokens if 1 < t <= c):
            qx = rand(1, nq, t, hd)
            # The chunk is the last t of the c tokens: a causal mask shifted by c - t.
            mask = torch.ones(t, c, dtype=torch.bool, device=qx.device).tril(c - t)
            rows.append(
                {
                    "kind": "prefill",
                    "num_tokens": t,
                    "context_len": c - t,
                    "batch_size": 1,
                    **_stats(timed(call(qx, k, v, attn_mask=mask)), "attention"),
                    "num_tensor_parallel_workers": tp,
                }
            )
        for b in batches:
            qx = rand(b, nq, 1, hd)
            rows.append(
                {
                    "kind": "decode",
                    "num_tokens": b,
                    "context_len": c,
                    "batch_size": b,
                    **_stats(timed(call(qx, k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1))), "attention"),
                    "num_tensor_parallel_workers": tp,
                }
            )
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path
