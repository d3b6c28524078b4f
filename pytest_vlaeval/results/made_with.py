"""What a run's numbers were made with, beyond what makes it one run.

A simulator's floats depend on the machine: the same pinned stack on another CPU (other vector
extensions, sums in another order), another GPU or driver, or another Mesa gives a contact-rich
episode a return that differs in the eighth digit and, some steps later, another outcome. A seed
therefore replays an episode exactly only on the same stack; elsewhere it gives the same initial
state and an episode of the same distribution. So a run records what its numbers depend on:

- the simulator's and renderer's versions: the benchmark file's ``install.record`` distributions as
  the workers' interpreter has them (the fingerprint's ``packages``), and the render backend the
  workers resolved (``policy.json``'s ``render_backend``; MuJoCo's names its GL renderer and Mesa);
- the assets: the selected tasks' pinned digests (the fingerprint's ``assets``: the digest the
  benchmark file pins and ``vlaeval install-assets`` checks, not one hashed at every start);
- each host a session of the run ran on (the fingerprint's ``machines``): the CPU model and its
  vector extensions, the NVIDIA GPUs and their driver, and the installed versions of the
  benchmark file's system packages (Mesa's drivers).

The packages and assets are part of what makes the run (``store.RunStore.claim`` refuses a
session that differs); the hosts are not: a run moved to another machine of the same stack may be
resumed there, and the session says in one line that its seeds pair with the earlier sessions'
in distribution. The host recorded is the controller's; workers started on other hosts (``--tx
ssh=``) leave theirs unknown (``workers_elsewhere``).

``differences`` names in one clause what records differ in; ``vlaeval compare``, ``vlaeval
merge`` and the gate say it. What a record lacks (a run made before these were recorded) is
unknown, and unknown is never a difference.
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from pytest_vlaeval.benchmark.file import PackageFileAsset
from pytest_vlaeval.benchmark.model import Selection
from pytest_vlaeval.bounded_run import run_bounded
from pytest_vlaeval.lerobot.eval_info import eval_info_location
from pytest_vlaeval.results.readback import read_json
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.schema import Fingerprint, Machine

MACHINES = "machines"
"""The fingerprint's key of the run's hosts: recorded, never a reason to refuse a session."""

VECTOR_EXTENSIONS = ("avx512f", "avx2", "fma", "avx", "sse4_2", "sve2", "sve", "asimd")
"""The CPU flags that change a simulator's floats (vector width, fused multiply-add), widest first."""

PAIRING = "seeds pair in distribution, not episode by episode"

HARNESS = "pytest-vlaeval"
"""The fingerprint's own package: it identifies the run's code, not the simulator's floats."""

PROBE_TIMEOUT_S = 10.0
"""How long ``nvidia-smi`` or ``dpkg-query`` may take to answer; past it, what they say is unknown."""

_SHOWN = re.compile(r"[^A-Za-z0-9 .,:;()+~/@=_-]")
_SHOWN_LENGTH = 120


def asset_digests(selection: Selection) -> dict[str, str | None]:
    """The selected tasks' assets with their pinned sha256 (None: the benchmark file pins none, as
    for a pack ManiSkill's own downloader fetches)."""
    assets = selection.benchmark.assets
    names = sorted({name for task in selection.tasks for name in task.assets})
    return {name: assets[name].sha256 if isinstance(assets[name], PackageFileAsset) else None for name in names}


def this_machine(system_packages: Iterable[str] = (), workers_elsewhere: bool = False) -> Machine:
    """This host as a run records it: probed once a process (``nvidia-smi`` and ``dpkg-query`` run
    with a timeout); what cannot be learnt is left out, unknown."""
    model, flags = _cpu()
    machine: Machine = {"arch": platform.machine() or "unknown", "cpu": model}
    if flags is not None:
        machine["cpu_flags"] = list(flags)
    gpus = _nvidia_gpus()
    if gpus is not None:
        machine["gpus"] = list(gpus)
    versions = _system_versions(tuple(sorted(set(system_packages))))
    if versions:
        machine["system_packages"] = dict(versions)
    if workers_elsewhere:
        machine["workers_elsewhere"] = True
    return machine


@functools.cache
def _cpu() -> tuple[str, tuple[str, ...] | None]:
    """The CPU's model name and vector extensions from ``/proc/cpuinfo`` (its first processor);
    elsewhere what the platform says of the model, and the extensions unknown (None)."""
    model, flags = None, None
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and model is None:
            model = " ".join(value.split())
        elif key in ("flags", "features") and flags is None:
            flags = tuple(flag for flag in VECTOR_EXTENSIONS if flag in value.split())
        if model is not None and flags is not None:
            break
    return model or platform.processor() or platform.machine() or "unknown", flags


@functools.cache
def _nvidia_gpus() -> tuple[str, ...] | None:
    """Each distinct NVIDIA GPU with its driver (``NVIDIA H200 driver 550.54.15``); none without
    ``nvidia-smi``; None (unknown) when it fails or does not answer in time."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return ()
    try:
        listed = run_bounded(
            [program, "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0 or listed.overflowed:
        return None
    rows = [line.rpartition(",") for line in listed.stdout.splitlines() if "," in line]
    return tuple(sorted({f"{name.strip()} driver {driver.strip()}" for name, _, driver in rows}))


@functools.cache
def _system_versions(packages: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The installed Debian versions of ``packages`` (none off Debian, or when ``dpkg-query`` fails)."""
    program = shutil.which("dpkg-query")
    if not packages or program is None:
        return ()
    try:
        listed = run_bounded(
            [program, "-W", "-f=${Package} ${Version} ${db:Status-Status}\n", *packages], timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    rows = (line.split() for line in listed.stdout.splitlines())
    return tuple((row[0], row[1]) for row in rows if len(row) == 3 and row[2] == "installed")


@dataclass(frozen=True)
class MadeWith:
    """What one run says it was made with; None (or no machine) where it does not say."""

    packages: Mapping[str, str | None] | None = None
    assets: Mapping[str, str | None] | None = None
    renderer: str | None = None
    machines: tuple[Machine, ...] = ()


class _RenderedBy(TypedDict, total=False):
    """What ``policy.json`` says of the renderer."""

    render_backend: str | None


def made_with(run_dir: Path) -> MadeWith:
    """What the run in ``run_dir`` says it was made with: nothing for a directory without a
    fingerprint (the benchmark's reference runner's task files); ``SpecError`` naming a file this
    package did not write (a received run's)."""
    run = RunDir(run_dir)
    if not run.fingerprint.is_file():
        return MadeWith()
    fingerprint = read_json(run.fingerprint, Fingerprint, "fingerprint")
    policy = read_json(run.policy, _RenderedBy, "policy") if run.policy.is_file() else _RenderedBy()
    return MadeWith(
        packages={name: version for name, version in fingerprint["packages"].items() if name != HARNESS},
        assets=fingerprint.get("assets"),
        renderer=policy.get("render_backend"),
        machines=tuple(fingerprint.get("machines", ())),
    )


def baseline_made_with(given: Path) -> MadeWith | None:
    """What a gate's baseline was made with; None, unknown, for lerobot-eval's ``eval_info.json``,
    which records nothing of it (ours, named as a file, is read from the run beside it)."""
    location = eval_info_location(given)
    if location is None:
        return made_with(given)
    beside = location.file.parent
    return made_with(beside) if RunDir(beside).fingerprint.is_file() else None


def differences(stacks: Sequence[MadeWith]) -> str | None:
    """What ``stacks`` differ in, as one clause naming each value once, in the order met
    (``different CPUs (AMD EPYC 7763 avx2 vs Intel Xeon 8480 avx512f) and GPUs (... vs none)``);
    None when every known value agrees. A run made on several hosts shows them joined by ``+``."""
    parts = []
    for what, values in _aspects(stacks):
        shown = list(dict.fromkeys(value for value in values if value is not None))
        if len(shown) > 1:
            parts.append(f"{what} ({' vs '.join(shown)})")
    if not parts:
        return None
    return "different " + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1])


def gate_note(run: MadeWith, baseline: MadeWith | None) -> str | None:
    """The clause a gate's verdict ends with when the baseline was made on another stack, or one
    that records nothing (lerobot-eval's); None on the same stack, or where nothing is known."""
    if baseline is None:
        return "baseline made with: unknown"
    differ = differences([run, baseline])
    if differ is None:
        return None
    return (
        f"this run and the baseline were made with {differ}: {PAIRING} (the paired test of the mean drop "
        "stays valid, but pairing gains less, and a seed's flip is no evidence on its own)"
    )


def compare_note(labels: Sequence[str], stacks: Sequence[MadeWith | None]) -> str | None:
    """The line ``vlaeval compare`` shows when its runs were made on other stacks, or one records
    nothing (None in ``stacks``: lerobot-eval's); None when no known value differs."""
    differ = differences([stack for stack in stacks if stack is not None])
    unknown = [label for label, stack in zip(labels, stacks, strict=True) if stack is None]
    parts = []
    if differ is not None:
        parts.append(
            f"The runs were made with {differ}: {PAIRING} (the paired differences stay valid, but pairing "
            "narrows them less, and a seed's flip is no evidence on its own)."
        )
    if unknown:
        parts.append(f"Made with: unknown for {', '.join(unknown)}.")
    return " ".join(parts) or None


def hosts_note(machines: Sequence[Machine], sessions: str) -> str | None:
    """One line when the hosts a run's ``sessions`` ran on differ in what its floats depend on."""
    differ = differences([MadeWith(machines=(machine,)) for machine in machines])
    if differ is None:
        return None
    return f"{sessions} were made with {differ}: compared with another run, its {PAIRING}"


def _aspects(stacks: Sequence[MadeWith]) -> Iterable[tuple[str, list[str | None]]]:
    """Each thing a record may name, with each stack's value of it (None: unknown)."""
    for name in _names(stack.packages for stack in stacks):
        yield _shown(name), [_version(stack.packages, name) for stack in stacks]
    yield "renderers", [_shown(stack.renderer) if stack.renderer else None for stack in stacks]
    for name in _names(stack.assets for stack in stacks):
        yield f"asset {_shown(name)}", [_digest(stack.assets, name) for stack in stacks]
    yield "CPUs", _cpus(stacks)
    yield "GPUs", [_hosts(stack, _gpus) for stack in stacks]
    for name in _names(machine.get("system_packages") for stack in stacks for machine in _local(stack)):
        yield _shown(name), [_hosts(stack, lambda m, n=name: _version(m.get("system_packages"), n)) for stack in stacks]


def _names(mappings: Iterable[Mapping[str, object] | None]) -> list[str]:
    return list(dict.fromkeys(name for mapping in mappings if mapping for name in mapping))


def _version(versions: Mapping[str, str | None] | None, name: str) -> str | None:
    if versions is None or name not in versions:
        return None
    version = versions[name]
    return _shown(version) if version is not None else "not installed"


def _digest(digests: Mapping[str, str | None] | None, name: str) -> str | None:
    digest = digests.get(name) if digests is not None else None
    return _shown(digest[:12]) if digest else None


def _local(stack: MadeWith) -> list[Machine]:
    """The hosts whose workers ran the run's episodes: a host whose workers ran elsewhere says
    nothing of theirs."""
    return [machine for machine in stack.machines if not machine.get("workers_elsewhere")]


def _hosts(stack: MadeWith, value: Callable[[Machine], str | None]) -> str | None:
    """The stack's hosts' distinct values, joined by ``+``; None when no host says."""
    values = dict.fromkeys(v for machine in _local(stack) if (v := value(machine)) is not None)
    return " + ".join(values) or None


def _gpus(machine: Machine) -> str | None:
    gpus = machine.get("gpus")
    if gpus is None:
        return None
    return ", ".join(_shown(gpu) for gpu in gpus) or "none"


def _cpus(stacks: Sequence[MadeWith]) -> list[str | None]:
    """Each stack's CPUs by model and widest vector extension, or by every extension where that
    alone tells them apart (one model with and without ``fma``)."""
    short = [_hosts(stack, lambda m: _cpu_text(m, every=False)) for stack in stacks]
    full = [_hosts(stack, lambda m: _cpu_text(m, every=True)) for stack in stacks]
    known = {value for value in short if value is not None}
    return full if len(known) < len({value for value in full if value is not None}) else short


def _cpu_text(machine: Machine, every: bool) -> str | None:
    model = machine.get("cpu")
    if model is None:
        return None
    flags = machine.get("cpu_flags", [])
    shown = flags if every else flags[:1]  # recorded widest first
    return _shown(" ".join([model, *shown]))


def _shown(text: str) -> str:
    """A value from a run (maybe someone else's) as plain characters, shortened: it reaches a
    terminal, a markdown report and a CI log."""
    plain = _SHOWN.sub("?", text)
    return plain if len(plain) <= _SHOWN_LENGTH else plain[: _SHOWN_LENGTH - 3] + "..."
