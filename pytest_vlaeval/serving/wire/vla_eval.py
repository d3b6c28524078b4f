"""vla-eval's model-server protocol (version 1), in one place: frames, arrays, images, observations.

This is the protocol of allenai's vla-evaluation-harness (``vla-eval``), spoken by its model
servers. Transport: a websocket; every message is one binary frame holding a msgpack map
``{"type", "payload", "seq", "timestamp"}``. Types: ``hello`` (both ways, first), ``episode_start``
and ``episode_end`` (harness -> server, no reply), ``observation`` (harness -> server) answered by
one ``action`` carrying the observation's ``seq``, and ``error`` (``payload["error"]``, a string).

numpy arrays travel as maps ``{"__ndarray__": True, "data": <raw bytes>, "dtype": <dtype.str>,
"shape": [...]}``; HWC uint8 images may instead travel as ``{"__image__": True, "format":
"raw"|"png"|"jpeg", "data", "shape"[, "dtype"]}``. Only bool, integer and float dtypes are
accepted, and nothing is ever unpickled. A compressed image is opened only as the format it
names, and its declared size is checked before it is decoded: the images of one frame may decode
to at most ``IMAGE_BYTES_PER_FRAME_BYTE`` times the connection's frame limit (a PNG of a few
hundred KB can declare gigabytes). Between our own client and server on one machine, an array
may also be a shared-memory header (``shared_frames.py``), once the client's second ``hello``
(``shared_memory``: the segment's name and nonce) was answered with a ``hello`` holding
``attached``.

Observations use vla-eval's convention: ``images`` (camera name -> HWC image), ``state`` (the
proprio vector) and ``task_description``. ``to_wire_observation`` and ``from_wire_observation``
map this package's policy view (``rgb`` cameras stacked on channels, ``proprio``, ``instruction``)
to it and back, exactly.
"""

from __future__ import annotations

import functools
import io
import math
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np

from pytest_vlaeval.serving.wire.native import (
    ARRAY_KINDS,
    SHARED_ARRAY,
    ProtocolError,
    SharedArrays,
    array_dtype,
    array_shape,
    shared_array,
    unpack_msgpack,
)

VERSION = 1
KINDS = ("hello", "observation", "action", "episode_start", "episode_end", "error")
IMAGE_FORMATS = ("raw", "png", "jpeg")
CAMERAS = ("base_camera", "hand_camera")
"""Names of the cameras stacked in ``rgb`` (3 channels each), in order, as ManiSkill names them."""
CAMERA_CHANNELS = 3
IMAGE_BYTES_PER_FRAME_BYTE = 8
"""What the compressed images of one frame may decode to, in multiples of the connection's frame
limit (``--max-message-bytes`` on a server): 64 MiB under the default 8 MiB, room for eight
1080p cameras."""


class FrameError(ProtocolError):
    """A frame refused once its seq is known, so that the error reply can answer it."""

    def __init__(self, message: str, seq: int) -> None:
        super().__init__(message)
        self.seq = seq


def pack_frame(kind: str, payload: dict[str, Any], seq: int) -> bytes:
    return msgpack.packb(
        {"type": kind, "payload": payload, "seq": seq, "timestamp": time.time()},
        default=_encode_array,
        use_bin_type=True,
    )


def error_frame(message: str, seq: int = 0) -> bytes:
    return pack_frame("error", {"error": message}, seq)


def unpack_frame(frame: bytes | str, max_frame_bytes: int) -> tuple[str, dict[str, Any], int]:
    """Decode one frame into (type, payload, seq); raises ``ProtocolError`` saying what is wrong
    (``FrameError``, which has the seq to answer, once the frame's type and seq are known).

    ``max_frame_bytes`` is the largest frame the connection accepts; the frame's compressed images
    may decode to ``IMAGE_BYTES_PER_FRAME_BYTE`` times that, all together. They are decoded last,
    once the frame is known to be a message."""
    kind, payload, seq = read_frame(frame)
    decode_images(payload, seq, max_frame_bytes)
    return kind, payload, seq


def read_frame(frame: bytes | str, shared: SharedArrays | None = None) -> tuple[str, dict[str, Any], int]:
    """``unpack_frame`` but for compressed images, which stay as they came for ``decode_images``
    (a server decodes those off its event loop); array headers are read through ``shared``."""
    message = unpack_msgpack(frame, functools.partial(_decode_array, shared=shared))
    if not isinstance(message, dict) or not {"type", "payload", "seq"} <= message.keys():
        keys = sorted(map(str, message)) if isinstance(message, dict) else type(message).__name__
        raise ProtocolError(f"expected a map with type, payload and seq, got {keys}")
    kind, payload, seq = message["type"], message["payload"], message["seq"]
    if not isinstance(kind, str) or kind not in KINDS:
        raise ProtocolError(f"unknown message type {kind!r:.200}; expected one of {', '.join(KINDS)}")
    if not isinstance(payload, dict) or not isinstance(seq, int) or isinstance(seq, bool):
        raise ProtocolError(f"{kind!r} needs a map payload and an int seq")
    return kind, payload, seq


def holds_compressed_images(payload: dict[str, Any]) -> bool:
    """Whether ``decode_images`` has work to do on this payload."""
    return any(isinstance(value, _CompressedImage) for _, _, value in _nodes(payload))


def decode_images(payload: dict[str, Any], seq: int, max_frame_bytes: int) -> None:
    """Decode every compressed image of a payload in place, within the frame's image budget;
    ``FrameError`` (answering ``seq``) for one that cannot be."""
    budget = _ImageBudget(IMAGE_BYTES_PER_FRAME_BYTE * max_frame_bytes)
    try:
        for node, key, value in _nodes(payload):
            if isinstance(value, _CompressedImage):
                node[key] = _compressed_image(value, budget)
    except ProtocolError as exc:
        raise FrameError(str(exc), seq) from None


def hello_payload(harness_version: str, **fields: Any) -> dict[str, Any]:
    return {"harness_version": harness_version, "protocol_version": VERSION, **fields}


def other_version(payload: dict[str, Any]) -> str | None:
    """The version a peer's ``hello`` says, shown short for a one-line error, when it is not this
    protocol's (the integer 1); None when it is. The value may be anything a frame can hold: an
    array, a map, ``true``."""
    version = payload.get("protocol_version")
    if type(version) is int and version == VERSION:
        return None
    return repr(version)[:40] if isinstance(version, int | float | str | None) else type(version).__name__


def to_wire_observation(view: dict[str, Any], image_format: str = "raw") -> dict[str, Any]:
    """A policy view (numpy) as vla-eval's observation: each camera of ``rgb`` an HWC image."""
    wire: dict[str, Any] = {}
    for key, value in view.items():
        if key == "rgb":
            frames = np.asarray(value)
            frames = frames[0] if frames.ndim == 4 else frames
            channels = frames.shape[-1]
            count = channels // CAMERA_CHANNELS if channels % CAMERA_CHANNELS == 0 else 1
            names = CAMERAS if count == len(CAMERAS) else [f"camera_{i}" for i in range(count)]
            wire["images"] = {
                name: encode_image(image, image_format)
                for name, image in zip(names, _split_channels(frames, count), strict=True)
            }
        elif key == "proprio":
            wire["state"] = np.asarray(value).reshape(-1)
        elif key == "instruction":
            wire["task_description"] = value
        else:
            wire[key] = value
    return wire


def from_wire_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """vla-eval's observation as this package's policy view (the inverse of ``to_wire_observation``)."""
    view: dict[str, Any] = {}
    for key, value in obs.items():
        if key == "images":
            if not isinstance(value, dict) or not value:
                raise ProtocolError("'images' must map camera names to HWC images")
            frames = [np.asarray(image) for image in value.values()]
            if any(f.ndim != 3 for f in frames) or len({f.shape[:2] for f in frames}) != 1:
                raise ProtocolError(f"'images' must be HWC images of one size, got {[f.shape for f in frames]}")
            view["rgb"] = _join_channels(frames)[None]
        elif key == "state":
            view["proprio"] = np.asarray(value)[None]
        elif key == "task_description":
            view["instruction"] = str(value)
        else:
            view[key] = value
    view.setdefault("instruction", "")
    return view


def _split_channels(image: np.ndarray, count: int) -> list[np.ndarray]:
    """``image``'s last axis cut into ``count`` equal parts, each a contiguous array. numpy copies
    whole pixels (each part's channels as one item) several times faster than single channels."""
    if count == 1:
        return [np.ascontiguousarray(image)]
    width = image.shape[-1] // count
    pixels = _pixels(image, width)
    return [
        np.ascontiguousarray(pixels[..., i]).view(image.dtype).reshape(*image.shape[:-1], width) for i in range(count)
    ]


def _join_channels(frames: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(frames, axis=-1)``, whole pixels at a time where the frames are alike."""
    first = frames[0]
    alike = first.dtype.isnative and all(f.shape == first.shape and f.dtype == first.dtype for f in frames)
    if len(frames) == 1 or not first.shape[-1] or not alike:
        return np.concatenate(frames, axis=-1)
    joined = np.empty((*first.shape[:-1], len(frames)), _pixels(first, first.shape[-1]).dtype)
    for i, frame in enumerate(frames):
        joined[..., i] = _pixels(frame, first.shape[-1])[..., 0]
    return joined.view(first.dtype).reshape(*first.shape[:-1], first.shape[-1] * len(frames))


def _pixels(image: np.ndarray, channels: int) -> np.ndarray:
    """``image`` seen as whole pixels of ``channels`` channels each: one opaque item per pixel."""
    image = np.ascontiguousarray(image)
    return image.view(np.dtype((np.void, channels * image.itemsize)))


def encode_image(image: np.ndarray, image_format: str) -> Any:
    """An HWC uint8 image as the server asked: a plain array for ``raw``, else a compressed image map."""
    if image_format == "raw" or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (1, 3, 4):
        return image
    from PIL import Image

    buffer = io.BytesIO()
    pil = Image.fromarray(image[..., 0] if image.shape[2] == 1 else image)
    pil.save(buffer, format="PNG" if image_format == "png" else "JPEG", quality=95)
    return {"__image__": True, "format": image_format, "data": buffer.getvalue(), "shape": list(image.shape)}


def _encode_array(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind not in ARRAY_KINDS:
        raise TypeError(f"cannot send numpy dtype {value.dtype} (only bool, integer and float)")
    if isinstance(value, np.ndarray):
        return {"__ndarray__": True, "data": value.tobytes(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot send {type(value).__name__}")


class _ImageBudget:
    """The bytes the compressed images of one frame may still decode to."""

    def __init__(self, limit: int) -> None:
        self.limit = self.left = limit

    def take(self, size: int) -> None:
        if size > self.left:
            raise ProtocolError(
                f"the images of this frame would decode to more than {self.limit:,} bytes "
                f"({IMAGE_BYTES_PER_FRAME_BYTE} x the largest frame accepted): one of {size:,} bytes, {self.left:,} left"
            )
        self.left -= size


class _CompressedImage:
    """An image map left for ``_decode_images``: decoding waits until the frame is known to be a message."""

    def __init__(self, obj: dict[str, Any]) -> None:
        image_format = obj.get("format")
        if image_format not in IMAGE_FORMATS or not isinstance(obj.get("data"), bytes):
            raise ProtocolError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, got {image_format!r:.200}")
        self.format: str = image_format
        self.data: bytes = obj["data"]


def _decode_array(obj: dict[str, Any], shared: SharedArrays | None) -> Any:
    if obj.get("__ndarray__") is True or (obj.get("__image__") is True and obj.get("format") == "raw"):
        return _raw_array(obj)
    if obj.get("__image__") is True:
        return _CompressedImage(obj)
    if SHARED_ARRAY in obj:
        return shared_array(obj, shared)
    return obj


def _nodes(payload: dict[str, Any]) -> Iterator[tuple[dict[Any, Any] | list[Any], Any, Any]]:
    """Every (map or list, key, value) of a payload, however deep (no recursion: maps nest deep)."""
    nodes: list[dict[Any, Any] | list[Any]] = [payload]
    while nodes:
        node = nodes.pop()
        for key, value in list(node.items() if isinstance(node, dict) else enumerate(node)):
            yield node, key, value
            if isinstance(value, (dict, list)):
                nodes.append(value)


def _raw_array(obj: dict[str, Any]) -> np.ndarray:
    dtype = array_dtype(obj.get("dtype"))
    shape, data = array_shape(obj.get("shape")), obj.get("data")
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * dtype.itemsize:
        raise ProtocolError(f"array data does not match shape {tuple(shape)} of {dtype}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _compressed_image(image: _CompressedImage, budget: _ImageBudget) -> np.ndarray:
    from PIL import Image, ImageMode

    try:
        # Opening reads the header only: the size is known, nothing is decoded yet.
        with Image.open(io.BytesIO(image.data), formats=[image.format.upper()]) as pil:
            mode = ImageMode.getmode(pil.mode)
            budget.take(pil.width * pil.height * len(mode.bands) * np.dtype(mode.typestr).itemsize)
            image = np.array(pil)
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError(f"cannot decode a {image.format} image: {type(exc).__name__}: {exc}") from None
    return image[..., None] if image.ndim == 2 else image
