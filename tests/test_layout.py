"""The package's layout stays as docs/architecture.md draws it.

Read from the source with :mod:`ast` (nothing is imported): every import
counts, at module level, under ``TYPE_CHECKING`` and inside functions.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Optional, Set

import slotworker

PACKAGE_DIR = os.path.dirname(os.path.abspath(slotworker.__file__))
ROOT = os.path.dirname(os.path.dirname(PACKAGE_DIR))


def _modules() -> Dict[str, str]:
    """Dotted module name -> source path, for every .py file of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(PACKAGE_DIR))[:-3]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = os.path.join(folder, name)
    return found


def _resolve(module: str, is_package: bool, level: int, target: Optional[str]) -> str:
    """The absolute name of a (possibly relative) import inside ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> Dict[str, Set[str]]:
    """Module -> the package modules it imports."""
    modules = _modules()
    graph: Dict[str, Set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                # `from pkg import mod` imports the module pkg.mod when there is one.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a non-module tail
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import cycle as a path (first == last), or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_of_the_package_imports_itself_back() -> None:
    graph = import_graph()
    assert "slotworker.worker.take_loop" in graph["slotworker.worker.worker"]  # the graph is real
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_local_platform_and_the_tools_are_apart_from_the_worker() -> None:
    graph = import_graph()
    for name, imports in graph.items():
        if name.startswith("slotworker.platform"):
            assert not any(i.startswith(("slotworker.worker", "slotworker.modes", "slotworker.tools"))
                           for i in imports), (name, imports)
        if name.startswith("slotworker.worker"):
            assert not any(i.startswith(("slotworker.modes", "slotworker.tools", "slotworker.platform"))
                           for i in imports), (name, imports)


def test_no_file_cites_a_document_the_repository_does_not_hold() -> None:
    # The project's reference notes live outside the repository; built here
    # so that this file does not cite them itself.
    cited = tuple(f"{name}.md" for name in ("PROTOCOL", "BENCH", "DESIGN", "STYLE"))
    offenders = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist", "__pycache__")
                   and not d.endswith(".egg-info")]
        for name in files:
            if not name.endswith((".py", ".md", ".toml", ".pyx", ".c", ".h", ".cfg", ".txt")):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            offenders += [f"{os.path.relpath(path, ROOT)}: {doc}" for doc in cited
                          if doc in text and not os.path.exists(os.path.join(ROOT, doc))]
    assert offenders == []
