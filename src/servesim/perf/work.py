"""What one forward pass of a model does per batch statistic, on one TP rank: FLOPs and
bytes, independent of any GPU. The roofline (``perf.roofline``) prices these counts on a
GPU's roofs; the kernel model counts a step's work through the roofline too."""

from __future__ import annotations

from servesim.catalog.models import ModelSpec
from servesim.perf.efficiencies import ROW_THREADS
from servesim.perf.linear_attention import state_traffic_bytes, token_work


def activation_dtype(model: ModelSpec) -> str:
    """The dtype the activations (and attention) compute in: fp8 checkpoints run bf16."""
    ba = model.activation_dtype_bytes
    return "float32" if ba >= 4 else model.activation_dtype


def work_coefficients(
    m: ModelSpec, tp: int, ep: int, bw_: float, bkv: float, bwe: float | None = None, dp: int = 1
) -> dict[str, float]:
    """Raw work coefficients: FLOPs and bytes, summed over all layers, of one TP rank, with
    weights of ``bw_`` (routed experts ``bwe``, default ``bw_``) and KV cache of ``bkv``
    bytes per element.

    The model's own layout (see ModelSpec): layers with experts (the others dense), MLP
    weights every token passes through in an MoE model (shared experts, dense layers; timed
    with the router), full-attention layers (MLA: latent KV, absorbed decode) and
    sliding-window layers (a window of keys per new token: FLOPs booked with the
    projections, KV reads with each new token's attention bytes) and linear-attention
    layers (``perf.linear_attention``: the recurrence's FLOPs booked with the projections,
    each decode request's state read and written with its attention bytes; a prefill
    request's state, once a chunk, is left out). Routed experts are split
    over ``ep`` groups of the ``dp x tp`` GPUs their layers span (``dp`` data-parallel ranks).
    """
    bwe = bw_ if bwe is None else bwe
    L, H, ba = m.num_layers, m.hidden_size, m.activation_dtype_bytes
    q = m.num_attention_heads // tp * m.head_dim  # query width on this rank
    kv = m.kv_heads_per_rank(tp) * m.head_dim  # K (or V) width on this rank
    moe_tp = tp * dp // ep if m.is_moe else tp  # GPUs one expert is split over
    width = (m.moe_intermediate_size if m.is_moe else m.intermediate_size) // moe_tp
    up = (2 if m.mlp_gated else 1) * width  # gate+up (or up) output width
    vt = m.vocab_size / tp
    Le, Lf = (m.num_moe_layers if m.is_moe else L), m.num_full_attention_layers
    every_tok = m.every_token_mlp_params(tp)
    win_f, win_kv = m.window_attn_per_token(tp, bkv)
    la_f, _ = token_work(m, tp)  # linear attention's recurrence, booked like the windows
    return {
        "proj_f": 2.0 * m.mixer_params(tp) + win_f + la_f,  # per token
        "proj_w": m.mixer_params(tp) * bw_,  # weight bytes
        "proj_a": L * ba * (H + (q + 2 * kv) + q + H),  # per token in/out
        "mlp_f": 2.0 * m.expert_params(moe_tp) * Le / ep,  # per token-expert pair
        "mlp_w": m.expert_params(moe_tp) * Le * (bwe if m.is_moe else bw_),  # per expert touched
        "mlp_a": Le * ba * (H + up + width + H) / ep,  # per pair in/out
        "router_f": 2.0 * (m.router_params() * Le + every_tok),
        "router_w": m.router_params() * Le * ba + every_tok * bw_,
        "pf_f": m.attn_flops_per_pair(tp) * Lf,  # per unit of attn work
        "kv_tok": m.kv_bytes_per_token(tp, bkv),  # KV bytes per token
        "qo_tok": 2.0 * q * ba * L + win_kv,  # Q read + O write
        "dec_f": m.attn_flops_per_pair(tp, decode=True) * Lf,  # per context token
        "state_req": state_traffic_bytes(m, tp),  # per decode request: linear layers' states
        "el_tok": L * ba * (8 * H + 2 * (q + kv) + max(1, m.num_experts_per_tok) * (up + width))
        + 6 * H * ba,  # + embedding, final norm
        # Of el_tok, the MoE layers' gated activation (gate/up output read, activation written):
        # vLLM runs it inside its fused-MoE op, so a model that times that op from its kernel
        # tables charges it there (perf.kernel_model), not as an elementwise kernel.
        "moe_act_tok": Le * ba * max(1, m.num_experts_per_tok) * (up + width) if m.is_moe else 0.0,
        # 1024-element passes along one token's row per iteration: 2 norms, rotary (q, k),
        # activation, final norm (the residual adds are fused into the norms in vLLM).
        "el_rows": (L * (2 * H + q + kv + width) + H) / ROW_THREADS,
        "lm_f": 2.0 * H * vt,  # per request
        "lm_w": H * vt * ba,
        "lm_req": (H + vt) * ba,
        "samp_req": 4 * 4.0 * m.vocab_size,  # 4 fp32 passes over logits
    }
