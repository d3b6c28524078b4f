"""A server's log stays readable when one fault repeats: the same line (same logger, level,
message template and exception type) goes out once per window, and the next one that goes
out says how many were held back; what is still held at shutdown is counted in one line each.

A server out of file descriptors meets the same accept error thousands of times a second;
without this its log grows by megabytes of identical tracebacks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

Key = tuple[str, int, str, str]

MAX_KINDS = 1000
"""Distinct lines remembered at once; past it the oldest half is forgotten (and may pass again)."""


class RepeatedLines(logging.Filter):
    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self._seen: dict[Key, list[float]] = {}
        """Per kind of line: when one last went out, and how many were held back since."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc_type = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        key = (record.name, record.levelno, str(record.msg), exc_type)
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.window_s:
            seen[1] += 1
            return False
        if seen is not None and seen[1]:
            record.msg = f"{record.msg} [{int(seen[1])} more like it held back in the last {self.window_s:g} s]"
        if len(self._seen) >= MAX_KINDS:
            for old in list(self._seen)[: MAX_KINDS // 2]:
                del self._seen[old]
        self._seen[key] = [now, 0]
        return True

    def report_held(self, log: logging.Logger) -> None:
        """One line per kind still held back (called once the server stops)."""
        seen, self._seen = self._seen, {}  # the lines below pass through this filter too
        for (name, _, message, exc_type), (_, held) in seen.items():
            if held:
                what = f"{message!r}" + (f" ({exc_type})" if exc_type else "")
                log.warning("%d more lines like %s from %s were held back", held, what, name)
