"""docs/architecture.md says what the code is: every module it names exists, every layer it
draws is the layer ``tests/test_layers.py`` enforces, and its arrows between the packages of
layer 2 are exactly the imports (the ones ``LAYER_2_BACK`` lists aside).

The doc is read as text: backticked paths (``engine/replica.py``, ``tests/test_layers.py``)
and backticked dotted names (``engine.request``, ``perf.base.step_wall_s``) must exist; a
diagram line ``N  name name ...`` puts each named top-level module in layer N; a fenced
line ``a -> b`` states that package ``a`` imports package ``b``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_layers import LAYER_2, LAYER_2_BACK, LAYERS, import_graph, module_names, package

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src" / "servesim"


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def fenced_lines(text: str) -> list[str]:
    """The lines inside the doc's ``` blocks."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            out.append(line)
    return out


def top_level_names(path: Path) -> set[str]:
    """Functions, classes and assigned names at a module's top level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_every_named_file_exists() -> None:
    paths = set(re.findall(r"`([A-Za-z_][\w/]*\.py)`", doc_text()))
    assert len(paths) > 50  # the table names most of the package
    missing = [p for p in sorted(paths) if not (SRC / p).is_file() and not (ROOT / p).is_file()]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_named_module_or_attribute_exists() -> None:
    modules = module_names()
    dotted = set(re.findall(r"`([a-z_]+(?:\.[A-Za-z_]+)+)`", doc_text()))
    files = (".md", ".py", ".json", ".yaml", ".csv", ".html", ".png")  # config.json is a file name
    dotted = {d for d in dotted if d.split(".")[0] in LAYERS and not d.endswith(files)}
    assert {"engine.request", "metrics.itl", "metrics.writer"} <= dotted
    missing = []
    for name in sorted(dotted):
        full = f"servesim.{name}"
        if full in modules:
            continue
        owner, _, attr = full.rpartition(".")
        if owner in modules and attr in top_level_names(modules[owner]):
            continue
        missing.append(name)
    assert not missing, f"docs/architecture.md names modules or attributes that do not exist: {missing}"


def diagram_layers() -> dict[str, int]:
    """Top-level module -> the layer the doc's diagram draws it in."""
    out: dict[str, int] = {}
    current = -1
    for line in fenced_lines(doc_text()):
        numbered = re.match(r"\s{0,4}(\d)\s{2}(.*)", line)
        if numbered:  # "  3  cluster  calibration ...": the names before any "..."
            current, names = int(numbered.group(1)), numbered.group(2).split("...")[0]
        elif (more := re.match(r"\s{5}(\w+) \.{3}", line)) and current >= 0:
            names = more.group(1)  # "     report ....": one more name of the same layer
        else:
            continue  # the descriptions under the names
        for token in re.findall(r"[A-Za-z_/]+", names):
            name = "" if token == "servesim/__init__" else token
            if name in LAYERS:
                out.setdefault(name, current)
    return out


def test_the_diagram_draws_every_module_in_its_layer() -> None:
    drawn = diagram_layers()
    assert set(drawn) == set(LAYERS), (
        f"modules of LAYERS not in the diagram: {sorted(set(LAYERS) - set(drawn))}; "
        f"drawn but not in LAYERS: {sorted(set(drawn) - set(LAYERS))}"
    )
    wrong = {k: (v, LAYERS[k]) for k, v in drawn.items() if v != LAYERS[k]}
    assert not wrong, f"module: (layer drawn, layer tests/test_layers.py enforces): {wrong}"


def test_the_layer_two_arrows_are_the_imports() -> None:
    stated = {
        (m.group(1), m.group(2))
        for line in fenced_lines(doc_text())
        if (m := re.fullmatch(r"\s*(\w+)\s+->\s+(\w+)\s*", line))
    }
    assert ("engine", "perf") in stated
    real: set[tuple[str, str]] = set()
    for a, edges in import_graph().items():
        for b in edges:
            if (a, b) in LAYER_2_BACK:
                continue
            pa, pb = package(a), package(b)
            if pa != pb and pa in LAYER_2 and pb in LAYER_2:
                real.add((pa, pb))
    assert stated == real, (
        f"stated in docs/architecture.md but not imported: {sorted(stated - real)}; "
        f"imported but not stated: {sorted(real - stated)}"
    )
