"""A benchmark's render check (its ``env.preflight`` module), run in a throwaway process."""

from __future__ import annotations

import subprocess
import sys


def preflight_problem(module: str, render: str) -> str | None:
    """Run ``python -m MODULE RENDER``; None when it passes, else its last line of output."""
    check = subprocess.run([sys.executable, "-m", module, render], capture_output=True, text=True, timeout=300)
    if check.returncode == 0:
        return None
    lines = (check.stdout.strip() or check.stderr.strip() or "no output").splitlines()
    return lines[-1]
