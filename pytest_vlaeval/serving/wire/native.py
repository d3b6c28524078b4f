"""The wire format between evaluation clients and a policy server, in one place.

Transport: a websocket. Every message is one binary frame holding one msgpack map. numpy
arrays travel as the map ``{b"__ndarray__": True, b"data": <raw bytes, C order>, b"dtype":
<dtype.str, e.g. "|u1", "<f4">, b"shape": [...]}`` and numpy scalars as ``{b"__npgeneric__":
True, b"data": <value>, b"dtype": <dtype.str>}``, the openpi convention, so the same frames are
understood by openpi tools. Only bool, integer and float dtypes are accepted. Nothing is ever
unpickled.

Protocol ``vlaeval``, version 1. Every map has a ``type``.

On connect the server sends ``metadata``: ``protocol``, ``version``, ``model`` (``name``,
``config``), ``chunk_size`` (K), ``action_dim`` (D), ``batched``, ``max_message_bytes``,
``admission_timeout_s``, ``idle_timeout_s`` and ``shared_memory`` (whether a client on this
machine may send its arrays through shared memory, ``shared_frames.py``). A client checks
protocol, version and action_dim.

=========================================================== ================================
client -> server                                             server -> client
=========================================================== ================================
``open`` episode, task, seed, instruction, episode_index,    ``opened`` episode
max_steps
``act`` episode, step, obs (map of arrays and strings)       ``actions`` episode, step,
                                                             actions (float32, k x D, 1<=k<=K)
``close`` episode                                            ``closed`` episode
``attach`` segment, nonce (``shared_frames.py``)             ``attached`` segment
anything that cannot be served                               ``error`` episode (or nil), code,
                                                             message, detail (or nil)
=========================================================== ================================

Rules:

- ``episode`` is an id the client chooses (unique, e.g. a uuid4 hex), valid on the connection
  that opened it: another connection may use the same id, and no reply says whether one does.
  Closing the connection closes its episodes.
- ``step`` is the simulator step the observation was taken at; it never goes back within an
  episode (a request that failed may be repeated with the same step).
- At most one ``act`` per episode may be outstanding; a second one gets ``busy``.
- ``open`` waits while the server already holds its maximum of open episodes, and fails with
  ``admission`` after ``admission_timeout_s``. An episode with no request for
  ``idle_timeout_s`` is closed by the server; later requests for it get ``unknown_episode``.
- An array may also travel as a header naming where it lies in the connection's attached
  shared-memory segment (``{"__shm_ndarray__": True, "offset", "dtype", "shape"}``, see
  ``shared_frames.py``); a frame with one on a connection without a segment is a ``bad_request``.
- Error codes: ``bad_request`` (not msgpack, not a map, unknown type, missing or ill-typed
  field, a value out of range such as a negative seed or step, step going back, duplicate id,
  a segment that cannot be attached, an array header out of its segment's bounds), ``unknown_episode``, ``busy``, ``admission``,
  ``policy`` (the policy raised or returned an invalid chunk; ``detail`` holds its traceback),
  ``server`` (the server itself failed on the request; its log holds the traceback).
  After an error reply the connection stays usable.
- An ``act``'s ``obs`` maps names to arrays, strings, numbers or such maps, nested as the
  benchmark's env gives it: at most 1024 names at all its levels and ``max_message_bytes`` of
  values together (inline or in shared memory); past that, a ``bad_request``.
- A frame larger than ``max_message_bytes`` closes its connection with close code 1009.

HTTP on the same port: ``GET /healthz`` answers 200 with JSON counters once the policy is
loaded, 503 before. When the server has a token, every websocket handshake must carry one
``Authorization: Bearer <token>`` (or openpi's ``Api-Key <token>``) header, else HTTP 401 (HTTP
400 for more than one).

With ``--protocol openpi`` the server speaks openpi's protocol instead: metadata map on
connect, then each binary frame is an observation map and each reply a map holding
``actions``; a failed request is answered with a text frame. It has no episode boundary, so
that mode is stateless: every request is served as a fresh one-step episode. One frame is no
observation: ``{OPENPI_ATTACH: {"segment", "nonce"}}``, our own client's request to attach a
shared-memory segment, answered ``{"attached": segment}`` (or a text frame).
"""

from __future__ import annotations

import functools
import math
import traceback
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

PROTOCOL = "vlaeval"
VERSION = 1

BAD_REQUEST = "bad_request"
UNKNOWN_EPISODE = "unknown_episode"
BUSY = "busy"
ADMISSION = "admission"
POLICY = "policy"
SERVER = "server"

ARRAY_KINDS = "biuf"
"""The numpy dtype kinds an array may have on any protocol: bool, integer and float."""
OPENPI_ATTACH = "vlaeval_attach"
"""Under ``--protocol openpi``, the key of the frame asking to attach a shared-memory segment."""
SHARED_ARRAY = "__shm_ndarray__"
"""The key marking an array header that points into the connection's shared-memory segment."""

SharedArrays = Callable[[dict[Any, Any]], np.ndarray]
"""Reads one frame's array headers from its connection's segment (``shared_frames.FrameArrays``)."""

REQUEST_FIELDS: dict[str, dict[str, type]] = {
    "open": {"episode": str, "task": str, "seed": int, "instruction": str, "episode_index": int, "max_steps": int},
    "act": {"episode": str, "step": int, "obs": dict},
    "close": {"episode": str},
    "attach": {"segment": str, "nonce": bytes},
}
REPLY_FIELDS: dict[str, dict[str, type]] = {
    "metadata": {"protocol": str, "version": int, "chunk_size": int, "action_dim": int, "max_message_bytes": int},
    "opened": {"episode": str},
    "actions": {"episode": str, "step": int, "actions": np.ndarray},
    "closed": {"episode": str},
    "attached": {"segment": str},
    "error": {"code": str, "message": str},
}


_OBS_VALUES = (np.ndarray, np.generic, str, int, float, bool)
_OBS_KINDS = "a map of names to arrays, strings, numbers or such maps"
MAX_OBS_ENTRIES = 1024
"""The most names an observation holds at all its levels together (its arrays, strings, numbers and
maps): an observation is bounded by what it holds, not by its shape, so a benchmark's nests as its
env gives it (ALOHA's cameras in a ``pixels`` map, LeRobot's LIBERO ``robot_state`` three maps deep)."""
MAX_OBS_NESTING = 32
"""Not a shape any benchmark is held to, only a guard against a frame nested to exhaust whoever walks it."""
_NUMBER_BYTES = 8


def observation_problem(obs: dict[Any, Any], max_bytes: int) -> str | None:
    """None when ``obs`` is an observation a policy may be handed: names mapped to arrays, strings,
    numbers or such maps, at most ``MAX_OBS_ENTRIES`` names, its values at most ``max_bytes`` bytes
    together (the server's largest frame, inline or in shared memory); else what it must be instead,
    a phrase in one line. Walked without recursion, stopping at the first bound passed."""
    entries = size = 0
    maps: list[tuple[dict[Any, Any], tuple[str, ...]]] = [(obs, ())]
    while maps:
        mapping, path = maps.pop()
        if len(path) >= MAX_OBS_NESTING:
            return f"a map nested at most {MAX_OBS_NESTING} deep, got deeper at {_shown(path)}"
        for key, item in mapping.items():
            if not isinstance(key, str):
                return f"{_OBS_KINDS}, got a key of type {type(key).__name__}" + (f" in {_shown(path)}" if path else "")
            entries += 1
            if entries > MAX_OBS_ENTRIES:
                return f"a map of at most {MAX_OBS_ENTRIES:,} names at all its levels, got more"
            if isinstance(item, dict):
                maps.append((item, (*path, key)))
                continue
            if not isinstance(item, _OBS_VALUES):
                return f"{_OBS_KINDS}, got {type(item).__name__} at {_shown((*path, key))}"
            size += _value_bytes(item)
            if size > max_bytes:
                return f"a map of at most {max_bytes:,} bytes of values (the server's largest frame), got more"
    return None


def _shown(path: tuple[str, ...]) -> str:
    """Where in an observation, quoted and short: its names come from the client."""
    return f"{'.'.join(name[:40] for name in path[:8])!r:.120}"


def _value_bytes(value: Any) -> int:
    if isinstance(value, (np.ndarray, np.generic)):
        return value.nbytes
    return len(value.encode()) if isinstance(value, str) else _NUMBER_BYTES


FIELD_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "episode": (lambda v: 0 < len(v) <= 128, "a non-empty id of at most 128 characters"),
    "task": (lambda v: 0 < len(v) <= 256, "a non-empty name of at most 256 characters"),
    "seed": (lambda v: 0 <= v < 2**64, "an int in [0, 2**64)"),
    "episode_index": (lambda v: v >= 0, "an int >= 0"),
    "max_steps": (lambda v: v >= 1, "an int >= 1"),
    "step": (lambda v: v >= 0, "an int >= 0"),
}
"""What a well-typed field must also satisfy, checked at the boundary so no handler meets a value it
cannot use (a negative seed, for one, has no episode RNG). An observation's bound is the server's
largest frame, so its handler checks it (``observation_problem``)."""


class ProtocolError(Exception):
    """A frame that is not a valid message of this protocol."""


def pack(message: dict[str, Any]) -> bytes:
    """Encode a message; numpy arrays and scalars become the openpi array maps."""
    return msgpack.packb(message, default=_encode_numpy, use_bin_type=True)


def unpack(frame: bytes | str, shared: SharedArrays | None = None) -> dict[str, Any]:
    """Decode one frame into a map, refusing anything but a msgpack map of plain values and arrays;
    array headers are read through ``shared`` (None: the frame may hold none)."""
    message = unpack_msgpack(frame, functools.partial(_decode_numpy, shared=shared))
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a msgpack map, got {type(message).__name__}")
    return message


def unpack_msgpack(frame: bytes | str, decode: Callable[[dict[Any, Any]], Any]) -> Any:
    """A binary frame's msgpack value, maps passed through ``decode`` (each protocol's arrays);
    ``ProtocolError`` for a text frame or bytes that are not msgpack. Shared by both msgpack protocols."""
    if not isinstance(frame, bytes):
        raise ProtocolError("expected a binary frame holding a msgpack map, got a text frame")
    try:
        return msgpack.unpackb(frame, object_hook=decode, raw=False)
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError(f"not a msgpack message: {type(exc).__name__}: {exc}") from None


def parse(
    frame: bytes | str, fields: dict[str, dict[str, type]], shared: SharedArrays | None = None
) -> tuple[str, dict[str, Any]]:
    """Decode a frame and check its type and typed fields against a schema table."""
    message = unpack(frame, shared)
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in fields:  # a list or map is no type, and cannot be looked up
        raise ProtocolError(f"unknown message type {kind!r:.200}; expected one of {', '.join(fields)}")
    check_fields(kind, message, fields[kind])
    return kind, message


def check_fields(kind: str, message: dict[str, Any], fields: dict[str, type]) -> None:
    """Check that ``message`` has each of ``fields`` with its type and in its range (``FIELD_VALUES``);
    ``ProtocolError`` naming the first that is not. Every protocol's requests are checked here."""
    for name, expected in fields.items():
        value = message.get(name)
        # bool is an int subclass in Python; a seed or step of True is a client bug.
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ProtocolError(
                f"{kind!r} needs {name!r} as {expected.__name__}, got {type(value).__name__ if name in message else 'nothing'}"
            )
        valid, meaning = FIELD_VALUES.get(name, (None, ""))
        if valid is not None and not valid(value):
            shown = repr(value) if not isinstance(value, dict) else f"a map with keys {sorted(map(str, value))[:8]}"
            raise ProtocolError(f"{kind!r} needs {name!r} as {meaning}, got {shown[:200]}")


def error(code: str, message: str, episode: str | None = None, detail: str | None = None) -> bytes:
    return pack({"type": "error", "code": code, "message": message, "episode": episode, "detail": detail})


def remote_traceback(exc: BaseException) -> str | None:
    """The traceback of what caused ``exc`` (a policy's own exception), sent as an error's detail."""
    cause = exc.__cause__
    return "".join(traceback.format_exception(cause)) if cause is not None else None


def _encode_numpy(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind not in ARRAY_KINDS:
        raise TypeError(f"cannot send numpy dtype {value.dtype} (only bool, integer and float)")
    if isinstance(value, np.ndarray):
        return {b"__ndarray__": True, b"data": value.tobytes(), b"dtype": value.dtype.str, b"shape": value.shape}
    if isinstance(value, np.generic):
        return {b"__npgeneric__": True, b"data": value.item(), b"dtype": value.dtype.str}
    raise TypeError(f"cannot send {type(value).__name__}")


def _decode_numpy(obj: dict[Any, Any], shared: SharedArrays | None) -> Any:
    if b"__ndarray__" in obj:
        dtype = array_dtype(obj.get(b"dtype"))
        shape = array_shape(obj.get(b"shape"))
        data = obj.get(b"data")
        if not isinstance(data, bytes) or len(data) != math.prod(shape) * dtype.itemsize:
            size = len(data) if isinstance(data, bytes) else type(data).__name__
            raise ProtocolError(f"array data of {size} bytes does not match shape {tuple(shape)} of {dtype}")
        # A writable copy: policies may modify their input, and torch refuses read-only buffers quietly.
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if SHARED_ARRAY in obj:
        return shared_array(obj, shared)
    if b"__npgeneric__" in obj:
        dtype = array_dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"bad numpy scalar of {dtype}: {exc}") from None
    return obj


def shared_array(header: dict[Any, Any], shared: SharedArrays | None) -> np.ndarray:
    """The array a shared-memory header points to, read through ``shared``."""
    if shared is None:
        raise ProtocolError("an array in shared memory, but no shared-memory segment is attached to this connection")
    return shared(header)


def array_shape(value: Any) -> list[int]:
    """An array header's shape: a list of non-negative ints (every protocol's headers are checked here)."""
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value
    ):
        raise ProtocolError(f"array shape must be a list of non-negative ints, got {value!r:.200}")
    return list(value)


def array_dtype(value: Any) -> np.dtype:
    """An array header's dtype: bool, integer or float only (no objects, so nothing is ever unpickled)."""
    try:
        dtype = np.dtype(value) if isinstance(value, str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in ARRAY_KINDS:
        raise ProtocolError(f"array dtype must be bool, integer or float, got {value!r}")
    return dtype
