"""Scripts are code: every script answers ``--help`` and runs its smoke mode, so a refactor of the
package cannot break one silently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
PYTHON_SCRIPTS = sorted(path.name for path in SCRIPTS.glob("*.py"))
SHELL_SCRIPTS = ["evaluate.sh"]


def run_script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it: its own process, from the repository root, this interpreter first on PATH."""
    command = [sys.executable, str(SCRIPTS / name)] if name.endswith(".py") else ["bash", str(SCRIPTS / name)]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    return subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", PYTHON_SCRIPTS + SHELL_SCRIPTS)
def test_script_answers_help(name: str) -> None:
    proc = run_script(name, "--help", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage:" in proc.stdout
    assert "Traceback" not in proc.stderr


def benchmark_file(name: str) -> dict:
    return yaml.safe_load((ROOT / "benchmarks" / name).read_text())


def test_mikasa_yaml_smoke_reproduces_the_committed_rows() -> None:
    """The generator's output for four rows of the task table is what benchmarks/mikasa.yaml holds for them."""
    proc = run_script("mikasa_yaml_from_csv.py", "--smoke", timeout=60)
    assert proc.returncode == 0, proc.stderr
    generated, committed = yaml.safe_load(proc.stdout), benchmark_file("mikasa.yaml")
    assert [task["env_id"] for task in generated["tasks"]] == [
        "ShellGameTouch-VLA-v0",
        "RememberColor3-VLA-v0",
        "ShellGameColorLampTouch-VLA-v0",
        "BatteriesCheckerEasy-3-VLA-v0",
    ]
    by_id = {task["env_id"]: task for task in committed["tasks"]}
    assert generated["tasks"] == [by_id[task["env_id"]] for task in generated["tasks"]]
    assert {k: v for k, v in generated.items() if k != "tasks"} == {k: v for k, v in committed.items() if k != "tasks"}


def test_mikasa_yaml_without_a_table_is_one_usage_line() -> None:
    proc = run_script("mikasa_yaml_from_csv.py", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("one of the arguments table --smoke is required")


@pytest.mark.libero
def test_libero_yaml_smoke_reproduces_the_spatial_suite() -> None:
    pytest.importorskip("libero")
    proc = run_script("libero_yaml.py", "--smoke", timeout=120)
    assert proc.returncode == 0, proc.stderr
    generated, committed = yaml.safe_load(proc.stdout), benchmark_file("libero.yaml")
    assert len(generated["tasks"]) == 10
    assert generated["tasks"] == [task for task in committed["tasks"] if task["split"] == "spatial"]
    assert {k: v for k, v in generated.items() if k != "tasks"} == {k: v for k, v in committed.items() if k != "tasks"}


def test_bench_serving_smoke() -> None:
    """Real servers in child processes, real clients in forked processes: the table and the checks print."""
    pytest.importorskip("torch")
    proc = run_script("bench_serving.py", "--smoke")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2
    assert "round trip, MIKASA-sized observation" in proc.stdout
    assert sum(line.startswith(("PASS", "MISS")) for line in proc.stdout.splitlines()) == 4


def test_bench_protocols_smoke() -> None:
    """Each wire protocol's server and client, and vla-eval's own server, serve the same policy."""
    pytest.importorskip("torch")
    pytest.importorskip("vla_eval")
    proc = run_script("bench_protocols.py", "--smoke")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [
        line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ") and "| 2 |" in line
    ]
    assert rows == [
        "vlaeval (ws://)",
        "openpi (openpi://)",
        "vla-eval (vla-eval://)",
        "vla-eval's own server (vla-eval://)",
    ]
