"""What a server's process on this host is doing, from its pid: gone, stopped, or running.

A stopped process (SIGSTOP, a debugger) still completes TCP handshakes in the kernel, so a
client would wait out every timeout; its state says at once that nothing will answer.
"""

from __future__ import annotations

import os


def running(pid: int) -> bool:
    """Whether the process exists (a stopped one included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def stopped(pid: int) -> bool:
    """Whether the process is stopped (state T or t in ``/proc``); False where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return False
    return bool(fields) and fields[0] in (b"T", b"t")
