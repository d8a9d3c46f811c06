"""vecshm's shape stays readable: no import circle between its modules, no module over 500 lines, the
facades on the run object alone, and arrows that point one way.

Imports count wherever they are: inside functions (a circle hidden in a function is still a circle)
and under ``if TYPE_CHECKING:`` (a circle a type checker follows is one a reader follows too). Read
from the source with ``ast``: nothing is imported to check it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import vecshm

ROOT = Path(vecshm.__file__).parent
MAX_MODULE_LINES = 500  # a hint that a module holds two ideas, not a target to cram code under
MAX_ENGINE_LINES = 250
MAX_ENGINE_METHODS = 12
# what the facades once drove themselves: the run object (parent/core/run.py) owns them now
RUN_PRIVATES = ("_engine", "_batches", "_ticket", "_outputs")
ENGINE_PARTS = ("pool", "buffers", "slots", "ring", "reader", "actions", "balance", "waiter", "policy")
FACADES = (
    "vec_env/shm.py",
    "vector/shm.py",
    "pettingzoo/sb3.py",
    "pettingzoo/vector.py",
    "pettingzoo/copies.py",
    "pettingzoo/__init__.py",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The vecshm modules ``tree`` imports anywhere (under ``if TYPE_CHECKING:`` too)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
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
def test_no_module_is_over_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_the_engine_stays_small():
    path = ROOT / "parent" / "core" / "engine.py"
    tree = ast.parse(path.read_text())
    engine = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Engine")
    methods = [node.name for node in engine.body if isinstance(node, ast.FunctionDef)]
    assert len(path.read_text().splitlines()) <= MAX_ENGINE_LINES
    assert len(methods) <= MAX_ENGINE_METHODS, methods


def _names(path: Path) -> list[ast.AST]:
    return list(ast.walk(ast.parse(path.read_text())))


@pytest.mark.parametrize("path", [*FACADES, *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "ray").glob("*.py")))])
def test_the_facades_and_ray_use_the_run_object_alone(path):
    """No facade (nor RayVecEnv's actor) holds the engine's parts or drives them itself."""
    named = {
        node.attr if isinstance(node, ast.Attribute) else node.id
        for node in _names(ROOT / path)
        if isinstance(node, (ast.Attribute, ast.Name))
    }
    assert not named & set(RUN_PRIVATES), f"{path} names {sorted(named & set(RUN_PRIVATES))}"


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_only_the_run_object_s_package_reads_the_engine_s_parts(path):
    """Outside ``parent/core/``, nothing reads ``engine.pool``, ``run._engine.buffers`` and the like:
    whatever holds an engine (a name or attribute called ``engine``) reads none of its parts."""
    if (ROOT / "parent" / "core") in path.parents:
        return
    reads = [
        node.attr
        for node in _names(path)
        if isinstance(node, ast.Attribute)
        and node.attr in ENGINE_PARTS
        and (
            (isinstance(node.value, ast.Name) and node.value.id in ("engine", "_engine"))
            or (isinstance(node.value, ast.Attribute) and node.value.attr in ("engine", "_engine"))
        )
    ]
    assert not reads, f"{path.relative_to(ROOT)} reads the engine's {sorted(set(reads))}"


def test_shared_imports_nothing_from_parent_or_the_facades():
    """``shared/`` is what both sides of the process boundary read: its arrows point nowhere else."""
    graph = _graph()
    for name, targets in graph.items():
        if name.startswith("vecshm.shared"):
            outside = {t for t in targets if not t.startswith("vecshm.shared")}
            assert not outside, f"{name} imports {sorted(outside)}"


def test_parent_s_packages_point_one_way():
    """``processes/`` and ``handback/`` import nothing of the command core; the core may use both."""
    graph = _graph()
    for name, targets in graph.items():
        if name.startswith(("vecshm.parent.processes", "vecshm.parent.handback")):
            core = {t for t in targets if t.startswith("vecshm.parent.core")}
            assert not core, f"{name} imports {sorted(core)}"


CONTROL_WORDS = ("cmd", "cmd_seq", "obs_slot", "prev_slot", "done_seq", "status", "progress")


PARENT_SIDE = [
    path
    for package in ("parent", "vec_env", "vector", "ray")
    for path in sorted((ROOT / package).rglob("*.py"))
    if path != ROOT / "parent" / "control.py"
]


@pytest.mark.parametrize("path", PARENT_SIDE, ids=lambda path: str(path.relative_to(ROOT)))
def test_only_parent_control_touches_the_control_words_on_the_parent_s_side(path):
    """The workers' command words and what they publish are written and read, on the parent's side
    (the engine and the facades), by ``parent/control.py`` alone."""
    touched = {node.attr for node in _names(path) if isinstance(node, ast.Attribute) and node.attr in CONTROL_WORDS}
    assert not touched, f"{path.relative_to(ROOT)} touches the control words {sorted(touched)}"


TESTS = Path(__file__).parent


@functools.cache
def _private_names() -> set[str]:
    """Names vecshm keeps private: underscored attributes it sets, and underscored functions,
    methods and classes it defines (dunders aside)."""
    names = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _vecshm_bound(tree: ast.AST) -> set[str]:
    """The names a test module binds to vecshm's modules and objects by importing them."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vecshm":
            bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            vecshm_imports = [alias for alias in node.names if alias.name.split(".")[0] == "vecshm"]
            bound |= {alias.asname or alias.name.split(".")[0] for alias in vecshm_imports}
    return bound


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda path: str(path.relative_to(TESTS)))
def test_tests_use_vecshm_s_public_names_alone(path):
    """Tests check behaviour through what callers may use: no test reads an attribute vecshm keeps
    private, or replaces one of vecshm's private names or module constants to inject a fault (a
    fault comes from an env, a signal, or a public seam such as ``cuda.host_register``)."""
    tree = ast.parse(path.read_text())
    private, vecshm_names = _private_names(), _vecshm_bound(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private and _root_name(node) not in ("self", "cls"):
            found.append(f"line {node.lineno} reads .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setattr"
            and len(node.args) >= 2
            and _root_name(node.args[0]) in vecshm_names
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and (node.args[1].value.startswith("_") or node.args[1].value.isupper())
        ):
            found.append(f"line {node.lineno} replaces {node.args[1].value}")
    assert not found, f"{path.relative_to(TESTS)}: {found}"
