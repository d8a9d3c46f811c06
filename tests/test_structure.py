"""vecshm's shape stays readable: no import circle between its modules, and no module too long.

Imports inside functions count (a circle hidden in a function is still a circle); imports under
``if TYPE_CHECKING:`` do not (they never run). Read from the source with ``ast``: nothing is
imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vecshm

ROOT = Path(vecshm.__file__).parent
MAX_MODULE_LINES = 400
MAX_ENGINE_LINES = 250
MAX_ENGINE_METHODS = 15


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The vecshm modules ``tree`` imports anywhere but under ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.add(name if name in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name in modules}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in ROOT.rglob("*.py")}
    modules = set(paths)
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        # a module importing its own package's __init__ (``from vecshm import x``) is not a circle
        # through the package: the submodule is what it needs
        graph[name] = _imports(ast.parse(path.read_text()), package, modules) - {name}
    return graph


def _circle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path that leaves ``start`` and comes back to it, if any."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for target in graph[node]:
            if target == start:
                return path + [start]
            if target not in seen:
                seen.add(target)
                stack.append((target, path + [target]))
    return None


def test_no_import_circle_between_vecshm_modules():
    graph = _graph()
    # a package's __init__ imports its modules: what they import of the package is what matters
    inits = {name for name in graph if (ROOT.parent / name.replace(".", "/") / "__init__.py").exists()}
    for init in inits:
        graph[init] = set()
    circles = [circle for name in sorted(graph) if (circle := _circle_from(graph, name))]
    assert not circles, "import circles: " + "; ".join(" -> ".join(circle) for circle in circles)


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_the_engine_stays_small():
    path = ROOT / "parent" / "core" / "engine.py"
    tree = ast.parse(path.read_text())
    engine = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Engine")
    methods = [node.name for node in engine.body if isinstance(node, ast.FunctionDef)]
    assert len(path.read_text().splitlines()) <= MAX_ENGINE_LINES
    assert len(methods) <= MAX_ENGINE_METHODS, methods
