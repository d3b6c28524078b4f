"""The package's shape: every import points down the layers (function-level and type-checking
imports included), no import cycles, pytest only where a pytest plugin lives, and a light entry
module."""

from __future__ import annotations

import ast
import re
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


LAYERS = (
    (
        "errors",
        "importing",
        "choices",
        "version",
        "termination",
        "printable",
        "finite",
        "schema",
        "strict_json",
        "bounded_run",
        "long_lived",
        "cores",
    ),
    ("benchmark",),
    ("policy",),
    ("lerobot",),
    ("gate",),
    ("results",),
    ("run_context",),
    ("envs",),
    ("episodes",),
    ("distribute",),
    ("serving",),
    ("report",),
    ("controller",),
    ("install",),
    ("configure", "api", "merge", "arrays"),
    ("plugin", "cli", "__main__", ""),
)
"""The package's floors, bottom first, by top-level module or folder (``""``: the package's
``__init__``). The data's path reads upwards: the leaves, a spec, a policy and LeRobot's, the gate's maths and the records
they judge, then envs and episodes on a worker, their scheduling and serving, then what a person
reads, and the controller and commands that wire it all. See docs/architecture.md."""

UPWARD_ALLOWED = {
    ("pytest_vlaeval.policy.loading", "pytest_vlaeval.serving"): "an address is parsed by serving's parser, lazily",
}
"""Imports that go up a floor on purpose, with why (keyed by module and the floor it reaches)."""

PYTEST_USERS = {
    "plugin",
    "configure",
    "arrays.command",
    "controller",
    "distribute",
    "episodes.collect",
    "serving.server.launcher",
}
"""Where pytest plugins live (and `arrays.command`, which reads a run from a collect-only session): only these import pytest; the gate, results, envs, reports and the
serving stack run without it (``evaluate()`` and ``vlaeval`` commands import them too)."""


def _floor(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _rank(module: str) -> int:
    floor = _floor(module)
    return next(rank for rank, names in enumerate(LAYERS) if floor in names)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a floor up to a higher one that is not allowed."""
    return sorted(
        f"{module} -> {target}"
        for module, edges in graph.items()
        for target in edges
        if _rank(target) > _rank(module) and (module, f"{NAME}.{_floor(target)}") not in UPWARD_ALLOWED
    )


def test_every_module_sits_on_a_floor() -> None:
    unplaced = [module for module in _modules() if not any(_floor(module) in names for names in LAYERS)]
    assert unplaced == []


def test_every_import_points_down() -> None:
    assert upward_imports(_graph()) == []


def test_an_upward_import_is_caught() -> None:
    """The rule can fail: the gate importing the scheduler is reported."""
    graph = _graph()
    graph[f"{NAME}.gate.fixed"] = {*graph[f"{NAME}.gate.fixed"], f"{NAME}.distribute.scheduler"}
    assert upward_imports(graph) == [f"{NAME}.gate.fixed -> {NAME}.distribute.scheduler"]


def test_pytest_is_imported_only_where_a_pytest_plugin_lives() -> None:
    modules = _modules()
    users = sorted(
        name
        for name, path in modules.items()
        if any(i == "pytest" or i.startswith("pytest.") for i in _imports(name, path))
        and not any(name == f"{NAME}.{u}" or name.startswith(f"{NAME}.{u}.") for u in PYTEST_USERS)
    )
    assert users == []


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
        *(
            f"{NAME}.choices.{name}"
            for name in (
                "EPISODE_LIST_MAX_MIB",
                "LIVE_MODES",
                "POLICY_PLACEMENTS",
                "RENDER_BACKENDS",
                "VIDEO_MODES",
                "add_gate_options",
                "in_range",
                "non_empty",
            )
        ),
    }
    assert ours <= {f"{NAME}.configure", f"{NAME}.configure.start", *leaves}
    for leaf in (f"{NAME}.choices", f"{NAME}.version"):  # the leaf, and the package's __init__ it runs
        imported = _imports(leaf, modules[leaf])
        assert _third_party(imported) == set() and not any(name.startswith(NAME) for name in imported)
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


def _documented_modules(doc: str | None = None) -> dict[str, set[str]]:
    """docs/architecture.md's "one line per module" part: folder -> the ``name.py`` its section names."""
    doc = doc or (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    part = doc.split("## The data's path, one line per module", 1)[1].split("\n## ", 1)[0]
    named: dict[str, set[str]] = {}
    folder = ""
    for line in part.splitlines():
        heading = re.match(r"^\*{1,2}[A-Z][^*]*\*{1,2}(?: \(`([a-z_/]+)/`\))?", line)
        if heading:
            folder = heading.group(1) or ""
        named.setdefault(folder, set()).update(re.findall(r"`([a-z_]+\.py)`", line))
    return named


def test_every_module_has_its_line_in_the_architecture_doc() -> None:
    named = _documented_modules()
    missing = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
        and path.name not in named.get(path.parent.relative_to(PACKAGE).as_posix().removeprefix("."), set())
    )
    assert missing == [], "add a line for each to docs/architecture.md's section of its folder"


def documented_but_missing(named: dict[str, set[str]]) -> list[str]:
    """The modules a section names that its folder does not hold."""
    return sorted(
        f"{folder}/{name}".removeprefix("/")
        for folder, names in named.items()
        for name in names
        if not (PACKAGE / folder / name).is_file()
    )


def test_every_module_the_architecture_doc_names_is_in_its_folder() -> None:
    """The other direction: a line kept for a module moved or removed, or named under another
    folder's section, is found."""
    stale = documented_but_missing(_documented_modules())
    assert not stale, f"docs/architecture.md has a line for modules its folders do not hold: {', '.join(stale)}"


def test_a_line_for_a_moved_module_is_caught() -> None:
    """The check can fail: the policy engine's line stayed under the server's section after it
    moved to ``policy/batched.py``."""
    doc = """## The data's path, one line per module

*Server* (`serving/server/`): the server's side.

- `engine.py`, `batcher.py`, `admission.py`: the policy thread, batching, episode slots.

**Policy** (`policy/`): the contract.

- `batched.py`: the batched policy contract and its engine.

## Process roles
"""
    assert documented_but_missing(_documented_modules(doc)) == ["serving/server/engine.py"]
