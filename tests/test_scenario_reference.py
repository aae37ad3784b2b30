"""docs/scenario_reference.md is generated from the config models and kept in step."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from servesim.cli import app
from servesim.config import Scenario
from servesim.config.messages import RENAMED
from servesim.config.reference import _sections, render_markdown, unit_of

DOC = Path(__file__).parent.parent / "docs" / "scenario_reference.md"


def test_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render_markdown(), (
        "docs/scenario_reference.md is stale: python -m servesim.config.reference docs/scenario_reference.md"
    )


def _fields() -> list[tuple[str, str, object]]:
    return [
        (model.__name__, name, info)
        for _, model in _sections(Scenario)
        for name, info in model.model_fields.items()
    ]


def test_every_field_is_described_and_listed() -> None:
    text = render_markdown()
    for model, name, info in _fields():
        assert info.description, f"{model}.{name} has no description"  # type: ignore[attr-defined]
        assert f"| `{name}` |" in text


def test_units_read_one_way() -> None:
    """No field name whose unit reads two ways (gbps: gigabits or gigabytes?)."""
    for model, name, info in _fields():
        assert not name.endswith(("gbps", "tbps", "mbps")), f"{model}.{name}"
        if name.endswith(("_s", "_ms", "_us", "_gb_per_s", "_tb_per_s", "_w", "_tflops")):
            assert unit_of(name, info), f"{model}.{name}"  # type: ignore[arg-type]
    names = {name for _, name, _ in _fields()}
    for old, (new, _) in RENAMED.items():
        assert old not in names and new in names, (old, new)


def test_reference_names_vllm_options() -> None:
    text = render_markdown()
    for flag in (
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--block-size",
        "--gpu-memory-utilization",
        "--tensor-parallel-size",
        "--enable-prefix-caching",
        "--max-model-len",
    ):
        assert f"`{flag}`" in text


def test_simulate_help_points_at_the_reference() -> None:
    out = CliRunner().invoke(app, ["simulate", "--help"], terminal_width=200)
    assert out.exit_code == 0
    assert "docs/scenario_reference.md" in " ".join(out.stdout.split())
