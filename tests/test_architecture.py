"""The package's shape: no import cycles (function-level and type-checking imports included) and a light
entry module."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest_vlaeval

PACKAGE = Path(pytest_vlaeval.__file__).parent
NAME = "pytest_vlaeval"


def _module_name(path: Path) -> str:
    parts = (NAME, *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    """Every module this one imports, anywhere in its body, ``TYPE_CHECKING`` blocks included: a
    cycle that only type checkers see is still two modules that cannot be understood apart."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.update(f"{base}.{alias.name}" for alias in node.names)
            found.add(base)
    return found


def _only_submodules(package: str, imported: set[str], modules: dict[str, Path]) -> bool:
    """``from pkg import mod`` runs ``pkg/__init__`` only as every submodule import does: no edge of its own."""
    if package not in imported:
        return False
    named = {module for module in imported if module.rpartition(".")[0] == package}
    return bool(named) and named <= set(modules)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        imported = _imports(name, path)
        for module in imported:
            # ``from pkg import mod`` names a module; ``from mod import attr`` names its module.
            target = module if module in modules else module.rpartition(".")[0]
            if target in modules and target != name and not _only_submodules(target, imported, modules):
                edges.add(target)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _ancestors(name: str) -> set[str]:
    """A package's ``__init__`` runs before its modules: importing a.b.c imports a and a.b."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def _third_party(imported: set[str]) -> set[str]:
    top = {name.partition(".")[0] for name in imported}
    return {name for name in top if name not in sys.stdlib_module_names and name not in ("pytest", "__future__", NAME)}


def test_plugin_imports_only_pytest_and_the_standard_library() -> None:
    """pytest imports ``plugin`` in every run where the package is installed: it must stay light.
    Of the package it reaches the standard-library-only ``choices`` leaf, and ``configure`` once
    ``--benchmark`` is given."""
    modules = _modules()
    imported = _imports(f"{NAME}.plugin", modules[f"{NAME}.plugin"])
    assert _third_party(imported) == set()
    ours = {name for name in imported if name.startswith(NAME)}
    leaves = {
        f"{NAME}.choices",
        *(f"{NAME}.choices.{name}" for name in ("LIVE_MODES", "RENDER_BACKENDS", "VIDEO_MODES")),
    }
    assert ours <= {f"{NAME}.configure", f"{NAME}.configure.start", *leaves}
    for leaf in (f"{NAME}.choices", f"{NAME}.version"):  # the leaf, and the package's __init__ it runs
        assert {name for name in _imports(leaf, modules[leaf]) if name != "__future__.annotations"} <= {"__future__"}
    init = _imports(NAME, modules[NAME])
    assert _third_party(init) == set() and {name for name in init if name.startswith(NAME)} <= {
        f"{NAME}.version",
        f"{NAME}.version.__version__",
        f"{NAME}.api",  # inside evaluate(), on first use
        f"{NAME}.api.evaluate",
        f"{NAME}.api.Summary",  # its return type, for type checkers only
        f"{NAME}.report.comparison",  # inside compare(), on first use
        f"{NAME}.report.comparison.compare",
        f"{NAME}.report.comparison.Comparison",  # for type checkers only
    }
