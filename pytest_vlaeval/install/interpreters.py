"""Dedicated interpreters: a benchmark whose simulator stack cannot share the caller's environment
(Meta-World needs gymnasium >= 1.1 and numpy 2; MIKASA needs gymnasium 0.29 and numpy < 2) runs
its xdist workers in a virtual env of its own, with this package in it: the same version and the
same files (``version.package_digest``), checked before any episode.

Where they live: ``$VLAEVAL_INTERPRETER_DIR/<name>`` when that is set, else
``<the caller's sys.prefix>/vlaeval-interpreters/<name>``: inside the environment that runs pytest,
so removing that environment removes them too. A benchmark file says ``install: {own_interpreter: true}`` (the interpreter is named its ``install.stack``);
``vlaeval install NAME`` makes it (for a built-in), or a user makes it by hand for their own
benchmark (any virtual env at that path with this package and the stack in it).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from pytest_vlaeval.benchmark.install import PipStep, Stack
from pytest_vlaeval.bounded_run import Finished, run_bounded
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.install.installer import pip_command, python_range
from pytest_vlaeval.install.stacks import stacks
from pytest_vlaeval.printable import command_line
from pytest_vlaeval.version import __version__, package_digest

INTERPRETER_DIR_ENV = "VLAEVAL_INTERPRETER_DIR"
HARNESS = ("pytest", "pytest-xdist", "execnet")
"""Distributions a worker shares with its controller, at the controller's versions: the worker
speaks xdist's protocol over execnet, so the two ends must be the same code."""
NOT_PLUGINS = frozenset({"pytest-vlaeval", *HARNESS})
"""Distributions with ``pytest11`` entry points that the plugin pins and checks apart: this package
(installed from its source tree) and the harness (pinned by name)."""


def interpreters_root() -> Path:
    """The folder holding the dedicated interpreters (``VLAEVAL_INTERPRETER_DIR`` overrides)."""
    configured = os.environ.get(INTERPRETER_DIR_ENV)
    return Path(configured).expanduser().absolute() if configured else Path(sys.prefix) / "vlaeval-interpreters"


def interpreter_home(name: str) -> Path:
    return interpreters_root() / name


def interpreter_python(name: str) -> Path:
    """The Python executable of interpreter ``name`` (it may not exist yet)."""
    home = interpreter_home(name)
    return home / "Scripts" / "python.exe" if os.name == "nt" else home / "bin" / "python"


def session_python(name: str, title: str) -> Path:
    """The interpreter a session's workers start in, or ``SpecError`` in one line saying how to make it."""
    python = interpreter_python(name)
    if not python.is_file():
        home = interpreter_home(name)
        make = install_command(name)
        how = (
            f"run `{make}`"
            if make
            else f"make a virtual env there (`{command_line([sys.executable, '-m', 'venv', str(home)])}`) holding "
            "pytest, pytest-xdist and pytest-vlaeval at this session's versions and the benchmark's stack"
        )
        raise SpecError(
            f"{title} runs in an interpreter of its own, and there is none at {home}: "
            f"{how} (or set {INTERPRETER_DIR_ENV} to where it is)"
        )
    return python


VERSION_PROBE = """
import sys
print(*sys.version_info[:2])
if "--venv" in sys.argv:
    import ensurepip, venv  # Debian splits them off (python3.N-venv): without them no env can be made
"""


def python_version(python: str, can_make_venv: bool = False) -> tuple[int, int] | None:
    """The ``(major, minor)`` of the Python at ``python``, None when it does not run (a pyenv shim
    of a version no folder selects) or, with ``can_make_venv``, cannot make a virtual env."""
    argv = [python, "-c", VERSION_PROBE, *(["--venv"] if can_make_venv else [])]
    try:
        done = run_bounded(argv, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = done.stdout.split()
    if done.returncode != 0 or done.overflowed or len(words) != 2 or not all(w.isdigit() for w in words):
        return None
    return int(words[0]), int(words[1])


def python_candidates(stack: Stack) -> list[str]:
    """Where a Python for the stack's interpreter may be, in the order tried: this one, then for each
    version in the stack's range, oldest first (the one its authors test), ``python3.N`` on PATH and
    pyenv's installed copies (its shims on PATH run only the versions a folder selects)."""
    (major, first), (_, last) = stack.python
    found = [sys.executable]
    pyenv_versions = _pyenv_root() / "versions" if shutil.which("pyenv") else None
    for minor in range(first, last + 1):
        name = f"python{major}.{minor}"
        found += [path for path in [shutil.which(name)] if path]
        if pyenv_versions is not None:
            copies = [p for p in pyenv_versions.glob(f"{major}.{minor}.*/bin/{name}") if _release(p)]
            found += [str(p) for p in sorted(copies, key=_release, reverse=True)]
    return found


def _pyenv_root() -> Path:
    done = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=60)
    return Path(done.stdout.strip() or "~/.pyenv").expanduser()


def _release(python: Path) -> tuple[int, ...]:
    """``(3, 12, 1)`` for ``<pyenv>/versions/3.12.1/bin/python3.12``; () for a name like 3.12-dev."""
    parts = python.parent.parent.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def base_python(stack: Stack, given: str | None = None) -> str:
    """The Python that makes the stack's interpreter of its own: ``given`` (``--python``), else the
    first candidate in the stack's range that can make a virtual env; ``SpecError`` in one line
    saying what to install when there is none."""
    first, last = stack.python
    wanted = f"{stack.name}'s interpreter needs Python {python_range(stack)}"
    if given is not None:
        version = python_version(given, can_make_venv=True)
        if version is None:
            raise SpecError(f"--python {given} is not a Python that can make a virtual env (venv and ensurepip)")
        if not first <= version <= last:
            raise SpecError(f"--python {given} is Python {version[0]}.{version[1]}; {wanted}")
        return given
    for python in python_candidates(stack):
        version = python_version(python, can_make_venv=True)
        if version is not None and first <= version <= last:
            return python
    names = ", ".join(f"python{first[0]}.{minor}" for minor in range(first[1], last[1] + 1))
    raise SpecError(
        f"{wanted} and finds none ({names} on PATH or installed by pyenv, with the venv module): install "
        f"Python {first[0]}.{first[1]} (the system's python{first[0]}.{first[1]}-venv, `pyenv install "
        f"{first[0]}.{first[1]}` or `uv python install {first[0]}.{first[1]}`), or pass --python PATH"
    )


def interpreter_python_problem(stack: Stack, python: Path) -> str | None:
    """None when the existing interpreter ``python`` runs a Python in the stack's range; else what
    to do, in one line."""
    first, last = stack.python
    version = python_version(str(python))
    if version is not None and first <= version <= last:
        return None
    home = python.parent.parent
    found = "does not run" if version is None else f"is Python {version[0]}.{version[1]}"
    return (
        f"the interpreter at {home} {found}; {stack.name}'s needs Python {python_range(stack)}: "
        f"remove that folder and run `{install_command(stack.name)}` again"
    )


def install_command(name: str) -> str | None:
    """The ``vlaeval install`` command that makes interpreter ``name``, for a name that command
    accepts; None for an interpreter a user made for a benchmark of their own."""
    stack = stacks().get(name)
    if stack is None:
        return None
    return f"vlaeval install {name}" + ("" if stack.own_interpreter else " --own-interpreter")


def how_to_install(name: str, python: Path, step: PipStep) -> str:
    """The command that puts ``step`` into interpreter ``name`` (at ``python``): ``vlaeval install``
    for an interpreter that command makes, else pip there, quoted for a shell."""
    return install_command(name) or str(pip_command(step, str(python)))


def site_packages(python: Path) -> list[Path]:
    """Where a virtual env's distributions are (read without starting its interpreter)."""
    home = python.parent.parent
    return sorted(home.glob("lib/python3*/site-packages")) + sorted(home.glob("Lib/site-packages"))


def installed_in(python: Path) -> InstalledIn:
    """``distribution -> version or None`` as seen by another interpreter's environment."""
    return InstalledIn(site_packages(python))


class InstalledIn:
    """Versions of the distributions under some ``site-packages`` folders, each found by its name
    when first asked: LeRobot's interpreter holds some 200, and reading every one's metadata cost a
    session's start more than its interpreter's probe."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = [str(p) for p in paths]
        self._versions: dict[str, str | None] = {}

    def __call__(self, distribution: str) -> str | None:
        key = _normalized(distribution)
        if key not in self._versions:
            found = next(iter(importlib.metadata.distributions(name=distribution, path=self.paths)), None)
            self._versions[key] = found.version if found is not None else None
        return self._versions[key]

    def forget(self, distribution: str) -> None:
        """Count ``distribution`` as missing (its copy there is not the one to run)."""
        self._versions[_normalized(distribution)] = None


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def harness_steps() -> tuple[PipStep, ...]:
    """What every dedicated interpreter holds besides its stack: the controller's pytest, xdist and
    execnet, and this package at this version (from this source tree when it is installed from one,
    so a clone's edits reach the workers too)."""
    pins = tuple(f"{name}=={importlib.metadata.version(name)}" for name in HARNESS)
    plugins = tuple(f"{name}=={version}" for name, version in pytest_plugins().items())
    return (
        PipStep(
            "pytest, pytest-xdist, execnet and the caller's pytest plugins at its versions (a plugin's "
            "controller half may expect its worker half)",
            pins + plugins,
        ),
        package_step(),
        PipStep("what pytest-vlaeval itself imports", own_requirements()),
    )


def package_step() -> PipStep:
    """This package as the caller has it, without its dependencies (the stack pins its own numpy),
    replacing whatever copy is there."""
    return PipStep(
        f"pytest-vlaeval {__version__}, the caller's, without its dependencies (the stack pins its own numpy)",
        (f"pytest-vlaeval=={__version__}",),
        no_deps=True,
        source=source_tree(),
        reinstall=True,
    )


PROBE = """
import importlib, json, os, sys
sys.path[:] = [entry for entry in sys.path if entry]  # -c's working directory: not the interpreter's own
path = list(sys.path)
try:
    version = importlib.import_module("pytest_vlaeval.version")
except ImportError:
    package = None
else:
    digest = getattr(version, "package_digest", None)
    package = [getattr(version, "__version__", None), digest() if digest else None]
sys.path[:0] = [os.getcwd()]  # where a worker there imports a --policy module from
imports = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except BaseException as exc:
        imports[module] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    else:
        imports[module] = None
print(json.dumps({"package": package, "path": path, "imports": imports}))
"""
"""Run in the other interpreter: its ``sys.path``, the version and digest of the copy of this
package it imports from its own packages and ``PYTHONPATH`` (null without one; no digest from a
copy older than the digest), and whether each module named in its arguments imports there, from
the working directory too (as a worker there imports a ``--policy``): one start for all of it."""


@dataclass(frozen=True)
class Probed:
    """What another interpreter said of itself when started once (``probe``)."""

    package: tuple[str | None, str | None] | None
    """The version and digest of the copy of this package it imports; None without one."""
    path: tuple[str, ...]
    """Its ``sys.path``: its standard library and its packages."""
    imports: dict[str, str | None] = field(default_factory=dict)
    """Each module asked for: None where it imports, else its error's first line."""

    @property
    def mismatch(self) -> str | None:
        """None when it imports this package at this version with these files; else what it holds
        instead, in words."""
        if self.package is None:
            return "no pytest-vlaeval"
        version, digest = self.package
        if version != __version__:
            return f"pytest-vlaeval {version}, not this session's {__version__}"
        if digest != package_digest():
            theirs, ours = (digest or "none")[:12], package_digest()[:12]
            return f"pytest-vlaeval {version} with other files (digest {theirs}, not {ours})"
        return None


def package_mismatch(python: Path) -> str | None:
    """``Probed.mismatch`` of interpreter ``python``."""
    return probe(python).mismatch


def probe(python: Path, modules: tuple[str, ...] = ()) -> Probed:
    """Start ``python`` once and read what it says of itself and whether ``modules`` import there
    (``bounded_run.OUTPUT_LIMIT`` bytes at most); ``SpecError`` in one line when it does not answer
    (it is not a Python interpreter)."""
    try:
        done = run_bounded([str(python), "-c", PROBE, *modules], timeout=300 if modules else 120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    else:
        answered = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 and not done.overflowed else []
        with suppress(msgspec.DecodeError):  # a ValidationError too: an answer of another shape
            if answered:
                return msgspec.json.decode(answered[0], type=Probed)
        problem = _last_line(done)
    raise SpecError(f"{python} did not say which pytest-vlaeval it holds (is it a Python interpreter?): {problem}")


def pytest_plugins() -> dict[str, str]:
    """The distributions of this env that register pytest plugins (``pytest11``), but this package
    and the harness's: name -> version."""
    found: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        plugin = any(entry.group == "pytest11" for entry in distribution.entry_points)
        if name and plugin and _normalized(name) not in NOT_PLUGINS:
            found.setdefault(_normalized(name), distribution.version)
    return dict(sorted(found.items()))


def missing_plugins(installed: InstalledIn, loaded: list[tuple[str, str]]) -> list[str]:
    """``name==version`` of each plugin distribution the session loaded (``loaded``: name,
    version) that the interpreter (its distributions: ``installed``) lacks at that version: the
    plugin's worker half would be missing (pytest-metadata's controller then fails on every
    worker's end)."""
    return sorted(
        {
            f"{name}=={version}"
            for name, version in loaded
            if _normalized(name) not in NOT_PLUGINS and installed(name) != version
        }
    )


def own_requirements() -> tuple[str, ...]:
    """This package's declared dependencies but those the harness pins (pytest, xdist) and the
    stack pins (numpy): what ``pip install --no-deps`` of this package leaves out."""
    from packaging.requirements import Requirement

    declared = [Requirement(text) for text in importlib.metadata.requires("pytest-vlaeval") or []]
    skipped = {*HARNESS, "numpy"}
    return tuple(str(r) for r in declared if not r.marker and _normalized(r.name) not in skipped)


def source_tree() -> str | None:
    """The source folder this package was installed from in editable mode, if it was."""
    # An installed copy's metadata, not a source tree's ``*.egg-info`` (an editable install leaves one
    # there, and ``python -m`` run from the tree finds it first).
    texts = [d.read_text("direct_url.json") for d in importlib.metadata.distributions(name="pytest-vlaeval")]
    text = next((t for t in texts if t), None)
    if text is None:
        return None
    data = json.loads(text)
    if not data.get("dir_info", {}).get("editable") or not str(data.get("url", "")).startswith("file://"):
        return None
    return data["url"].removeprefix("file://")


LINE_SHOWN = 300
"""Characters shown of a line another interpreter said, in a message of one line."""


def _last_line(done: Finished) -> str:
    """Why a probe of another interpreter got no answer, in one line: the last line it said (its
    stderr, else its stdout), or that it said too much."""
    if done.overflowed:
        return f"it {done.stopped}, with no answer"
    said = done.stderr.strip() or done.stdout.strip()
    line = (said or f"exit {done.returncode}").splitlines()[-1]
    return line if len(line) <= LINE_SHOWN else line[:LINE_SHOWN] + "…"
