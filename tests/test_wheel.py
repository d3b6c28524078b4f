"""The package as a user gets it: build the sdist and the wheel from it, install the wheel into a
fresh virtual env (the core dependencies come from the package index), and run from there, far
from this checkout, so every file the plugin reads at run time must come from the wheel."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the built wheel and its core dependencies; returns its python."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheels[0])],
        check=True,
        capture_output=True,
    )
    return python


def run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_a_fake_benchmark_session_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "fake.yaml").write_text((HERE / "fake.yaml").read_text())
    (tmp_path / "fake_env.py").write_text((HERE / "fake_env.py").read_text())
    where = run(installed, "-c", "import pytest_vlaeval; print(pytest_vlaeval.__file__)", cwd=tmp_path)
    assert str(installed.parent.parent) in where.stdout, where.stdout + where.stderr
    session = run(
        installed, "-m", "pytest", "--benchmark=fake.yaml:short", "-n", "2", "-p", "no:cacheprovider", cwd=tmp_path
    )
    assert session.returncode in (0, 1), session.stdout[-3000:] + session.stderr[-3000:]
    summary = json.loads(next((tmp_path / "results").glob("*/summary.json")).read_text())
    assert summary["n_completed"] == summary["n_expected"] == 6 and summary["n_errors"] == 0
    # No chart extra in this env: no summary.png, and the session says nothing of one.
    assert not list((tmp_path / "results").glob("*/summary.png"))


def test_the_built_in_benchmarks_and_the_installer_pins_come_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    collected = run(
        installed, "-m", "pytest", "--benchmark=libero:spatial", "--co", "-q", "-p", "no:cacheprovider", cwd=tmp_path
    )
    assert "libero-spatial::" in collected.stdout, collected.stdout[-3000:] + collected.stderr[-3000:]
    plan = run(installed, "-m", "pytest_vlaeval", "install", "libero", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    shipped = next(line.split()[-1] for line in plan.stdout.splitlines() if "--require-hashes" in line)
    assert shipped.startswith(str(installed.parent.parent)) and Path(shipped).is_file()
    for command in ("install", "install-assets", "serve", "merge"):
        assert (
            subprocess.run([str(installed.parent / "vlaeval"), command, "--help"], capture_output=True).returncode == 0
        )
