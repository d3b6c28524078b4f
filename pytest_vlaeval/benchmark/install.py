"""A benchmark's simulator stack, built once from its file's ``install`` section (``Stack``) and read
everywhere: by ``vlaeval install``, by the session's machine check, for the workers' interpreter and
for what a run's fingerprint records. A policy's stack (LeRobot's) is the same type, declared in
``install.stacks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pytest_vlaeval.benchmark.file import InstallFile


@dataclass(frozen=True)
class PipStep:
    """One ``pip install`` of the stack; a step reruns when one of its requirements is unmet."""

    why: str
    requirements: tuple[str, ...] = ()
    """PEP 508 requirements, installed and checked as written."""
    requirements_file: str | None = None
    """A hash-checked requirements file shipped in this package (installed with --require-hashes)."""
    no_deps: bool = False
    keep_installed: bool = False
    """Any installed version satisfies it (torch: keep the build the machine chose)."""
    source: str | None = None
    """A source folder installed in editable mode in place of the requirements (which it satisfies)."""
    reinstall: bool = False
    """Installed again even where pip finds the version it asks for (this package: the same version
    may hold other files)."""

    def pinned(self) -> list[Requirement]:
        """Its requirements, those of its shipped requirements file included (hashes dropped)."""
        lines = list(self.requirements)
        if self.requirements_file:
            text = shipped_file(self.requirements_file).read_text(encoding="utf-8")
            lines += [
                line.split(" --hash")[0] for line in text.splitlines() if line.strip() and not line.startswith("#")
            ]
        return [Requirement(line) for line in lines]


def shipped_file(name: str) -> Path:
    """A file shipped beside this module (a hash-checked requirements file)."""
    return Path(str(resources.files("pytest_vlaeval.install") / name))


@dataclass(frozen=True)
class Stack:
    """What ``vlaeval install NAME`` installs and checks for one benchmark, or for a policy's
    interpreter."""

    name: str
    """The benchmark's name (its built-in benchmark file), or the policy stack's."""
    python: tuple[tuple[int, int], tuple[int, int]] | None
    """The Python versions the stack's wheels exist for: [first, last], inclusive. An interpreter of
    its own is made with a Python in this range, which need not be the caller's. None: it pins
    nothing (``pinned``)."""
    steps: tuple[PipStep, ...]
    imports: tuple[str, ...]
    """Modules the benchmark's adapter (or the policy's loader) imports; each must import after the install."""
    system_packages: tuple[str, ...]
    """Debian packages for ``--system-deps`` (Mesa from bookworm-backports on Debian 12)."""
    system_packages_unless_gpu: bool = False
    """The system packages are a software renderer a machine with an NVIDIA GPU does not need."""
    minimum_system_versions: tuple[tuple[str, int], ...] = ()
    """Debian packages whose installed major version must be at least this."""
    own_interpreter: bool = False
    """Always installed into an interpreter of its own (``install.interpreters``): its pins clash
    with the other stacks'."""
    policy: bool = False
    """A policy's stack, not a benchmark's: no benchmark file, data files or render check."""
    finish: str | None = None
    """A module of this package run (``python -m``) in the interpreter after its packages, at every
    install: what pip cannot do (links, config files). It changes nothing already right."""
    record: tuple[str, ...] = ()
    """Distributions whose versions every run's fingerprint records (a benchmark's)."""

    @property
    def interpreter(self) -> str | None:
        """The name of the interpreter of its own the stack runs in (``install.interpreters``); None: the caller's."""
        return self.name if self.own_interpreter else None

    @classmethod
    def from_section(cls, section: InstallFile, benchmark: str) -> Stack:
        """A benchmark file's ``install`` section as the one value the rest reads; the benchmark's
        name where the section names no stack."""
        return cls(
            name=section.stack or benchmark,
            python=section.python_range,
            steps=tuple(
                PipStep(
                    step.why,
                    tuple(step.requirements),
                    step.requirements_file,
                    no_deps=step.no_deps,
                    keep_installed=step.keep_installed,
                )
                for step in section.steps
            ),
            imports=tuple(section.imports),
            system_packages=tuple(section.system_packages),
            system_packages_unless_gpu=section.system_packages_unless_gpu,
            minimum_system_versions=tuple(section.minimum_system_versions.items()),
            own_interpreter=section.own_interpreter,
            finish=section.finish,
            record=tuple(section.record),
        )

    @property
    def pinned(self) -> bool:
        """The section pins packages (``vlaeval install`` makes it); otherwise it names a stack another
        file pins, or one its user made."""
        return bool(self.steps) and self.python is not None

    def pins(self, *names: str) -> tuple[str, ...]:
        """The stack's own requirements on the distributions ``names`` (its requirements file's too)."""
        wanted = {canonicalize_name(name) for name in names}
        return tuple(
            str(requirement)
            for step in self.steps
            for requirement in step.pinned()
            if canonicalize_name(requirement.name) in wanted
        )
