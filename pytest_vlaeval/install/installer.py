"""The install plan (what would run) and the check (what is wrong, one line each), kept apart
from running anything so both can be tested without touching the machine."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from pytest_vlaeval.benchmark.install import PipStep, Stack, shipped_file
from pytest_vlaeval.bounded_run import STACK_OUTPUT_LIMIT, run_bounded
from pytest_vlaeval.printable import command_line

BACKPORTS = "bookworm-backports"
BACKPORTS_SOURCE = Path("/etc/apt/sources.list.d/bookworm-backports.sources")
"""Debian 12's Mesa (22.3) is too old for SAPIEN 3.0.3's software Vulkan; its backports suite has 25."""


def backports_entry(mirror: str) -> str:
    """The backports suite as an apt source, from the Debian mirror the machine already uses."""
    return (
        f"Types: deb\nURIs: {mirror}\nSuites: {BACKPORTS}\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def configured_mirror(sources: list[Path], codename: str) -> str | None:
    """The archive URI of apt's source for ``codename`` (deb822 ``URIs:`` or a one-line ``deb``)."""
    for path in sources:
        if not path.is_file():
            continue
        for block in path.read_text(errors="replace").split("\n\n"):
            fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line and not line.startswith("#"))
            if codename in fields.get("Suites", "").split() and fields.get("URIs", "").strip():
                return fields["URIs"].split()[0]
            for line in block.splitlines():
                words = line.split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == codename:
                    return words[1]
    return None


InstalledVersion = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Command:
    """One command of the plan, with the reason it runs."""

    why: str
    argv: tuple[str, ...]
    stdin: str | None = None

    def __str__(self) -> str:
        return command_line(self.argv)


@dataclass(frozen=True)
class Debian:
    """What ``--system-deps`` needs to know about the machine."""

    codename: str
    versions: dict[str, str] = field(default_factory=dict)
    """Installed Debian package -> version."""
    backports_configured: bool = False
    has_gpu: bool = False
    is_root: bool = True
    mirror: str | None = None
    """The Debian archive apt already uses, for adding the backports suite."""


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def unmet(step: PipStep, installed: InstalledVersion) -> list[str]:
    """One line per requirement of ``step`` that the interpreter does not satisfy."""
    lines = []
    for requirement in step.pinned():
        version = installed(requirement.name)
        if version is None:
            lines.append(f"{requirement.name} is not installed")
        elif not step.keep_installed and not requirement.specifier.contains(version, prereleases=True):
            lines.append(f"{requirement.name} {version} is installed, the stack needs {requirement}")
    return lines


def pip_plan(
    stack: Stack, installed: InstalledVersion, python: str = sys.executable, steps: tuple[PipStep, ...] = ()
) -> list[Command]:
    """The pip commands still needed: from the first step with an unmet requirement on, since a
    step may replace what a later one pinned (ManiSkill brings its own SAPIEN). ``steps`` come
    before the stack's (a dedicated interpreter's harness)."""
    every = (*steps, *stack.steps)
    first = next((i for i, step in enumerate(every) if unmet(step, installed)), len(every))
    return [pip_command(step, python) for step in every[first:]]


def pip_command(step: PipStep, python: str) -> Command:
    """The ``pip install`` that puts ``step`` into interpreter ``python``."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    if step.no_deps:
        argv.append("--no-deps")
    if step.reinstall:
        argv.append("--force-reinstall")
    if step.requirements_file:
        argv += ["--require-hashes", "-r", str(shipped_file(step.requirements_file))]
    argv += ["-e", step.source] if step.source else step.requirements
    return Command(step.why, tuple(argv))


def system_plan(stack: Stack, debian: Debian) -> list[Command]:
    """The apt commands that put the stack's system packages in place; none when they are."""
    if stack.system_packages_unless_gpu and debian.has_gpu:
        return []
    minimum = dict(stack.minimum_system_versions)
    missing = [
        package
        for package in stack.system_packages
        if package not in debian.versions or _major(debian.versions[package]) < minimum.get(package, 0)
    ]
    if not missing:
        return []
    sudo = () if debian.is_root else ("sudo",)
    commands = []
    target: tuple[str, ...] = ()
    if debian.codename == "bookworm":
        target = ("-t", BACKPORTS)
        if not debian.backports_configured and debian.mirror is not None:
            commands.append(
                Command(
                    f"add Debian's {BACKPORTS} suite (Mesa >= 25)",
                    (*sudo, "tee", str(BACKPORTS_SOURCE)),
                    backports_entry(debian.mirror),
                )
            )
    apt = (*sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get")
    commands.append(Command("refresh the package lists", (*apt, "update", "-qq")))
    commands.append(
        Command(f"install {', '.join(missing)}", (*apt, "install", "-y", "-qq", *target, *stack.system_packages))
    )
    return commands


def _major(version: str) -> int:
    digits = version.split(":")[-1].split(".")[0]
    return int(digits) if digits.isdigit() else 0


def read_debian() -> Debian | None:
    """This machine's Debian facts, or None where there is no apt-get."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        return None
    release = Path("/etc/os-release")
    fields = (
        dict(line.split("=", 1) for line in release.read_text().splitlines() if "=" in line)
        if release.is_file()
        else {}
    )
    query = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Status}\n"], capture_output=True, text=True
    )
    versions = {}
    for line in query.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "installed":
            versions[parts[0]] = parts[1]
    sources = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]
    backports = any(p.is_file() and BACKPORTS in p.read_text(errors="replace") for p in sources)
    codename = fields.get("VERSION_CODENAME", "").strip('"')
    gpu = (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    )
    return Debian(
        codename=codename,
        versions=versions,
        backports_configured=backports,
        has_gpu=gpu,
        is_root=os.geteuid() == 0,
        mirror=configured_mirror(sources, codename),
    )


def python_range(stack: Stack) -> str:
    """The stack's Python versions in words: ``3.12 to 3.13``."""
    (a, b), (c, d) = stack.python
    return f"{a}.{b} to {c}.{d}"


def python_problem(stack: Stack, version: tuple[int, int] = sys.version_info[:2]) -> str | None:
    first, last = stack.python
    if first <= version <= last:
        return None
    return (
        f"Python {version[0]}.{version[1]}: the {stack.name} stack has wheels for Python "
        f"{python_range(stack)} only; make a virtual env with one of those"
    )


def version_problems(stack: Stack, installed: InstalledVersion, fix: str, steps: tuple[PipStep, ...] = ()) -> list[str]:
    """One line per unmet requirement, each ending in ``fix`` (the install command that meets it). A
    step installed again at any version (this package) is not checked here: its caller compares
    its files (``interpreters.package_mismatch``), which says more, once."""
    every = (step for step in (*steps, *stack.steps) if not step.reinstall)
    return [f"{line}: run `{fix}`" for step in every for line in unmet(step, installed)]


def import_problems(stack: Stack, fix: str, python: str = sys.executable) -> list[str]:
    """Import each module in a fresh interpreter (what a worker will do); one line per failure,
    each ending in ``fix``. The failures come back as the last line, JSON: what a module prints as
    it is imported (pygame's banner) is not one."""
    script = (
        "import importlib, json, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}'.splitlines()[0])\n"
        "print(json.dumps(failed))\n"
    )
    result = run_bounded([python, "-c", script, *stack.imports], timeout=None, limit=STACK_OUTPUT_LIMIT)
    answered = result.stdout.strip().splitlines()[-1:] if result.returncode == 0 else []
    try:
        lines = msgspec.json.decode(answered[0], type=list[str]) if answered else None
    except msgspec.DecodeError:
        lines = None
    if lines is None and result.overflowed:
        lines = [f"{', '.join(stack.imports)}: importing them {result.stopped}"]
    if lines is None:
        last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
        lines = [f"importing {', '.join(stack.imports)} crashed: {last}"]
    return [f"cannot import {line}: run `{fix}`" for line in lines]
