"""The JSON of every file this package writes and reads back (episode logs, run files, episode
lists, baselines): standard JSON whose numbers are finite and whose nesting is shallow.

Python's ``json`` writes ``NaN`` and ``Infinity`` unless told not to, reads ``1e999`` as infinity,
and recurses once per level of nesting, so 100,000 ``[`` are a ``RecursionError`` wherever they
are read. A file may come from someone else: ``loads`` refuses all three with a ``ValueError``
saying which, and ``dumps`` never writes what ``loads`` would refuse; ``read_regular`` reads its
bytes bounded, never waiting on a pipe or reading a device forever. This module imports nothing
of the package, so every floor may read through it.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64
"""The deepest nesting of lists and objects a file may hold. This package's own are a few levels
deep (a policy's configuration adds its own); Python's parser, and whatever reads its result next,
recurse once per level."""


def loads(text: str | bytes) -> Any:
    """``text`` as JSON, or ``ValueError`` saying why not: not JSON, a number that is not finite
    (``NaN``, ``Infinity``, or a literal beyond the float range such as ``1e999``), or nesting
    deeper than ``MAX_DEPTH``."""
    try:
        data = _DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)
    except RecursionError:
        raise ValueError(_TOO_DEEP) from None
    if _brackets(text) > MAX_DEPTH:  # fewer cannot nest deeper: the walk is for the rare file with many
        _check_depth(data)
    return data


def dumps(payload: Any, *, indent: int | None = None) -> str:
    """``payload`` as JSON that ``loads`` reads back, or ``ValueError`` saying why it cannot be
    (a number that is not finite, an int too long for JSON, nesting deeper than ``MAX_DEPTH``)."""
    _check_depth(payload)  # json.dumps itself refuses non-finite floats and ints too long to write
    return json.dumps(payload, indent=indent, allow_nan=False)


_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is beyond the range of a float")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)
"""One decoder for every read: ``json.loads`` with hooks would build a new one per call (per log line)."""


def _brackets(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{")
    return text.count("[") + text.count("{")


def _check_depth(data: Any) -> None:
    """``ValueError`` when ``data`` nests deeper than ``MAX_DEPTH``; level by level, not recursively."""
    level, depth = [data], 0
    while containers := [node for node in level if isinstance(node, (dict, list))]:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(_TOO_DEEP)
        level = [child for node in containers for child in (node.values() if isinstance(node, dict) else node)]


class NotRegularFile(ValueError):
    """What ``read_regular`` was given is a directory, a pipe, a device...: nothing was read."""

    def __init__(self, directory: bool) -> None:
        super().__init__("not a regular file")
        self.directory = directory


class TooLarge(ValueError):
    """The file holds more than ``read_regular``'s bound."""


def read_regular(path: Path, max_bytes: int, *, follow_links: bool = True) -> bytes:
    """A regular file's bytes, at most ``max_bytes``: ``NotRegularFile`` for anything else (checked on
    the open descriptor: a pipe's blocking open would wait for a writer, ``/dev/zero`` never ends),
    ``TooLarge`` past the bound, ``OSError`` from the open (a link, with ``follow_links`` false)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    descriptor = os.open(path, flags)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotRegularFile(directory=stat.S_ISDIR(mode))
    with open(descriptor, "rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"larger than {max_bytes >> 20} MiB")
    return data
