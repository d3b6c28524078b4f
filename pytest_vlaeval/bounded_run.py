"""A program the user named (an interpreter, a benchmark's render check) run for what it says,
with that kept to a bound.

``subprocess.run(capture_output=True)`` keeps all a program writes: one that prints without end
(``yes``) fills the memory before any timeout. Here each stream is kept up to ``OUTPUT_LIMIT``
bytes, and a program that writes more is stopped with everything it started (its own process
group), since it is not the program that was meant.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass

OUTPUT_LIMIT = 64 * 1024
"""Bytes kept of each stream of an interpreter asked about itself: far above what one answers (its
``sys.path`` as JSON, its version), far below what would cost memory."""
STACK_OUTPUT_LIMIT = 1024 * 1024
"""Bytes kept of each stream of a program that imports a simulator stack (a render check, an
install's import check): their banners and warnings may run long."""


@dataclass(frozen=True)
class Finished:
    """What a program said (decoded, undecodable bytes replaced) and how it ended."""

    returncode: int
    stdout: str
    stderr: str
    overflowed: bool
    """It wrote more than the limit on a stream and was stopped there."""
    limit: int

    @property
    def stopped(self) -> str:
        """Why it was stopped, for a message: ``wrote over 64 KiB and was stopped``."""
        unit, size = next((u, s) for u, s in (("MiB", 2**20), ("KiB", 2**10), ("bytes", 1)) if self.limit % s == 0)
        return f"wrote over {self.limit // size} {unit} and was stopped"


def run_bounded(argv: Sequence[str], timeout: float | None, limit: int = OUTPUT_LIMIT) -> Finished:
    """Run ``argv`` to its end, keeping at most ``limit`` bytes of each of its streams; ``OSError``
    when it does not start, ``subprocess.TimeoutExpired`` when it runs past ``timeout`` seconds
    (None: no limit; it is stopped then, as when it writes past ``limit``)."""
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = None if timeout is None else time.monotonic() + timeout
    kept = (bytearray(), bytearray())
    overflowed = False
    try:
        with selectors.DefaultSelector() as selector:
            for stream, data in zip((process.stdout, process.stderr), kept, strict=True):
                selector.register(stream, selectors.EVENT_READ, data)
            while selector.get_map() and not overflowed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout or 0)
                for key, _ in selector.select(remaining):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    key.data.extend(chunk)
                    overflowed = overflowed or len(key.data) > limit
        if overflowed:
            _stop(process)
        returncode = process.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        _stop(process)
        raise subprocess.TimeoutExpired(argv, timeout or 0) from None
    except BaseException:  # Ctrl-C too: nothing of it outlives the call
        _stop(process)
        raise
    finally:
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    stdout, stderr = (bytes(data[:limit]).decode("utf-8", "replace") for data in kept)
    return Finished(returncode, stdout, stderr, overflowed, limit)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the program and whatever it started (a script's ``yes``), and reap it."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    process.wait()
