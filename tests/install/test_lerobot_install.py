"""``vlaeval install lerobot``: LeRobot's interpreter is made with a Python in its range (3.12 to
3.13), which need not be the caller's; without one the command refuses in one line saying what to
install. The real interpreter (``scripts/setup.sh --lerobot``) passes the check; without it the
last test fails, never skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vlaeval.install import interpreters
from pytest_vlaeval.install.stacks import stacks

LEROBOT = stacks()["lerobot"]


def fake_python(folder: Path, name: str, reports: str, status: int = 0) -> Path:
    """An executable ``folder/name`` that prints ``reports`` as the version probe reads it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{reports}'\nexit {status}\n")
    path.chmod(0o755)
    return path


def install(tmp_path: Path, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``vlaeval install lerobot ARGS`` with only ``path`` on PATH, its interpreter under ``tmp_path``."""
    env = {**os.environ, "PATH": path, interpreters.INTERPRETER_DIR_ENV: str(tmp_path / "interpreters")}
    return subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "install", "lerobot", *args], capture_output=True, text=True, env=env
    )


def test_the_callers_python_out_of_range_is_passed_over_for_one_on_path(tmp_path: Path) -> None:
    assert not LEROBOT.python[0] <= sys.version_info[:2] <= LEROBOT.python[1], "this test needs a caller below 3.12"
    fake_python(tmp_path / "bin", "python3.12", "3 11")  # a name is not a version: it is asked
    right = fake_python(tmp_path / "bin", "python3.13", "3 13")
    result = install(tmp_path, str(tmp_path / "bin"), "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    home = tmp_path / "interpreters" / "lerobot"
    assert result.stdout.splitlines()[1] == f"  $ {right} -m venv {home}"
    assert f"{home}/bin/python -m pip install" in result.stdout
    assert "'lerobot[pusht,metaworld,aloha,diffusion,libero]==0.6.1'" in result.stdout


@pytest.mark.parametrize(
    "found",
    ["nothing on PATH", "a python3.12 that is 3.11", "a pyenv shim that no folder selects"],
)
def test_without_a_python_in_range_it_refuses_in_one_line_naming_what_to_install(tmp_path: Path, found: str) -> None:
    if found == "a python3.12 that is 3.11":
        fake_python(tmp_path / "bin", "python3.12", "3 11")
    elif found == "a pyenv shim that no folder selects":
        fake_python(tmp_path / "bin", "python3.12", "pyenv: python3.12: command not found", status=127)
    result = install(tmp_path, str(tmp_path / "bin"), "--dry-run")
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith("vlaeval install: lerobot's interpreter needs Python 3.12 to 3.13 and finds none")
    assert "install Python 3.12" in line and "--python PATH" in line
    assert not (tmp_path / "interpreters").exists()


def test_python_names_the_one_to_use_and_is_checked(tmp_path: Path) -> None:
    old = fake_python(tmp_path / "elsewhere", "py311", "3 11")
    refused = install(tmp_path, "", "--dry-run", "--python", str(old))
    assert refused.returncode == 1
    assert refused.stdout.splitlines() == [
        f"vlaeval install: --python {old} is Python 3.11; lerobot's interpreter needs Python 3.12 to 3.13"
    ]
    chosen = fake_python(tmp_path / "elsewhere", "py312", "3 12")
    result = install(tmp_path, "", "--dry-run", "--python", str(chosen))
    assert result.returncode == 0, result.stdout
    assert f"  $ {chosen} -m venv " in result.stdout


def test_an_existing_interpreter_of_another_python_is_refused_before_anything_runs(tmp_path: Path) -> None:
    python = interpreters.interpreter_python("lerobot")
    made = tmp_path / "interpreters" / "lerobot" / python.relative_to(python.parent.parent)
    made.parent.mkdir(parents=True)
    made.symlink_to(sys.executable)
    major, minor = sys.version_info[:2]
    for args in (["--check"], ["--dry-run"]):
        result = install(tmp_path, os.environ["PATH"], *args)
        assert result.returncode == 1
        (line,) = result.stdout.splitlines()
        assert f"is Python {major}.{minor}; lerobot's needs Python 3.12 to 3.13: remove that folder" in line


def test_the_installed_lerobot_interpreter_passes_the_check() -> None:
    """The real interpreter: its versions, this package's very files, and the imports LeRobot's
    policies and envs need; and pip finds our pins and LeRobot's consistent there."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vlaeval", "install", "lerobot", "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith("vlaeval install: lerobot is ready in ")
    python = interpreters.interpreter_python("lerobot")
    assert interpreters.python_version(str(python)) >= (3, 12)
    clash = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    assert clash.returncode == 0, clash.stdout
