"""``bounded_run``: a program the user named is read for what it says, never past a bound, and
stopped with everything it started when it says too much or runs too long."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_vlaeval.bounded_run import run_bounded


def test_what_a_program_says_is_kept_whole_within_the_bound() -> None:
    done = run_bounded(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 60
    )
    assert (done.returncode, done.stdout, done.stderr, done.overflowed) == (3, "out\n", "err\n", False)


def test_a_program_writing_past_the_bound_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """The shell's ``yes`` holds the pipe too: it is stopped with the shell, not left writing."""
    started = time.monotonic()
    done = run_bounded(["sh", "-c", "yes >&2 & wait"], 60, limit=1000)
    assert done.overflowed and len(done.stderr) == 1000 and done.stopped == "wrote over 1000 bytes and was stopped"
    assert time.monotonic() - started < 10


def test_a_program_past_its_time_is_stopped() -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded(["sh", "-c", "sleep 60 & wait"], 0.5)
    assert time.monotonic() - started < 10


def test_an_executable_that_prints_without_end_is_no_python_for_an_install(tmp_path: Path) -> None:
    """``vlaeval install --python PATH`` asks it its version first; asked in a process with 1 GiB of
    data at most, which reading all it says would pass within seconds."""
    script = tmp_path / "yes.sh"
    script.write_text("#!/bin/sh\nexec yes\n")
    script.chmod(0o755)
    ask = (
        f"from pytest_vlaeval.install.interpreters import python_version; print(python_version({str(script)!r}, True))"
    )
    started = time.monotonic()
    asked = subprocess.run(
        ["sh", "-c", f"ulimit -d {2**20}; exec {shlex.join([sys.executable, '-c', ask])}"],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert (asked.returncode, asked.stdout) == (0, "None\n"), asked.stderr
    assert time.monotonic() - started < 30
