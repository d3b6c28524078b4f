"""A benchmark's render check (its ``env.preflight`` module), run in a throwaway process."""

from __future__ import annotations

import subprocess
import sys


def preflight_problem(module: str, render: str, python: str = sys.executable) -> str | None:
    """Run ``python -m MODULE RENDER`` (in the benchmark's own interpreter where it has one); None
    when it passes, else its last line of output."""
    check = subprocess.run([python, "-m", module, render], capture_output=True, text=True, timeout=300)
    if check.returncode == 0:
        return None
    lines = (check.stdout.strip() or check.stderr.strip() or "no output").splitlines()
    return lines[-1]
