"""A built-in benchmark owns its stack: its file's ``install`` section is what ``vlaeval install``
puts in place, what its env imports and what its runs record, and ``scripts/setup.sh`` takes the
list from the installer."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pytest_vlaeval.benchmark.install import Stack
from pytest_vlaeval.benchmark.model import Benchmark, builtin_benchmarks, load_benchmark
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.install.stacks import LEROBOT_HOLDS, stacks

BUILTINS = {name: load_benchmark(path) for name, path in sorted(builtin_benchmarks().items())}
ROOT = Path(__file__).parents[2]


def stack_of(benchmark: Benchmark) -> Stack:
    return stacks()[benchmark.stack]


def pinned(stack: Stack) -> set[str]:
    return {canonicalize_name(r.name) for step in stack.steps for r in step.pinned()}


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_benchmark_runs_on_a_stack_the_installer_knows(name: str) -> None:
    benchmark = BUILTINS[name]
    assert benchmark.install.record, f"{name}: install.record is empty"
    stack = stack_of(benchmark)
    assert not stack.policy or stack.own_interpreter  # lerobot-libero's workers run in LeRobot's interpreter
    assert benchmark.install.interpreter == (stack.name if stack.own_interpreter else None)


@pytest.mark.parametrize("name", BUILTINS)
def test_what_a_run_records_is_what_the_stack_pins(name: str) -> None:
    benchmark = BUILTINS[name]
    unpinned = {canonicalize_name(p) for p in benchmark.install.record} - pinned(stack_of(benchmark))
    assert not unpinned, f"{name} records {sorted(unpinned)}, which its stack does not pin"


def _third_party_imports(module: str) -> set[str]:
    """Top-level modules the adapter's source imports, at module level or in a function, that are
    not the standard library's or this package's."""
    source = Path(__import__(module, fromlist=["_"]).__file__ or "").read_text()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"pytest_vlaeval", "__future__", "numpy"}


@pytest.mark.parametrize("name", BUILTINS)
def test_the_stack_checks_the_simulator_its_adapter_imports(name: str) -> None:
    """``vlaeval install`` imports each of the stack's ``imports``; the adapter's simulator modules
    are among them (numpy aside: every stack has one)."""
    benchmark = BUILTINS[name]
    adapter = benchmark.env.factory.split(":")[0]
    checked = {module.split(".")[0] for module in stack_of(benchmark).imports}
    unchecked = _third_party_imports(adapter) - checked - {"gymnasium", "torch", "cv2"}
    assert not unchecked, f"{name}'s adapter imports {sorted(unchecked)}, which vlaeval install does not check"


def test_lerobot_holds_the_simulators_at_the_benchmarks_pins() -> None:
    """LeRobot's stack is code (a policy's), but its Push-T, Meta-World and ALOHA pins are those
    files', so those benchmarks' workers can run there beside the policy."""
    lerobot = {Requirement(line).name: line for line in stacks()["lerobot"].steps[0].requirements}
    assert set(LEROBOT_HOLDS) == {"pusht", "metaworld", "aloha"}
    for benchmark, names in LEROBOT_HOLDS.items():
        pins = stacks()[benchmark].pins(*names)
        assert len(pins) == len(names), (benchmark, pins)
        for line in pins:
            assert lerobot[Requirement(line).name] == line
    assert {"gym_pusht", "metaworld", "gym_aloha"} <= set(stacks()["lerobot"].imports)


def test_setup_sh_takes_its_stacks_from_the_installer() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "install", "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == list(stacks())
    script = (ROOT / "scripts" / "setup.sh").read_text()
    assert "install --list" in script
    assert not [name for name in listed if f"--{name})" in script], "setup.sh names a stack itself"


def test_every_stack_is_a_marker_registered_from_the_benchmark_files(pytestconfig: pytest.Config) -> None:
    """``-m libero`` selects the tests that need a stack; a new built-in benchmark's marker comes
    from its file (``tests/conftest.py``), not from a line in ``pyproject.toml``."""
    registered = {line.partition(":")[0] for line in pytestconfig.getini("markers")}
    assert set(stacks()) <= registered
    listed = (ROOT / "pyproject.toml").read_text().split("markers = [", 1)[1].split("]", 1)[0]
    assert not [stack for stack in stacks() if f'"{stack}:' in listed]


def test_setup_sh_all_installs_every_stack_the_installer_lists(tmp_path: Path) -> None:
    """``scripts/setup.sh --all`` (what ``scripts/test.sh`` runs) installs each stack once, in one
    ``vlaeval install``, the test suite's two first; run against a venv whose ``vlaeval`` lists the real stacks and only
    records each install."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    digest = subprocess.run(["sha256sum", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True, check=True)
    (venv / ".vlaeval-setup").write_text(digest.stdout.split()[0] + "\n")  # this package: up to date
    installed = tmp_path / "installed"
    (venv / "bin" / "vlaeval").write_text(
        f'#!/bin/sh\nif [ "$2" = --list ]; then exec {sys.executable} -m pytest_vlaeval install --list; fi\n'
        f'shift; echo "$@" >>{installed}\n'
    )
    (venv / "bin" / "vlaeval").chmod(0o755)
    subprocess.run(
        ["bash", "scripts/setup.sh", "--all"], cwd=ROOT, env={**os.environ, "VLAEVAL_VENV": str(venv)}, check=True
    )
    (call,) = installed.read_text().splitlines()  # one command, which installs them side by side
    assert call.split() == ["mikasa", "pusht", *(s for s in stacks() if s not in ("mikasa", "pusht")), "--system-deps"]
    assert "./scripts/setup.sh --all" in (ROOT / "scripts" / "test.sh").read_text()


def _write(tmp_path: Path, install: str, env_extra: str = "") -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nenv:\n  factory: m:f\n  action_dim: 1\n  policy_obs_keys: [x]\n"
        f"{env_extra}{install}tasks:\n- {{env_id: A-v0, split: s, max_steps: 1}}\n"
    )
    return path


@pytest.mark.parametrize(
    ("env_extra", "says"),
    [
        ("  packages: [gymnasium]\n", "env.packages is now install.record; move it there"),
        ("  interpreter: mine\n", "env.interpreter is now install.own_interpreter: true"),
        ("  lerobot_env: pusht\n", "env.lerobot_env is now lerobot.env_type"),
    ],
)
def test_the_old_spelling_is_refused_in_one_line(tmp_path: Path, env_extra: str, says: str) -> None:
    with pytest.raises(SpecError, match=says) as raised:
        load_benchmark(_write(tmp_path, "", env_extra))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("install", "says"),
    [
        ("install:\n  python: ['3.10', '3.11']\n  steps: [{why: x, requirements: ['not a pin!']}]\n", "not a PEP 508"),
        ("install:\n  steps: [{why: x, requirements: [six]}]\n", "install.steps need install.python"),
        (
            "install:\n  python: ['3.12', '3.10']\n  steps: [{why: x, requirements: [six]}]\n",
            "is not \\[first, last\\]",
        ),
        ("install:\n  python: [3.10, '3.11']\n", "malformed"),
        ("install:\n  pins: [six]\n", "unknown field `pins`"),
    ],
)
def test_a_malformed_install_section_is_one_line(tmp_path: Path, install: str, says: str) -> None:
    with pytest.raises(SpecError, match=says) as raised:
        load_benchmark(_write(tmp_path, install))
    assert "\n" not in str(raised.value)


def test_a_users_file_names_its_stack_and_interpreter(tmp_path: Path) -> None:
    """A section without pins: the workers run in interpreter ``mysim``, the run records gymnasium,
    and the installer has nothing of it."""
    benchmark = load_benchmark(
        _write(tmp_path, "install: {stack: mysim, own_interpreter: true, record: [gymnasium]}\n")
    )
    assert (benchmark.install.interpreter, benchmark.install.record) == ("mysim", ("gymnasium",))
    assert "mysim" not in stacks() and "mine" not in stacks()
