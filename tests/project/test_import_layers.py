"""The packages import one way: no cycle among the modules of the four packages (runtime, export,
quant, cli), the runtime imports none of the others, no export -> engine, no engine -> chat.

Every import statement counts, the ones under ``if TYPE_CHECKING:`` and inside
functions included: a cycle hidden from the interpreter is still a knot for a
reader. The source is parsed with ``ast``, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

from repo_paths import REPO

RUNTIME = REPO / "runtime"
EXPORT = REPO / "export"
PACKAGES = (RUNTIME, EXPORT, REPO / "quant", REPO / "cli")


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``root`` (a package's own name for __init__)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imported(path: Path, known: set[str]) -> set[str]:
    """The known modules ``path`` imports: ``from a.b import c`` names ``a.b.c`` when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def import_graph(*roots: Path) -> dict[str, set[str]]:
    modules = {name: path for root in roots for name, path in module_names(root).items()}
    known = set(modules)
    return {name: imported(path, known) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def runtime_imports() -> dict[str, set[str]]:
    graph = import_graph(RUNTIME)
    assert "clika_runtime.engine.core" in graph and "clika_runtime.chat.session" in graph
    return graph


def test_the_runtime_has_no_import_cycle():
    assert cycles(runtime_imports()) == []


def house_imports() -> dict[str, set[str]]:
    graph = import_graph(*PACKAGES)
    assert {"clika_export.pull.puller", "clika_quant", "clika_cli.chat_repl"} <= set(graph)
    return graph


def test_no_package_has_an_import_cycle():
    """Across the packages too: the CLI's chat loop and its slash commands, pulling and Hub pulling."""
    assert cycles(house_imports()) == []


def test_the_runtime_imports_none_of_the_other_packages():
    offenders = {
        (module, target)
        for module, targets in house_imports().items()
        if module.startswith("clika_runtime")
        for target in targets
        if not target.startswith("clika_runtime")
    }
    assert offenders == set()


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_imports_no_chat_module():
    offenders = {
        (module, target)
        for module, targets in runtime_imports().items()
        if module.startswith("clika_runtime.engine")
        for target in targets
        if target.startswith(("clika_runtime.chat", "clika_runtime.sessions", "clika_runtime.server"))
        or target == "clika_runtime.modelverse"
    }
    assert offenders == set()


def test_export_imports_nothing_of_the_engine():
    offenders = set()
    for path in sorted(EXPORT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            offenders |= {(path.name, n) for n in names if n.startswith("clika_runtime.engine")}
    assert offenders == set()
