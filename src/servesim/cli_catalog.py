"""``servesim catalog``: the built-in models, GPUs and hardware profiles, and the
architectures (``model_type``s) servesim models or refuses, as tables.
``servesim.cli`` registers it on its app; like every command it only parses options and
calls one typed function.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from servesim.cli_base import user_errors as _user_errors


class CatalogKind(StrEnum):
    models = "models"
    gpus = "gpus"
    profiles = "profiles"
    architectures = "architectures"
    all = "all"


def catalog(
    kind: Annotated[CatalogKind, typer.Argument(help="Which presets to list.")] = CatalogKind.all,
) -> None:
    """List the built-in models, GPUs and hardware profiles (names usable in a scenario), and
    the architectures a config.json may have."""
    with _user_errors():
        console = Console(highlight=False)
        if kind in (CatalogKind.models, CatalogKind.all):
            console.print(_models_table())
        if kind in (CatalogKind.gpus, CatalogKind.all):
            console.print(_gpus_table())
        if kind in (CatalogKind.profiles, CatalogKind.all):
            console.print(_profiles_table())
        if kind in (CatalogKind.architectures, CatalogKind.all):
            console.print(_architectures_table())


def _call(x: Any) -> Any:
    return x() if callable(x) else x


_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _models_table() -> Table:
    from servesim.catalog.hf_config import list_models, load_model
    from servesim.perf.memory import weights_bytes_per_gpu

    title = (
        "Models (org/ prefix optional; heads: query/KV, MLA: latent; dtype: weights, /experts'"
        " bits when apart; weights: GB on one GPU; KV/tok: KV bytes per token, sliding-window"
        " layers apart)"
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    for col in ("params", "layers", "heads", "dtype", "weights", "max len", "KV/tok"):
        table.add_column(col, justify="right")
    for name in list_models():
        m = load_model(name)
        params = f"{_call(m.num_params) / 1e9:.1f}B"
        if m.is_moe:
            params += f" ({_call(m.num_active_params) / 1e9:.1f}B)"
        heads = f"{m.num_attention_heads}/{'MLA' if m.is_mla else m.num_kv_heads}"
        dtype = _DTYPE_SHORT.get(m.dtype, m.dtype)
        if m.expert_dtype_bytes:
            dtype += f"/{m.expert_dtype_bytes * 8:g}b"
        table.add_row(
            name.split("/")[-1],
            params,
            str(m.num_layers),
            heads,
            dtype,
            f"{weights_bytes_per_gpu(m) / 1e9:,.0f}",
            f"{m.max_position_embeddings:,}",
            f"{m.kv_bytes_per_token() / 1024:,.0f}K",
        )
    return table


def _gpus_table() -> Table:
    from servesim.catalog.gpus import get_gpu, list_gpus

    table = Table(
        title="GPUs (dense peak TFLOP/s)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    table.add_column("name", no_wrap=True)
    for col in ("BF16", "FP8", "memory", "HBM TB/s", "host GB/s", "power W", "$/hour"):
        table.add_column(col, justify="right")
    for name in list_gpus():
        g = get_gpu(name)
        fp8 = getattr(g, "peak_flops", {}).get("fp8")
        table.add_row(
            name,
            f"{g.flops_for('bfloat16') / 1e12:,.0f}",
            "-" if fp8 is None else f"{fp8 / 1e12:,.0f}",
            f"{g.mem_bytes / 2**30:.0f} GiB",
            f"{g.mem_bw / 1e12:.2f}",
            f"{g.host_bw / 1e9:.0f}",  # host<->GPU, a direction (KV offloading)
            f"{g.idle_power_w:.0f}-{g.max_power_w:.0f}",
            f"{g.usd_per_hour:.2f}",
        )
    return table


def _profiles_table() -> Table:
    from servesim.perf.profiled import HardwareProfile, bundled_profiles

    table = Table(
        title="Hardware profiles (hardware.profile: NAME; docs/fidelity.md)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("name", no_wrap=True)
    table.add_column("fitted on")
    for name, path in sorted(bundled_profiles().items()):
        table.add_row(name, HardwareProfile.load(path).name)
    return table


def _architectures_table() -> Table:
    from servesim.catalog.architectures import REFUSED, SUPPORTED
    from servesim.catalog.hybrid import GATED_DELTANET_TYPES

    table = Table(
        title="Architectures (a config.json's model_type; a multimodal one's text_config's; docs/models.md)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("model_type", no_wrap=True)
    table.add_column("family")
    table.add_column("servesim")
    for t, family in SUPPORTED.items():
        how = (
            "modelled: Gated DeltaNet + gated attention (hybrid)" if t in GATED_DELTANET_TYPES else "modelled"
        )
        table.add_row(t, family, how)
    for t, lacks in REFUSED.items():
        table.add_row(t, "", f"refused: {lacks}")
    return table
