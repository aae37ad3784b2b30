"""The operators ``servesim profile`` times (``profile_ops``), built with torch on random
weights in the model's shapes (one tensor-parallel rank's shard): one transformer layer's
GEMMs, norms, rotary embedding, activation and residual add at a token count, and the
attention sweep over prefill chunks and decode batches. torch is passed in, never
imported here (the ``profile`` extra is optional)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from servesim.catalog.models import ModelSpec


def time_stats(ms: list[float], name: str) -> dict[str, float]:
    """min/max/mean/median/std of one operator's timings, in Vidur's column names."""
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


def layer_ops(
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


def attention_rows(
    torch: Any,
    timed: Callable[[str, Callable[[], Any]], list[float]],
    rand: Callable[..., Any],
    model: ModelSpec,
    tp: int,
    tokens: Sequence[int],
    contexts: Sequence[int],
    batches: Sequence[int],
) -> Iterator[dict[str, Any]]:
    """Causal attention of a prefill chunk over its context, and decode over contexts, one
    row at a time as each is timed (``timed(what, fn)``)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    hd, nq, nkv = model.head_dim, model.num_attention_heads // tp, model.kv_heads_per_rank(tp)

    def call(*args: Any, **kw: Any) -> Callable[[], Any]:
        return lambda: sdpa(*args, **kw)

    for c in contexts:
        k = rand(1, nkv, c, hd).repeat_interleave(nq // nkv, 1)
        v = rand(1, nkv, c, hd).repeat_interleave(nq // nkv, 1)
        for t in (t for t in tokens if 1 < t <= c):
            qx = rand(1, nq, t, hd)
            # The chunk is the last t of the c tokens: a causal mask shifted by c - t.
            mask = torch.ones(t, c, dtype=torch.bool, device=qx.device).tril(c - t)
            yield {
                "kind": "prefill",
                "num_tokens": t,
                "context_len": c - t,
                "batch_size": 1,
                **time_stats(
                    timed(f"attention, prefill of {t} tokens at context {c}", call(qx, k, v, attn_mask=mask)),
                    "attention",
                ),
                "num_tensor_parallel_workers": tp,
            }
        for b in batches:
            qx = rand(b, nq, 1, hd)
            yield {
                "kind": "decode",
                "num_tokens": b,
                "context_len": c,
                "batch_size": b,
                **time_stats(
                    timed(
                        f"attention, decode of {b} at context {c}",
                        call(qx, k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)),
                    ),
                    "attention",
                ),
                "num_tensor_parallel_workers": tp,
            }
