"""vecshm's shape stays readable: no import circle between its modules, no module over 500 lines, the
facades on the run object alone, arrows that point one way, one owner for the control words and
one for a command's trip, options declared once, no module loaded by a string, and tests and lab
scripts on public names.

Each rule is a function that finds its violations in what it is given (a source tree, or the import
graph), so that ``test_each_rule_catches_a_planted_violation`` can feed it a violation and watch it
fail: a rule that cannot fail guards nothing.

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
ENGINE_PARTS = ("pool", "buffers", "slots", "ring", "reader", "actions", "balance", "waiter", "policy", "commands")
FACADES = (
    "vec_env/shm_vec_env.py",
    "vector/shm_vector_env.py",
    "pettingzoo/agent_vec_env.py",
    "pettingzoo/agent_vector_env.py",
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


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle of ``graph`` (a package's __init__ aside: it imports its modules, and what
    they import of the package is what matters)."""
    graph = dict(graph)
    inits = {name for name in graph if (ROOT.parent / name.replace(".", "/") / "__init__.py").exists()}
    for init in inits:
        graph[init] = set()
    circles = [circle for name in sorted(graph) if (circle := _circle_from(graph, name))]
    return [" -> ".join(circle) for circle in circles]


def test_no_import_circle_between_vecshm_modules():
    circles = _circles(_graph())
    assert not circles, "import circles: " + "; ".join(circles)


def _too_long(text: str) -> list[str]:
    lines = len(text.splitlines())
    return [f"{lines} lines"] if lines > MAX_MODULE_LINES else []


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_over_500_lines(path):
    assert not _too_long(path.read_text()), f"{path.relative_to(ROOT)}: {_too_long(path.read_text())}"


def _engine_too_big(text: str) -> list[str]:
    tree = ast.parse(text)
    engine = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Engine")
    methods = [node.name for node in engine.body if isinstance(node, ast.FunctionDef)]
    found = [f"{len(text.splitlines())} lines"] if len(text.splitlines()) > MAX_ENGINE_LINES else []
    return found + ([f"{len(methods)} methods: {methods}"] if len(methods) > MAX_ENGINE_METHODS else [])


def test_the_engine_stays_small():
    assert not _engine_too_big((ROOT / "parent" / "core" / "engine.py").read_text())


def _names(tree: ast.AST) -> list[ast.AST]:
    return list(ast.walk(tree))


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text())


def _run_privates(tree: ast.AST) -> list[str]:
    """The run object's parts a facade names (it must hold the run alone)."""
    named = {
        node.attr if isinstance(node, ast.Attribute) else node.id
        for node in _names(tree)
        if isinstance(node, (ast.Attribute, ast.Name))
    }
    return sorted(named & set(RUN_PRIVATES))


@pytest.mark.parametrize("path", [*FACADES, *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "ray").glob("*.py")))])
def test_the_facades_and_ray_use_the_run_object_alone(path):
    """No facade (nor RayVecEnv's actor) holds the engine's parts or drives them itself."""
    assert not _run_privates(_tree(ROOT / path)), f"{path} names {_run_privates(_tree(ROOT / path))}"


def _engine_part_reads(tree: ast.AST) -> list[str]:
    """What a module reads of an engine's parts (a name or attribute called ``engine``)."""
    return sorted(
        {
            node.attr
            for node in _names(tree)
            if isinstance(node, ast.Attribute)
            and node.attr in ENGINE_PARTS
            and (
                (isinstance(node.value, ast.Name) and node.value.id in ("engine", "_engine"))
                or (isinstance(node.value, ast.Attribute) and node.value.attr in ("engine", "_engine"))
            )
        }
    )


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_only_the_run_object_s_package_reads_the_engine_s_parts(path):
    """Outside ``parent/core/``, nothing reads ``engine.pool``, ``run._engine.buffers`` and the like:
    whatever holds an engine (a name or attribute called ``engine``) reads none of its parts."""
    if (ROOT / "parent" / "core") in path.parents:
        return
    assert not _engine_part_reads(_tree(path)), f"{path.relative_to(ROOT)} reads {_engine_part_reads(_tree(path))}"


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def _arrows_out(graph: dict[str, set[str]], source: str, targets: tuple[str, ...]) -> list[str]:
    """Imports from modules under ``source`` into modules under ``targets``."""
    return [
        f"{name} imports {sorted(t for t in found if _under(t, targets))}"
        for name, found in sorted(graph.items())
        if _under(name, (source,)) and any(_under(t, targets) for t in found)
    ]


def test_shared_imports_nothing_from_parent_or_the_facades():
    """``shared/`` is what both sides of the process boundary read: its arrows point nowhere else."""
    graph = _graph()
    # (the root package aside, which holds every module: whether shared imports it is asked apart)
    outside = tuple(name for name in graph if name != "vecshm" and not _under(name, ("vecshm.shared",)))
    assert not _arrows_out(graph, "vecshm.shared", outside)
    assert not [name for name, found in graph.items() if _under(name, ("vecshm.shared",)) and "vecshm" in found]


def test_parent_s_packages_point_one_way():
    """``processes/`` and ``handback/`` import nothing of the command core; the core may use both."""
    graph = _graph()
    core = ("vecshm.parent.core",)
    assert not _arrows_out(graph, "vecshm.parent.processes", core)
    assert not _arrows_out(graph, "vecshm.parent.handback", core)


CONTROL_WORDS = ("cmd", "cmd_seq", "obs_slot", "prev_slot", "done_seq", "status", "progress")


PARENT_SIDE = [
    path
    for package in ("parent", "vec_env", "vector", "ray")
    for path in sorted((ROOT / package).rglob("*.py"))
    if path != ROOT / "parent" / "control.py"
]


def _control_words(tree: ast.AST) -> list[str]:
    return sorted(
        {node.attr for node in _names(tree) if isinstance(node, ast.Attribute) and node.attr in CONTROL_WORDS}
    )


@pytest.mark.parametrize("path", PARENT_SIDE, ids=lambda path: str(path.relative_to(ROOT)))
def test_only_parent_control_touches_the_control_words_on_the_parent_s_side(path):
    """The workers' command words and what they publish are written and read, on the parent's side
    (the engine and the facades), by ``parent/control.py`` alone."""
    assert not _control_words(_tree(path)), f"{path.relative_to(ROOT)} touches {_control_words(_tree(path))}"


COMMANDS = ROOT / "parent" / "core" / "commands.py"


def _trip_steps(tree: ast.AST) -> list[str]:
    """Calls that start a command (``words.submit``) or wait for one (``waiter.wait``, ``wait_rare``): the steps of a
    command's trip, which ``parent/core/commands.py`` alone takes."""
    found = []
    for node in _names(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if (node.func.attr, owner_name) in (("submit", "words"), ("wait", "waiter"), ("wait_rare", "waiter")):
                found.append(f"line {node.lineno}: {owner_name}.{node.func.attr}()")
    return found


@pytest.mark.parametrize(
    "path", [p for p in PARENT_SIDE if p != COMMANDS], ids=lambda path: str(path.relative_to(ROOT))
)
def test_only_the_commands_module_starts_a_command_or_waits_for_one(path):
    """One owner for a command's whole trip (``Commands``): nothing else writes a command's words
    or waits for its workers, so the sequence is written once."""
    assert not _trip_steps(_tree(path)), f"{path.relative_to(ROOT)}: {_trip_steps(_tree(path))}"


SENDING = ("commands", "submit", "send_resets", "start_step", "send", "step", "reset")


def _policy_sends(tree: ast.AST) -> list[str]:
    """Calls in the failure policy that would send a command (the trip sends what it answers)."""
    return [
        f"line {node.lineno}: .{node.func.attr}()"
        for node in _names(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SENDING
    ]


def test_the_failure_policy_sends_nothing_back_into_the_trip():
    """Restarts answer with values (``Redo``): the policy calls no command of the engine's, so control
    never loops trip -> policy -> trip."""
    path = ROOT / "parent" / "core" / "restart.py"
    assert not _policy_sends(_tree(path))
    assert "vecshm.parent.core.commands" not in _graph()["vecshm.parent.core.restart"]


def _string_imports(tree: ast.AST) -> list[str]:
    """vecshm modules loaded by a string (``importlib.import_module("vecshm...")``): ties the import
    graph cannot see."""
    return [
        f"line {node.lineno}: {node.args[0].value}"
        for node in _names(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and str(node.args[0].value).startswith("vecshm")
    ]


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_vecshm_module_is_loaded_by_a_string(path):
    assert not _string_imports(_tree(path)), f"{path.relative_to(ROOT)}: {_string_imports(_tree(path))}"


@functools.cache
def _declared_options() -> frozenset[str]:
    """The options ``vecshm/options.py`` declares (the fields of its typed dicts)."""
    tree = _tree(ROOT / "options.py")
    return frozenset(
        node.target.id
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    )


# A class's own keyword that shares an option's name: its peer's positional ones (SubprocVecEnv's
# ``start_method``, AsyncVectorEnv's ``daemon`` and ``copy``), and RayVecEnv's ``start_timeout``,
# which bounds its actors' start.
OWN_KEYWORDS = {
    ("vec_env/shm_vec_env.py", "start_method"),
    ("vector/shm_vector_env.py", "daemon"),
    ("vector/shm_vector_env.py", "copy"),
    ("ray/vec_env.py", "start_timeout"),
}


def _hand_written_options(tree: ast.AST, where: str = "") -> list[str]:
    """Options a facade's ``__init__`` writes by hand, where it should take them as ``**options``."""
    found = []
    for node in _names(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            found += [
                f"line {node.lineno}: {a.arg}"
                for a in arguments
                if a.arg in _declared_options() and (where, a.arg) not in OWN_KEYWORDS
            ]
    return found


FACADE_CLASSES = (
    "vec_env/shm_vec_env.py",
    "vector/shm_vector_env.py",
    "pettingzoo/agent_vec_env.py",
    "pettingzoo/agent_vector_env.py",
)


@pytest.mark.parametrize("path", [*FACADE_CLASSES, "pettingzoo/supersuit_shape.py", "ray/vec_env.py"])
def test_no_facade_writes_an_option_by_hand(path):
    """Options are declared once (``vecshm/options.py``); a facade takes them as ``**options`` and
    keeps in its signature only its peer's own keywords."""
    assert not _hand_written_options(_tree(ROOT / path), path)


TESTS = Path(__file__).parent
LAB = Path(__file__).parents[1] / "benchmarks" / "lab"


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


def _private_uses(tree: ast.AST) -> list[str]:
    """Where a module reads an attribute vecshm keeps private, or replaces one of vecshm's private
    names or module constants (``setattr``, or an assignment to ``module._name``)."""
    private, vecshm_names = _private_names(), _vecshm_bound(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private and _root_name(node) not in ("self", "cls"):
            found.append(f"line {node.lineno} reads .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "setattr"
            and len(node.args) >= 2
            and _root_name(node.args[0]) in vecshm_names
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and (node.args[1].value.startswith("_") or node.args[1].value.isupper())
        ):
            found.append(f"line {node.lineno} replaces {node.args[1].value}")
    return found


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda path: str(path.relative_to(TESTS)))
def test_tests_use_vecshm_s_public_names_alone(path):
    """Tests check behaviour through what callers may use: no test reads an attribute vecshm keeps
    private, or replaces one of vecshm's private names or module constants to inject a fault (a
    fault comes from an env, a signal, or a public seam such as ``cuda.host_register``)."""
    assert not _private_uses(_tree(path)), f"{path.relative_to(TESTS)}: {_private_uses(_tree(path))}"


@pytest.mark.parametrize("path", sorted(LAB.glob("*.py")), ids=lambda path: path.name)
def test_lab_scripts_patch_no_private_name(path):
    """The lab's scripts see inside a step through public seams (``observer``, ``run``, ``stats``):
    a script that patches a private function breaks unseen the day it moves."""
    assert not _private_uses(_tree(path)), f"{path.name}: {_private_uses(_tree(path))}"


# -- one kernel per peer API ---------------------------------------------------------------------------

# What SB3's and Gymnasium's contracts are made of: each is written in its kernel, once per peer API
KERNEL_METHODS = (
    "get_attr", "set_attr", "env_method", "env_is_wrapped", "step_async", "step_wait", "send", "recv", "close",
    "__del__",
)  # fmt: skip
KERNELS = ("vec_env/sb3_kernel.py", "vector/gym_kernel.py")
VEC_ENV_BASES = {"VecEnv", "VectorEnv", "AsyncVectorEnv", "SyncVectorEnv"}  # the peers' own
WRAPPER_BASES = {"VecEnvWrapper", "VectorWrapper"}  # a wrapper passes calls on to the vec env it wraps
# Vec env classes that may write those methods, and why: none of them is a face on a run
NOT_FACES = {
    "vec_env/base.py": "SB3's abstract VecEnv, and VecEnvWrapper, which passes every call on",
    "vec_env/dummy.py": "DummyVecEnv, the in-process reference",
    "vector/on_pipes.py": "the custom-worker class, on AsyncVectorEnv's own pipes and methods",
    "wrappers/": "SB3's wrapper family: each passes calls on to the vec env it wraps",
    "pettingzoo/supersuit_shape.py:AgentRowsEnv": "a PettingZoo env adapter: each call goes to its SuperSuitVecEnv",
}  # fmt: skip


def _kernel_methods_outside(trees: dict[str, ast.AST]) -> list[str]:
    """The kernel's methods that a vec env class outside a kernel defines, as ``path:Class.method``.
    A vec env class is one whose bases reach a peer's vec env class, through vecshm's classes too;
    a wrapper (whose bases reach a wrapper class) passes calls on, and is none."""
    bases: dict[str, set[str]] = {}
    classes: list[tuple[str, ast.ClassDef]] = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
                classes.append((path, node))

    def reaching(roots: set[str]) -> set[str]:
        reached = set(roots)
        while more := {name for name, found in bases.items() if found & reached} - reached:
            reached |= more
        return reached

    vec_envs, wrappers = reaching(VEC_ENV_BASES), reaching(WRAPPER_BASES)
    found = []
    for path, node in classes:
        if node.name not in vec_envs or node.name in wrappers or path in KERNELS:
            continue
        if any(
            path == key or path.startswith(key) and key.endswith("/") or key == f"{path}:{node.name}"
            for key in NOT_FACES
        ):
            continue
        defined = [item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
        found += [f"{path}:{node.name}.{name}" for name in defined if name in KERNEL_METHODS]
    return found


def test_no_vec_env_class_outside_a_kernel_writes_the_kernel_s_methods():
    """SB3's and Gymnasium's rules are written once each, in their kernel: every public vec env class
    is a kernel plus a row map and a result shape (docs/design.md, "Kernels and row maps"), so none
    defines ``get_attr``, ``step_wait``, ``close``, ... itself."""
    trees = {str(path.relative_to(ROOT)): _tree(path) for path in sorted(ROOT.rglob("*.py"))}
    assert not _kernel_methods_outside(trees)


def test_each_kernel_method_is_written_once_per_peer_api():
    """Within each kernel module, each of the methods is defined at most once (the run protocol
    the SB3 kernel declares, a ``Protocol``, aside: it names what a run does, and does nothing)."""
    for kernel in KERNELS:
        defined = [
            item.name
            for node in ast.walk(_tree(ROOT / kernel))
            if isinstance(node, ast.ClassDef) and "Protocol" not in {getattr(b, "id", "") for b in node.bases}
            for item in node.body
            if isinstance(item, ast.FunctionDef) and item.name in KERNEL_METHODS
        ]
        assert len(defined) == len(set(defined)), f"{kernel}: {sorted(defined)}"


# -- each rule fails on a violation planted for it ---------------------------------------------------

PLANTED = {
    "an import circle": lambda: _circles({"vecshm.a": {"vecshm.b"}, "vecshm.b": {"vecshm.a"}}),
    "a module over 500 lines": lambda: _too_long("x = 1\n" * 501),
    "an engine of 13 methods": lambda: _engine_too_big(
        "class Engine:\n" + "".join(f"    def m{k}(self): ...\n" for k in range(13))
    ),
    "a facade driving the engine": lambda: _run_privates(ast.parse("self._run._engine.pool.write_message(0, b'', 0)")),
    "an engine part read outside the core": lambda: _engine_part_reads(ast.parse("venv.run.engine.waiter.wait()")),
    "shared importing the parent": lambda: _arrows_out(
        {"vecshm.shared.sync": {"vecshm.parent.control"}}, "vecshm.shared", ("vecshm.parent",)
    ),
    "handback importing the core": lambda: _arrows_out(
        {"vecshm.parent.handback.ring": {"vecshm.parent.core.run"}}, "vecshm.parent.handback", ("vecshm.parent.core",)
    ),
    "a control word outside control.py": lambda: _control_words(ast.parse("b.cmd_seq[w] += 1")),
    "a command started outside commands.py": lambda: _trip_steps(
        ast.parse("ticket = engine.words.submit(Command.STEP, workers, 0, Phase.STEP)")
    ),
    "a wait outside commands.py": lambda: _trip_steps(ast.parse("self.waiter.wait(ticket, None, ready, on_death)")),
    "a policy that sends a reset": lambda: _policy_sends(ast.parse("self.commands.reset(requests, slot, workers)")),
    "a module loaded by a string": lambda: _string_imports(
        ast.parse('importlib.import_module("vecshm.wrappers.normalize")')
    ),
    "an option written by hand": lambda: _hand_written_options(
        ast.parse("class F:\n    def __init__(self, env_fns, *, step_timeout=None): ...")
    ),
    "a private name read": lambda: _private_uses(ast.parse("import vecshm\nvenv._run.plan")),
    "a face that writes its own step_wait": lambda: _kernel_methods_outside(
        {
            "vec_env/sb3_kernel.py": ast.parse("class SB3Kernel(VecEnv):\n    def step_wait(self): ..."),
            "ray/vec_env.py": ast.parse("class RayVecEnv(SB3Kernel):\n    def step_wait(self): ..."),
        }
    ),
    "a private function patched": lambda: _private_uses(
        ast.parse("import vecshm.parent.control as control\nsetattr(control.ControlWords, '_wake', f)")
    ),
}


@pytest.mark.parametrize("violation", sorted(PLANTED))
def test_each_rule_catches_a_planted_violation(violation):
    assert PLANTED[violation](), f"the rule did not catch {violation}"
