"""The import graph of ``servesim`` points one way: no cycles, and no layer imports one above it.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` counts, at module level, inside functions and under
``if TYPE_CHECKING:`` alike, since a cycle through any of them still ties the two modules
together. ``from servesim import X`` is an import of the submodule ``servesim.X`` when there
is one (else of the package ``servesim``). A package's ``__init__`` importing its own
submodules at module level (re-exports) is not an edge: importing ``servesim.a.b`` from anywhere else is
an edge to ``servesim.a.b`` only, not to the package ``servesim.a`` around it.

The layers, lowest first (a module may import its own layer and those below)::

    cli, __main__, servesim/__init__     the command and the top-level API
    validate, report, planner, papers    measured vs predicted, over whole runs; HTML reports; SLO
                                         targets, capacity and configuration search; the live server
    sim                                  simulate(scenario) -> Result
    cluster, calibration, profile_ops,   many replicas; fitting perf models; timing operators;
    deployment, deployment_checks        a scenario's deployment, resolved once; the refusals of it
    engine, perf, metrics, workload      one replica, step times, records, requests
    config, catalog                      scenario schema; model and GPU facts
    errors

Inside layer 2 the packages point one way as well: ``engine`` above ``metrics`` above ``perf``
and ``workload`` (``LAYER_2``); the imports that still point back are listed by name in
``LAYER_2_BACK``, so that a new one fails and a removed one is struck from the list.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import servesim

SRC = Path(servesim.__file__).resolve().parent  # src/servesim

#: Layer of each top-level module or package of servesim (higher imports lower, never back).
LAYERS = {
    "errors": 0,
    "config": 1,
    "catalog": 1,
    "engine": 2,
    "perf": 2,
    "metrics": 2,
    "workload": 2,
    "cluster": 3,
    "calibration": 3,
    "profile_ops": 3,
    "profile_layers": 3,
    "profile_checks": 3,
    "deployment": 3,
    "deployment_checks": 3,
    "sim": 4,
    "validate": 5,
    "report": 5,
    "planner": 5,
    "serve": 5,
    "papers": 5,
    "cli": 6,
    "cli_base": 6,
    "cli_catalog": 6,
    "cli_commands": 6,
    "cli_measured": 6,
    "cli_options": 6,
    "__main__": 6,
    "": 6,  # "": servesim/__init__.py
}


def module_names() -> dict[str, Path]:
    """``servesim.x.y`` -> its file, for every module of the package (``__init__`` -> the package)."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = ["servesim", *path.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """importer -> {imported module: first line}, servesim's modules only."""
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The servesim modules that module ``name`` (at ``path``) imports, with the first line."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    in_functions = {id(n) for f in functions for n in ast.walk(f)}
    edges: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from this package, up level - 1 packages
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:  # servesim.x.y.Attr -> servesim.x.y
                target = target.rpartition(".")[0]
            if target not in modules or target == name:
                continue
            if is_package and target.startswith(name + ".") and id(node) not in in_functions:
                continue  # a package re-exporting its own submodules is not a dependency
            edges.setdefault(target, node.lineno)
    return edges


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The components with a cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def a_cycle(graph: dict[str, dict[str, int]], comp: set[str]) -> list[str]:
    """One shortest cycle inside ``comp``, as 'a (line n) -> b ...' steps (breadth first)."""
    start = min(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    path = [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, start]
                    return [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(path, path[1:], strict=False)]
                if w in comp and w not in prev and w != start:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return []


def layer(module: str) -> int:
    top = module.removeprefix("servesim").removeprefix(".").split(".")[0]
    assert top in LAYERS, f"{module}: add its top-level name to LAYERS in tests/test_layers.py"
    return LAYERS[top]


def test_the_graph_sees_every_kind_of_import() -> None:
    g = import_graph()
    assert "servesim.engine.request" in g["servesim.engine.scheduler"]  # module level
    assert "servesim.sim" in g["servesim"]  # inside a function
    assert "servesim.cluster.pools" in g["servesim.sim"]  # inside a function, a cluster scenario
    assert "servesim.engine.lazy" in g["servesim"]  # from servesim.engine import lazy (a submodule)
    assert "servesim.cluster.cluster" not in g["servesim.cluster"]  # a package's own re-exports


def test_no_import_cycles() -> None:
    g = import_graph()
    comps = strongly_connected(g)
    bad = list(comps)
    report = "\n\n".join(f"among {', '.join(sorted(c))}:\n" + "\n".join(a_cycle(g, c)) for c in bad)
    assert not bad, f"import cycles in servesim:\n{report}"


def test_layers_point_down() -> None:
    g = import_graph()
    up = defaultdict(list)
    for a, edges in g.items():
        for b, line in edges.items():
            if layer(b) > layer(a):
                up[a].append(f"{a} (line {line}) -> {b}")
    assert not up, "imports of a higher layer:\n" + "\n".join(x for v in up.values() for x in v)


#: Order of the packages inside layer 2 (higher imports lower, never back).
LAYER_2 = {"perf": 0, "workload": 0, "metrics": 1, "engine": 2}
#: Imports inside layer 2 that still point back (importer, imported), each with its reason.
LAYER_2_BACK: set[tuple[str, str]] = set()


def package(module: str) -> str:
    return module.removeprefix("servesim").removeprefix(".").split(".")[0]


def layer_two_back_edges(g: dict[str, dict[str, int]]) -> set[tuple[str, str]]:
    """Imports between two packages of layer 2 that point up ``LAYER_2`` or sideways."""
    out = set()
    for a, edges in g.items():
        for b in edges:
            pa, pb = package(a), package(b)
            if pa != pb and pa in LAYER_2 and pb in LAYER_2 and LAYER_2[pb] >= LAYER_2[pa]:
                out.add((a, b))
    return out


def test_layer_two_points_one_way() -> None:
    back = layer_two_back_edges(import_graph())
    new = sorted(back - LAYER_2_BACK)
    assert not new, "imports pointing back inside layer 2 (LAYER_2):\n" + "\n".join(
        f"{a} -> {b}" for a, b in new
    )
    gone = sorted(LAYER_2_BACK - back)
    assert not gone, "no longer imported: strike from LAYER_2_BACK:\n" + "\n".join(
        f"{a} -> {b}" for a, b in gone
    )
