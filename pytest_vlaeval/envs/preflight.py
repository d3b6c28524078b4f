"""A benchmark's render check (its ``env.preflight`` module), run in a throwaway process."""

from __future__ import annotations

import sys

from pytest_vlaeval.bounded_run import STACK_OUTPUT_LIMIT, run_bounded


def preflight_problem(module: str, render: str, python: str = sys.executable) -> str | None:
    """Run ``python -m MODULE RENDER`` (in the benchmark's own interpreter where it has one); None
    when it passes, else its last line of output."""
    check = run_bounded([python, "-m", module, render], timeout=300, limit=STACK_OUTPUT_LIMIT)
    if check.returncode == 0:
        return None
    if check.overflowed:
        return f"python -m {module} {check.stopped}"
    lines = (check.stdout.strip() or check.stderr.strip() or "no output").splitlines()
    return lines[-1]
