"""Which multiprocessing start method a vec env uses when its caller names none.

SB3's ``SubprocVecEnv`` uses ``forkserver`` where it exists (``spawn`` elsewhere): fork is unsafe in
a parent that runs threads, and a learner's parent does. ``ShmVecEnv`` does the same.

Gymnasium's ``AsyncVectorEnv(context=None)`` uses multiprocessing's default instead: ``fork`` on
Linux up to Python 3.13. Scripts rely on that without knowing it. A script whose top-level code
creates the vec env outside ``if __name__ == "__main__":``, or one fed through standard input
(``python - < train.py``), runs under fork. Under forkserver or spawn every worker would first
re-import that script, and fails; so does a factory that cannot be pickled (one that holds a lock or
an open file), which a forked worker inherits as it is. ``ShmVectorEnv`` keeps forkserver's safety
wherever a worker can re-import the main script and be sent the factories, and forks exactly where
it cannot and multiprocessing's default is fork. So every script that runs under
``AsyncVectorEnv`` runs under ``ShmVectorEnv``.

Under forkserver each worker is forked from a server process, then imports what it needs: vecshm
with NumPy and Gymnasium (about 0.3 s per vec env on a 2-core machine, whatever its size), and the
modules the main script imports at its top level, since each worker runs the script again (as
``__mp_main__``). multiprocessing means the server to import the main script once (its default
preload is ``["__main__"]``), but up to Python 3.13 at least it never hands the server the
script's path, so every worker imports PyTorch again for a script that imports Stable-Baselines3:
2.0-2.6 s per vec env of 4 CartPole envs on a 2-core machine, and a private copy of PyTorch in
each worker. :func:`preload_in_forkserver` has the server import both once, so later workers fork
with them loaded (0.07-0.09 s for that script).
"""

from __future__ import annotations

import ast
import functools
import multiprocessing as mp
import os
import site
import sys
import sysconfig
from collections.abc import Sequence
from types import FrameType
from typing import Any, cast

from vecshm.shared.pickling import can_pickle

__all__ = [
    "default_start_method",
    "platform_start_method",
    "refuse_inside_worker_start_up",
    "gymnasium_start_method",
    "preload_in_forkserver",
    "main_script_imports",
    "workers_can_import_main",
]

WORKER_MODULE = "vecshm.worker.main"  # what a worker runs; it imports NumPy, Gymnasium and the rest of vecshm
SERVER_EXIT_MODULE = "vecshm.worker.forkserver_exit"  # the server removes a killed owner's folder when it exits


def refuse_inside_worker_start_up() -> None:
    """Raise if this process is a worker still starting up (re-running the main script under
    spawn or forkserver): a vec env created there means the script creates it at module level."""
    if getattr(mp.current_process(), "_inheriting", False):
        raise RuntimeError(
            "a vec env is being created while this process starts up as a worker: the main script creates "
            'it at module level. Put that code under `if __name__ == "__main__":`.'
        )


def default_start_method() -> str:
    """SB3's default: forkserver where available (fork is unsafe with threads in the parent)."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def preload_in_forkserver() -> None:
    """Add vecshm's worker module, and the installed modules the main script imports at its top
    level (:func:`main_script_imports`), to the modules multiprocessing's forkserver imports when
    it starts, keeping those already asked for (``__main__`` by default, or the program's own);
    and :mod:`vecshm.worker.forkserver_exit`, for the server alone.

    Takes effect when the server starts: at the first forkserver vec env, unless something else
    (an SB3 ``SubprocVecEnv``, say) started it before; then workers import them themselves, as
    without this. Python keeps the list in a private attribute; if that ever moves, nothing is
    preloaded and nothing else changes. A failed import in the server is skipped by Python.
    """
    from multiprocessing import forkserver

    modules = getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None)
    if not isinstance(modules, list):
        return
    missing = [name for name in [*main_script_imports(), WORKER_MODULE, SERVER_EXIT_MODULE] if name not in modules]
    if missing:
        forkserver.set_forkserver_preload([*modules, *missing])


def main_script_imports() -> list[str]:
    """The modules that a forkserver or spawn worker imports when it runs the main script again:
    those the script imports at its top level (not under ``if __name__ == "__main__":``), where
    this process has imported them already and they are installed (the standard library or
    site-packages), in the script's order.

    The last two conditions keep the server safe: it imports them before it serves any worker,
    and a module that raised anything but ``ImportError`` there would end it, and with it every
    forkserver worker of the program. A module this process imported has imported once already,
    and an installed one does not depend on the script's directory or arguments. The script's
    own modules beside it are left to each worker, as without a preload. A script run as a
    package's ``__main__`` (``python -m pytest``) is not run again by workers: nothing to add.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec_name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if main is None or path is None or spec_name == "__main__" or spec_name.endswith(".__main__"):
        return []
    try:
        names = _top_level_imports(path, os.stat(path).st_mtime_ns)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    return [name for name in names if _installed(sys.modules.get(name))]


@functools.lru_cache(maxsize=8)
def _top_level_imports(path: str, mtime_ns: int) -> tuple[str, ...]:
    """Absolute imports that run when ``path`` runs as a module other than ``__main__``: in its
    body, and in the ``if``/``try``/``with`` blocks there, but not in an ``if __name__ ==
    "__main__":`` block, a function or a class."""
    tree = _script_tree(path, mtime_ns)
    names: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
                names.append(node.module)  # and its submodules named here (kept where they are modules)
                names.extend(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
            elif isinstance(node, ast.If):
                if not _is_main_test(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                node = cast(ast.Try, node)  # TryStar (3.11+) has the same fields
                for block in (node.body, *(handler.body for handler in node.handlers), node.orelse, node.finalbody):
                    visit(block)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return tuple(dict.fromkeys(names))


def _installed(module: Any) -> bool:
    """Whether ``module`` (imported here) comes from the standard library or site-packages."""
    origin = getattr(getattr(module, "__spec__", None), "origin", None)
    if not isinstance(origin, str) or not os.path.isabs(origin):
        return False  # built in, frozen, or not imported here
    return os.path.realpath(origin).startswith(_installed_roots())


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    if site.ENABLE_USER_SITE:
        roots.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.realpath(root), "") for root in roots)


def gymnasium_start_method(caller: FrameType | None, env_fns: Sequence[Any] = ()) -> str:
    """The start method for ``ShmVectorEnv(context=None)`` over ``env_fns``, created from the frame ``caller``.

    - A method the program chose with ``multiprocessing.set_start_method``, as ``AsyncVectorEnv``
      follows it. Only a choice other than the platform's default can be told apart from none:
      ``multiprocessing.get_context()`` (which ``AsyncVectorEnv`` itself calls) fixes the default
      as if it had been chosen.
    - ``fork`` where that is multiprocessing's default and a fresh worker could not import the
      main script (see :func:`workers_can_import_main`), or could not be sent the factories
      (one holds a lock, say): ``AsyncVectorEnv`` forks them as they are.
    - Otherwise SB3's default, :func:`default_start_method`.
    """
    platform_default = platform_start_method()
    chosen = mp.get_start_method(allow_none=True)
    if chosen is not None and chosen != platform_default:
        return chosen
    if platform_default == "fork" and not (workers_can_import_main(caller) and can_pickle(list(env_fns))):
        return "fork"
    return default_start_method()


def workers_can_import_main(caller: FrameType | None) -> bool:
    """Whether a forkserver or spawn worker can import the main script without running the code
    that is creating the vec env (from the frame ``caller``) again.

    It cannot when the main script is no file (standard input), or when the script's top level is
    running that code outside an ``if __name__ == "__main__":`` block. An interactive session, a
    notebook or ``python -c`` has no main file to import: workers are fine there.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return True
    if not os.path.isfile(path):
        return False
    frame = caller
    while frame is not None:  # the script's own top-level frame, if it is on the stack
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            try:
                return frame.f_lineno in _guarded_lines(path, os.stat(path).st_mtime_ns)
            except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
                return True  # unreadable source: assume the usual guarded script
        frame = frame.f_back
    return True  # created from a thread or a callback, not by the script's top level


@functools.lru_cache(maxsize=8)
def _script_tree(path: str, mtime_ns: int) -> ast.Module:
    """The parsed main script, read once per version of the file (both questions below ask it)."""
    with open(path, "rb") as file:
        return ast.parse(file.read(), filename=path)


@functools.lru_cache(maxsize=8)
def _guarded_lines(path: str, mtime_ns: int) -> frozenset[int]:
    """The lines of ``path`` inside the body of an ``if __name__ == "__main__":`` block."""
    tree = _script_tree(path, mtime_ns)
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and node.body:
            lines.update(range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1))
    return frozenset(lines)


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [side.id for side in sides if isinstance(side, ast.Name)]
    constants = [side.value for side in sides if isinstance(side, ast.Constant)]
    return names == ["__name__"] and constants == ["__main__"]


def platform_start_method() -> str:
    """multiprocessing's default start method on this platform, read without fixing it."""
    default = getattr(getattr(mp.context, "_default_context", None), "_default_context", None)
    if default is not None:
        return default.get_start_method()
    if sys.platform.startswith("linux") and sys.version_info < (3, 14):  # the documented defaults
        return "fork"
    return "forkserver" if sys.platform.startswith("linux") else "spawn"
