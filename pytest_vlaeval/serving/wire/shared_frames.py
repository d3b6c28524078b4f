"""Observation arrays through shared memory, between a client and a server on one machine.

On the wire an array's bytes ride in its frame: the client copies them into the frame, the
websocket masks and carries them, the server copies them out again. A client on the server's
machine instead writes them into a shared-memory segment of its own and sends in the frame only
a small header per array. Every protocol's client and server agree on it the same way:

1. The server says it can (``shared_memory: true`` in its metadata; in its ``hello``'s
   ``capabilities`` for vla-eval's protocol). A client whose server's address is loopback then
2. creates its segment: the file ``/dev/shm/vlaeval-frames-<pid>-<32 hex digits>``, mode 0600,
   whose first 16 bytes are a random nonce, and asks the server to attach it, giving the name
   and the nonce (the protocol's own request: ``attach``, openpi's ``vlaeval_attach`` map, a
   second ``hello``).
3. The server opens it read-only, following no link and never blocking (a FIFO is refused, not
   waited on), and keeps it only when it is a regular file of the server's own user, private
   (no group or other permission), with one link, holding the nonce. It answers that it holds
   it, or with an error reply, and serves on either way.
4. The client unlinks the name whatever the answer: from then on only the two open descriptors
   hold the memory, which the system frees when both ends have closed, however they end (SIGKILL
   included). A client killed between creating and unlinking leaves a file named after its pid,
   which the next client to create a segment removes once that process is gone.

A client writes each observation's arrays into its segment one after another from
``DATA_START`` (one ``pwritev``) and puts in each one's place the header ``{"__shm_ndarray__":
True, "offset": int, "dtype": str, "shape": [int, ...]}``. A client has one request in flight
and the server reads a frame's arrays before it answers it, so every frame reuses that one region.
The server reads each array into a fresh array of its own with one ``preadv``: one copy, nothing
the client does afterwards can change what the policy sees, and a segment the client shrinks
gives a short read (an error reply), never a fault. A header is checked as an inline array is
(bool, integer or float dtype, a shape of non-negative ints) and against its frame's budget: the
arrays one frame reads from shared memory total at most the server's largest frame
(``--max-message-bytes``), as they would on the wire. A header names no file, only a place in the
segment its connection attached.
"""

from __future__ import annotations

import contextlib
import hmac
import math
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

import numpy as np

from pytest_vlaeval.serving.process import running
from pytest_vlaeval.serving.wire.native import ARRAY_KINDS, SHARED_ARRAY, ProtocolError, array_dtype, array_shape

DIRECTORY = Path("/dev/shm")
PREFIX = "vlaeval-frames-"
NAME = re.compile(r"vlaeval-frames-([0-9]{1,10})-[0-9a-f]{32}")
"""A segment's name: the prefix, its creator's pid, 128 random bits. Nothing else is ever opened."""
NONCE_BYTES = 16
DATA_START = 64
"""Where a frame's arrays begin, after the nonce."""
MAX_DIMENSIONS = 32


def available() -> bool:
    """Whether this system has what the fast path needs (a ``/dev/shm`` and positioned vector I/O)."""
    return hasattr(os, "preadv") and hasattr(os, "pwritev") and DIRECTORY.is_dir()


# -- the client's side --------------------------------------------------------------------------


class SegmentWriter:
    """A client's segment: created private, written with ``pwritev``, its name unlinked once offered."""

    def __init__(self, fd: int, name: str, nonce: bytes) -> None:
        self._fd = fd
        self.name = name
        self.nonce = nonce

    @classmethod
    def create(cls) -> SegmentWriter | None:
        """A new segment holding its nonce, or None where none can be made (the wire then carries the arrays)."""
        if not available():
            return None
        _remove_stale_segments()
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(16)}"
        nonce = secrets.token_bytes(NONCE_BYTES)
        path = DIRECTORY / name
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        writer = cls(fd, name, nonce)
        try:
            if os.pwrite(fd, nonce, 0) != NONCE_BYTES:
                raise OSError("short write")
        except OSError:
            writer.close()
            return None
        return writer

    @property
    def request(self) -> dict[str, Any]:
        """What an attach request carries: the segment's name and its nonce."""
        return {"segment": self.name, "nonce": self.nonce}

    def unlink(self) -> None:
        """Remove the name; the memory stays while a descriptor holds it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(DIRECTORY / self.name)

    def place(self, value: Any) -> tuple[Any, int]:
        """``value`` with each array in it (maps nest) written to the segment and replaced by its
        header, and the bytes written. Raises ``OSError`` when the segment cannot take them."""
        buffers: list[np.ndarray] = []
        offset = DATA_START

        def swap(item: Any) -> Any:
            nonlocal offset
            if isinstance(item, dict):
                return {key: swap(inner) for key, inner in item.items()}
            if not isinstance(item, np.ndarray) or item.dtype.kind not in ARRAY_KINDS:
                return item  # the wire's encoder sends it, or refuses it as it always has
            header = {SHARED_ARRAY: True, "offset": offset, "dtype": item.dtype.str, "shape": list(item.shape)}
            buffers.append(np.ascontiguousarray(item))
            offset += item.nbytes
            return header

        placed = swap(value)
        size = offset - DATA_START
        if buffers and os.pwritev(self._fd, buffers, DATA_START) != size:
            raise OSError(f"short write of {size} bytes to shared-memory segment {self.name}")
        return placed, size

    def close(self) -> None:
        self.unlink()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _remove_stale_segments() -> None:
    """Remove this user's segments whose creator is gone (killed between creating and unlinking)."""
    with contextlib.suppress(OSError), os.scandir(DIRECTORY) as entries:
        for entry in entries:
            match = NAME.fullmatch(entry.name)
            if match is None or running(int(match[1])):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.geteuid():
                    os.unlink(entry.path)


# -- the server's side --------------------------------------------------------------------------


class SharedSegment:
    """A client's segment as its server holds it: opened read-only once, read only within bounds."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self.name = name

    @classmethod
    def attach(cls, name: Any, nonce: Any) -> SharedSegment:
        """Open the segment an attach request names; ``ProtocolError`` saying why it cannot be held."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ProtocolError(
                f"a shared-memory segment is named {PREFIX}PID-HEX (32 hex digits) in {DIRECTORY}, got {name!r:.100}"
            )
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise ProtocolError(f"the nonce of shared-memory segment {name} must be {NONCE_BYTES} bytes")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(DIRECTORY / name, flags)
        except OSError as exc:
            raise ProtocolError(f"cannot open shared-memory segment {name}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if (
                not stat.S_ISREG(info.st_mode)
                or info.st_nlink != 1
                or info.st_uid != os.geteuid()
                or info.st_mode & 0o077
            ):
                raise ProtocolError(
                    f"shared-memory segment {name} is not a private file of this server's user with one link"
                )
            if not hmac.compare_digest(os.pread(fd, NONCE_BYTES, 0), nonce):
                raise ProtocolError(f"shared-memory segment {name} does not hold the nonce given for it")
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, name)

    def read(self, header: dict[Any, Any], budget: FrameArrays) -> np.ndarray:
        """The array ``header`` points to, as a fresh array of the server's own."""
        dtype = array_dtype(header.get("dtype"))
        shape = array_shape(header.get("shape"))
        offset = header.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool) or not DATA_START <= offset < 2**62:
            raise ProtocolError(
                f"an array's offset in shared memory must be an int >= {DATA_START}, got {offset!r:.50}"
            )
        if len(shape) > MAX_DIMENSIONS:
            raise ProtocolError(f"an array has at most {MAX_DIMENSIONS} dimensions, got {len(shape)}")
        size = math.prod(shape) * dtype.itemsize
        budget.take(size)
        array = np.empty(shape, dtype)
        if size and os.preadv(self._fd, [array.reshape(-1).view(np.uint8)], offset) != size:
            raise ProtocolError(
                f"shared-memory segment {self.name} ends before the {size:,} bytes at offset {offset:,} "
                "an array header points to"
            )
        return array

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


class FrameArrays:
    """One frame's reads from its connection's segment: at most ``limit`` bytes in all (the
    largest frame the server accepts), counted."""

    def __init__(self, segment: SharedSegment, limit: int) -> None:
        self.segment = segment
        self.limit = self.left = limit
        self.count = 0
        """Arrays read: a frame with any came by shared memory."""

    def __call__(self, header: dict[Any, Any]) -> np.ndarray:
        array = self.segment.read(header, self)
        self.count += 1
        return array

    def take(self, size: int) -> None:
        if size > self.left:
            raise ProtocolError(
                f"the arrays of this frame in shared memory exceed {self.limit:,} bytes (the largest frame accepted)"
            )
        self.left -= size
