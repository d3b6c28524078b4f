"""``scripts/bench_controller.py`` is code: its help and its smoke mode run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "scripts" / "bench_controller.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_help_names_the_options() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    assert all(option in done.stdout for option in ("--sizes", "--workers", "--where", "--smoke"))


def test_smoke_measures_evaluations_beside_a_plain_test() -> None:
    done = run("--smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("serial")]
    assert [row[1] for row in rows] == ["8", "16"], done.stdout
    for row in rows:
        assert all(float(value) > 0 for value in row[2:6]), row
        assert row[6].endswith("x") and row[7].endswith("x"), row
    assert rows[0][7] == "1.00x"  # each size against the first
