"""The house rules, read from the source: one-way imports between the layers and no circle.

Layers (docs/architecture.md): core <- compiler, schedule <- engines <- results <- simulator. The
graph counts every import statement of the package, lazy ones inside functions included.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "cirq_quasarq"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: pathlib.Path, modules) -> set:
    """Package modules that `name` imports (a `from pkg import sub` counts as pkg.sub)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = []
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.append(sub if sub in modules else module)
        else:
            continue
        out.update(t for t in targets if t in modules and t != name)
    return out


@pytest.fixture(scope="module")
def graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _without_package_inits(graph):
    """Edges between modules, ignoring a package's own __init__ re-exporting its submodules
    (the package's public face, which only its importers use)."""
    return {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in graph.items()}


def test_no_import_circle(graph):
    edges = _without_package_inits(graph)
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(edges.get(m, ())):
            if state.get(t) == "open":
                cycle = stack[stack.index(t):] + [t]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


LAYER = {"core": 0, "errors": 0, "compiler": 1, "schedule": 1, "engines": 2, "results": 3, "contract": 4,
         "simulator": 4, "shots": 4}


def _layer(module: str):
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def test_layers_import_one_way(graph):
    bad = []
    for m, targets in graph.items():
        for t in targets:
            lm, lt = _layer(m), _layer(t)
            if lm is None or lt is None or m.split(".")[1] == t.split(".")[1]:
                continue
            if lt > lm or (lm == lt == 1):  # the compiler and the scheduler never import each other
                bad.append(f"{m} -> {t}")
    assert not bad, bad


def test_results_and_simulator_reach_engines_only_through_the_interface(graph):
    allowed = {"cirq_quasarq.engines", "cirq_quasarq.engines.base"}
    for m, targets in graph.items():
        if _layer(m) in (3, 4):
            reached = {t for t in targets if t.startswith("cirq_quasarq.engines")}
            assert reached <= allowed, (m, reached - allowed)


def test_compiler_never_imports_an_engine_and_numpy_never_imports_cuda(graph):
    for m, targets in graph.items():
        if m.startswith("cirq_quasarq.compiler") or m.startswith("cirq_quasarq.core"):
            assert not any(t.startswith("cirq_quasarq.engines") for t in targets), m
        if m.startswith("cirq_quasarq.engines.numpy"):
            assert not any(t.startswith("cirq_quasarq.engines.cuda") for t in targets), m


def test_the_graph_sees_real_edges(graph):
    # Guards the parser itself: known edges must be found, including lazy (in-function) imports.
    assert "cirq_quasarq.core.paulis" in graph["cirq_quasarq.core.opcodes"]
    assert "cirq_quasarq.compiler.registry" in graph["cirq_quasarq.compiler.walker"]
    assert "cirq_quasarq.engines" in graph["cirq_quasarq.simulator"]
    assert "cirq_quasarq.engines.cuda" in graph["cirq_quasarq.engines"]  # imported inside a function


def test_one_pauli_module():
    # Pauli matrices and letter tables are written once, in core/paulis.py.
    for path in PACKAGE.rglob("*.py"):
        if path.name == "paulis.py" and path.parent.name == "core":
            continue
        text = path.read_text()
        assert "[[0, -1j], [1j, 0]]" not in text, path
        assert '"IXYZ"' not in text and "'IXYZ'" not in text, path
