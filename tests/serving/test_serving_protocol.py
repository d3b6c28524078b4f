"""The serving wire format and remote specs, without a network: encoding, validation, interop, and any
frame fed to each protocol's handler in-process."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openpi_client import msgpack_numpy

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.policy import EpisodeInfo
from pytest_vlaeval.policy.loading import parse_local_policy
from pytest_vlaeval.serving.server import native_handler, openpi_handler, vla_eval_handler
from pytest_vlaeval.serving.server.connection import Connection, ServerConfig
from pytest_vlaeval.serving.server.policy_server import PolicyServer
from pytest_vlaeval.serving.url import MAX_WAIT_S, RemoteSpec, parse_remote_spec
from pytest_vlaeval.serving.wire import native as protocol
from pytest_vlaeval.serving.wire import vla_eval as vla_eval_wire


def test_arrays_scalars_and_plain_values_round_trip_exactly() -> None:
    message = {
        "type": "act",
        "obs": {
            "rgb": np.arange(2 * 3 * 6, dtype=np.uint8).reshape(1, 2, 3, 6),
            "proprio": np.linspace(-1, 1, 7, dtype=np.float32)[None],
            "strided": np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2],
            "empty": np.zeros((0, 7), dtype=np.float64),
            "flag": np.bool_(True),
            "instruction": "pick the red cube",
        },
        "step": 3,
    }
    decoded = protocol.unpack(protocol.pack(message))
    for key, value in message["obs"].items():
        got = decoded["obs"][key]
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.shape == value.shape and np.array_equal(got, value)
            assert got.flags.writeable, "policies may write into their input"
        else:
            assert got == value and type(got) is type(value)
    assert decoded["step"] == 3 and decoded["type"] == "act"


def test_frames_interoperate_with_openpi_client_encoding() -> None:
    obs = {"image": np.full((4, 4, 3), 7, np.uint8), "state": np.arange(7, dtype=np.float32), "prompt": "go"}
    theirs = msgpack_numpy.unpackb(protocol.pack(obs))
    assert np.array_equal(theirs["image"], obs["image"]) and theirs["prompt"] == "go"
    ours = protocol.unpack(msgpack_numpy.packb(obs))
    assert np.array_equal(ours["state"], obs["state"]) and ours["state"].dtype == np.float32


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ("text", "expected a binary frame"),
        (b"\xc1\x00garbage", "not a msgpack message"),
        (msgpack.packb([1, 2, 3]), "expected a msgpack map, got list"),
        (msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}), "dtype must be"),
        (msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 7, b"dtype": "<f4", b"shape": [2]}), "does not match"),
        (msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "<f4", b"shape": [-1]}), "non-negative"),
        (msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "<c8", b"shape": [0]}), "dtype must be"),
        (msgpack.packb({b"__npgeneric__": True, b"data": "x", b"dtype": "<i4"}), "bad numpy scalar"),
    ],
)
def test_malformed_frames_are_refused_with_a_reason(frame: bytes | str, expected: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=expected):
        protocol.unpack(frame)


def test_unsendable_values_are_refused_before_they_reach_the_wire() -> None:
    with pytest.raises(TypeError, match="dtype object"):
        protocol.pack({"obs": np.array([object()], dtype=object)})
    with pytest.raises(TypeError, match="cannot send set"):
        protocol.pack({"obs": {1, 2}})


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"type": "fly"}, "unknown message type 'fly'"),
        ({"episode": "e"}, "unknown message type None"),
        ({"type": "act", "episode": "e", "obs": {}}, "'act' needs 'step' as int, got nothing"),
        ({"type": "act", "episode": "e", "step": True, "obs": {}}, "'act' needs 'step' as int, got bool"),
        ({"type": "open", "episode": 5}, "'open' needs 'episode' as str, got int"),
    ],
)
def test_requests_are_checked_against_the_schema(message: dict, expected: str) -> None:
    with pytest.raises(protocol.ProtocolError, match=expected):
        protocol.parse(protocol.pack(message), protocol.REQUEST_FIELDS)


def test_remote_specs() -> None:
    assert parse_remote_spec("ws://127.0.0.1:8000") == RemoteSpec("ws", "127.0.0.1", 8000)
    spec = parse_remote_spec("openpi://localhost:9000?chunk_size=5&timeout=2.5&connect_timeout=1")
    assert (spec.chunk_size, spec.timeout_s, spec.connect_timeout_s, spec.url) == (5, 2.5, 1.0, "ws://localhost:9000")
    assert parse_remote_spec("ws://[::1]:8000").url == "ws://[::1]:8000"
    for bad, reason in [
        ("wss://host:1", "expected ws://HOST:PORT"),
        ("ws://host", "expected ws://HOST:PORT"),
        ("ws://host:1/path", "expected ws://HOST:PORT"),
        ("ws://host:1?chunk_size=4", "unknown option 'chunk_size'"),
        ("openpi://host:1?chunk_size=2.5", "chunk_size must be a positive whole number"),
        ("ws://host:1?timeout=-1", "timeout must be a positive number"),
    ]:
        with pytest.raises(SpecError, match=reason):
            parse_remote_spec(bad)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("connect_timeout", "inf"),
        ("connect_timeout", "1e308"),
        ("connect_timeout", "nan"),
        ("timeout", "nan"),
        ("timeout", "-inf"),
        ("timeout", "86401"),
        ("server_pid", "1e308"),
    ],
)
def test_an_option_must_be_finite_positive_and_bounded(option: str, value: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_remote_spec(f"ws://127.0.0.1:1?{option}={value}")
    message = str(refused.value)
    assert f"option {option} must be a positive" in message and f"got {value!r}" in message
    assert "\n" not in message
    assert parse_remote_spec(f"ws://127.0.0.1:1?{option}=86400").url == "ws://127.0.0.1:1", "the bound itself is fine"


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.builds(
            "".join,
            st.lists(
                st.sampled_from(["ws://", "openpi://", "vla-eval://", "[", "]", "::1", "host", ":", "8000", "?", "&"])
                | st.sampled_from(["timeout=", "connect_timeout=", "chunk_size=", "server_pid=", "identity=", "/"])
                | st.sampled_from(["nan", "inf", "-1", "0", "1e308", "2.5", "%", "#", "@", " "])
                | st.text(max_size=4)
            ),
        ),
    )
)
def test_any_string_as_a_policy_address_is_one_line_or_an_address(spec: str) -> None:
    try:
        remote = parse_remote_spec(spec)
    except SpecError as exc:
        assert str(exc).startswith(f"--policy {spec!r}: expected ") and "\n" not in str(exc)
    else:
        assert remote.scheme in ("ws", "openpi", "vla-eval") and 0 <= remote.port <= 65535
        for wait in (remote.timeout_s, remote.connect_timeout_s):
            assert 0 < wait <= MAX_WAIT_S, "every wait is finite and bounded"


@settings(max_examples=200, deadline=None)
@given(
    cameras=st.integers(1, 4),
    channels=st.sampled_from([1, 3, 4]),
    height=st.integers(0, 5),
    width=st.integers(0, 5),
    dtype=st.sampled_from(["|u1", "<f4", ">i2", "|b1"]),
    batched=st.booleans(),
)
def test_cameras_travel_to_vla_eval_and_back_exactly(
    cameras: int, channels: int, height: int, width: int, dtype: str, batched: bool
) -> None:
    """The cameras of ``rgb`` are split and joined a whole pixel at a time: the same arrays as
    slicing the channels and concatenating them, for any size, dtype and number of cameras."""
    image = (np.random.default_rng(cameras * channels).random((height, width, cameras * channels)) * 100).astype(dtype)
    view = {
        "rgb": image[None] if batched else image,
        "proprio": np.arange(7, dtype=np.float32)[None],
        "instruction": "",
    }
    wire = vla_eval_wire.to_wire_observation(view)
    part = image.shape[-1] // len(wire["images"])
    for i, camera in enumerate(wire["images"].values()):
        assert camera.flags.c_contiguous and camera.dtype == image.dtype
        assert np.array_equal(camera, image[..., i * part : (i + 1) * part])
    back = vla_eval_wire.from_wire_observation(wire)["rgb"]
    joined = np.concatenate(list(wire["images"].values()), axis=-1)[None]  # native byte order, as numpy joins
    assert back.dtype == joined.dtype and np.array_equal(back, joined) and np.array_equal(back, image[None])


def test_cameras_unlike_each_other_are_joined_as_numpy_concatenates_them() -> None:
    images = {"base": np.full((2, 2, 3), 7, np.uint8), "depth": np.full((2, 2, 1), 0.5, np.float32)}
    joined = vla_eval_wire.from_wire_observation({"images": images})["rgb"]
    assert joined.dtype == np.float32 and np.array_equal(joined, np.concatenate(list(images.values()), axis=-1)[None])


@pytest.mark.parametrize("address", ["ws://127.0.0.1:8000", "openpi://127.0.0.1:8000", "vla-eval://127.0.0.1:8000"])
def test_a_server_refuses_to_proxy_another_server(address: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_vlaeval.cli import main

    assert main(["serve", "--policy", address, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"--policy {address!r} is a policy server's address" in err


def test_a_remote_spec_names_the_run_by_its_identity_option_else_by_itself() -> None:
    assert parse_remote_spec("ws://127.0.0.1:8000?timeout=5").identity == "ws://127.0.0.1:8000?timeout=5"
    spec = parse_remote_spec("openpi://gpu-box:9000?identity=mymodel-v3&chunk_size=4")
    assert (spec.identity, spec.chunk_size, spec.url) == ("mymodel-v3", 4, "ws://gpu-box:9000")
    assert parse_remote_spec("ws://127.0.0.1:8001?identity=mymodel-v3").identity == spec.identity
    with pytest.raises(SpecError, match="option identity must not be empty"):
        parse_remote_spec("ws://host:1?identity=")


# -- any bytes as a served frame, at the handler seam -----------------------------------------


class RecordingSocket:
    """What a handler sees of a websocket: it sends replies here."""

    remote_address = ("127.0.0.1", 0)

    def __init__(self) -> None:
        self.sent: list[bytes | str] = []

    async def send(self, frame: bytes | str) -> None:
        self.sent.append(frame)


class InProcessServer:
    """A loaded ``PolicyServer`` whose handler is fed frames directly, on an event loop of this test."""

    def __init__(self, protocol_name: str, max_message_bytes: int = ServerConfig.max_message_bytes) -> None:
        config = ServerConfig(
            port=0,
            protocol=protocol_name,
            max_episodes=2,
            admission_timeout_s=0.01,
            max_message_bytes=max_message_bytes,
        )
        self.server = PolicyServer(parse_local_policy("random"), config)
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.server.start())
        self.loop.run_until_complete(self.server.load())

    def feed(self, frames: list[bytes]) -> list[bytes | str]:
        """Every frame through the handler on one fresh connection, which then closes; the replies."""
        connection = Connection(ws=RecordingSocket())  # type: ignore[arg-type]

        async def serve() -> None:
            if self.server.config.protocol == "vla-eval":
                session = vla_eval_handler._HarnessSession(self.server, connection)
                for frame in frames:
                    await session.handle(frame)
            else:
                handler = openpi_handler if self.server.config.protocol == "openpi" else native_handler
                for frame in frames:
                    await handler._frame(self.server, connection, frame)
                    await asyncio.gather(*connection.tasks)
            for entry in list(connection.episodes.values()):
                self.server.table.close(entry, None)

        self.loop.run_until_complete(serve())
        return connection.ws.sent  # type: ignore[attr-defined]

    def close(self) -> None:
        self.loop.run_until_complete(self.server.stop())
        self.server.join_policy_thread()
        self.loop.close()


def _png(side: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((side, side, 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=16)
)
_ARRAYS = st.fixed_dictionaries(
    {"__ndarray__": st.just(True), "data": st.binary(max_size=32), "dtype": st.sampled_from(["|u1", "<f4", "|O", "x"])},
    optional={"shape": st.lists(st.integers(-1, 8), max_size=3)},
)
_IMAGES = st.fixed_dictionaries(
    {
        "__image__": st.just(True),
        "format": st.sampled_from(["png", "jpeg", "raw", "gif"]),
        "data": st.sampled_from([_png(4), _png(600)]) | st.binary(max_size=64),
    }
)
_VALUES = st.recursive(
    _SCALARS | _ARRAYS | _IMAGES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
_TASKS = st.fixed_dictionaries(
    {},
    optional={
        name: st.integers(-(2**63), 2**64 - 1) | _VALUES
        for name in ("env_id", "name", "seed", "instruction", "task_description", "episode_idx", "max_steps")
    },
)
_REQUESTS = st.fixed_dictionaries(
    {"type": st.sampled_from(["open", "act", "close"]) | _VALUES},
    optional={
        name: st.integers(-(2**63), 2**64 - 1) | _VALUES
        for name in ("episode", "task", "seed", "instruction", "episode_index", "max_steps", "step", "obs")
    },
)
"""Frames of this package's protocol: its requests' fields, any values."""
_HARNESS_FRAMES = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["hello", "episode_start", "observation", "episode_end", "error", "action"]) | _VALUES,
        "payload": st.fixed_dictionaries(
            {},
            optional={
                "task": _TASKS | _VALUES,
                "images": st.dictionaries(st.text(max_size=6), _IMAGES | _ARRAYS | _VALUES, max_size=3) | _VALUES,
                "state": _ARRAYS | _VALUES,
                "protocol_version": st.just(1) | _VALUES,
            },
        ),
        "seq": st.integers(0, 2**31) | st.none(),
    },
)
"""Frames of vla-eval's protocol: its messages' payloads, any values."""


def _frames(messages: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[list[bytes | str]]:
    return st.lists(st.binary(max_size=64) | st.text(max_size=8) | messages.map(msgpack.packb), min_size=1, max_size=4)


@pytest.mark.parametrize("protocol_name", ["vlaeval", "vla-eval"])
def test_any_frame_gets_an_error_reply_or_a_result_and_the_server_serves_on(protocol_name: str) -> None:
    served = InProcessServer(protocol_name)
    try:

        @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(_frames(_HARNESS_FRAMES if protocol_name == "vla-eval" else _REQUESTS))
        def feed(frames: list[bytes | str]) -> None:
            replies = served.feed(frames)
            if protocol_name == "vlaeval":
                assert len(replies) == len(frames), "every request gets one reply"
            else:  # episode_start, episode_end and error frames are answered only when they fail
                assert len(replies) <= len(frames), "one reply at most per frame"
            for reply in replies:
                if protocol_name == "vla-eval":
                    kind, payload, _ = vla_eval_wire.unpack_frame(reply, 2**20)
                    assert kind != "error" or not payload["error"].startswith("server_error"), payload
                else:
                    message = protocol.unpack(reply)
                    assert message.get("code") != protocol.SERVER, message

        feed()
        stats = served.server.stats()
        assert (stats["open_episodes"], stats["waiting_opens"]) == (0, 0), "every slot came back"
        info = EpisodeInfo(task="Task-v0", seed=1, instruction="go", episode_index=0, max_steps=5).to_dict()
        if protocol_name == "vla-eval":
            obs = {"images": {"base_camera": np.zeros((4, 4, 3), np.uint8)}, "state": np.zeros(7, np.float32)}
            frames = [vla_eval_wire.pack_frame("episode_start", {"task": info}, 1)]
            frames.append(vla_eval_wire.pack_frame("observation", obs, 2))
            (reply,) = served.feed(frames)
            assert vla_eval_wire.unpack_frame(reply, 2**20)[0] == "action"
        else:
            opened, acted = served.feed(
                [
                    protocol.pack({"type": "open", "episode": "e", **info}),
                    protocol.pack({"type": "act", "episode": "e", "step": 0, "obs": {}}),
                ]
            )
            assert (protocol.unpack(opened)["type"], protocol.unpack(acted)["type"]) == ("opened", "actions")
    finally:
        served.close()


# -- an observation is bounded by its size, never by its shape --------------------------------

ALOHA_OBS = {"pixels": {"top": np.zeros((6, 8, 3), np.uint8)}, "agent_pos": np.zeros(14)}
"""ALOHA's observation as its env gives it (LeRobot's ``pixels_agent_pos``), smaller cameras."""
LEROBOT_LIBERO_OBS = {
    "pixels": {"image": np.zeros((6, 6, 3), np.uint8), "image2": np.zeros((6, 6, 3), np.uint8)},
    "robot_state": {
        "eef": {"pos": np.zeros(3), "quat": np.zeros(4), "mat": np.zeros((3, 3))},
        "gripper": {"qpos": np.zeros(2), "qvel": np.zeros(2)},
        "joints": {"pos": np.zeros(7), "vel": np.zeros(7)},
    },
}
"""LIBERO's observation as LeRobot's ``LiberoEnv`` gives it: its robot state three maps deep."""
SIX_DEEP = {"a": {"b": {"c": {"d": {"e": {"f": np.zeros(3, np.float32)}}}}}, "instruction": "go"}
"""Deeper than any built-in benchmark's today, with few values."""


@pytest.mark.parametrize(
    ("version", "shown"),
    [
        (np.zeros((4, 4, 3), np.uint8), "ndarray"),  # a decoded image (a fuzzed frame gave one)
        (True, "True"),  # equal to 1 in Python, not the protocol's version
        ({"major": 1}, "dict"),
        ("1", "'1'"),
        (None, "None"),
    ],
)
def test_a_hello_of_any_other_version_is_a_bad_request_naming_it(version: Any, shown: str) -> None:
    """A harness's ``hello`` says protocol version 1 or is refused as a bad request that names what
    it said, never a server error, and the connection serves on."""
    served = InProcessServer("vla-eval")
    try:
        hello = vla_eval_wire.pack_frame("hello", {"protocol_version": version}, 7)
        replies = served.feed([hello, vla_eval_wire.pack_frame("hello", {"protocol_version": 1}, 8)])
        refused, answered = (vla_eval_wire.unpack_frame(reply, 2**20) for reply in replies)
        assert refused == (
            "error",
            {"error": f"bad_request: this server speaks protocol version 1, the harness {shown}"},
            7,
        )
        assert answered[0] == "hello" and answered[2] == 8
    finally:
        served.close()


def test_a_hello_says_this_protocols_version_only_as_the_integer_one() -> None:
    """What both ends read of a peer's ``hello`` (``wire.other_version``): the integer 1, not
    ``true``, ``1.0`` or an array; anything else shown short, by type where it is not a scalar."""
    assert vla_eval_wire.other_version({"protocol_version": 1}) is None
    assert vla_eval_wire.other_version({}) == "None"
    assert vla_eval_wire.other_version({"protocol_version": 1.0}) == "1.0"
    assert vla_eval_wire.other_version({"protocol_version": np.ones(3)}) == "ndarray"
    assert vla_eval_wire.other_version({"protocol_version": "x" * 100}) == repr("x" * 100)[:40]


def _nested(levels: int) -> dict[str, Any]:
    obs: dict[str, Any] = {"leaf": np.zeros(2)}
    for _ in range(levels - 1):
        obs = {"k": obs}
    return obs


def _served(served: InProcessServer, obs: dict[str, Any]) -> bytes | str:
    """The one reply to ``obs``: an act of an opened episode, or under openpi's protocol the frame itself."""
    if served.server.config.protocol == "openpi":
        (reply,) = served.feed([protocol.pack(obs)])
        return reply
    info = EpisodeInfo(task="Task-v0", seed=1, instruction="go", episode_index=0, max_steps=5).to_dict()
    opened, reply = served.feed(
        [
            protocol.pack({"type": "open", "episode": "e", **info}),
            protocol.pack({"type": "act", "episode": "e", "step": 0, "obs": obs}),
        ]
    )
    assert protocol.unpack(opened)["type"] == "opened"
    return reply


@pytest.mark.parametrize("protocol_name", ["vlaeval", "openpi"])
def test_an_observation_nested_as_its_env_gives_it_is_served(protocol_name: str) -> None:
    served = InProcessServer(protocol_name)
    try:
        for obs in (ALOHA_OBS, LEROBOT_LIBERO_OBS, SIX_DEEP, _nested(protocol.MAX_OBS_NESTING)):
            reply = _served(served, obs)
            assert isinstance(reply, bytes), reply
            actions = protocol.unpack(reply)["actions"]
            assert actions.ndim == 2 and actions.shape[1] == 7
    finally:
        served.close()


LIMIT = 4096
"""The in-process server's largest frame in the tests below: frames fed to its handler are not
checked by the websocket's limit, as arrays through shared memory are not."""


@pytest.mark.parametrize("protocol_name", ["vlaeval", "openpi"])
@pytest.mark.parametrize(
    ("obs", "expected"),
    [
        ({"state": {str(i): np.float32(0) for i in range(1025)}}, "a map of at most 1,024 names at all its levels"),
        ({str(i): {"x": 0} for i in range(600)}, "a map of at most 1,024 names at all its levels"),  # maps count
        ({"rgb": np.zeros(LIMIT + 1, np.uint8)}, "a map of at most 4,096 bytes of values (the server's largest frame)"),
        (
            {
                "pixels": {"top": np.zeros(LIMIT // 2, np.uint8)},
                "wrist": np.zeros(LIMIT // 2 - 1, np.uint8),
                "go": "xy",
            },
            "a map of at most 4,096 bytes of values",
        ),
        (_nested(protocol.MAX_OBS_NESTING + 1), "a map nested at most 32 deep, got deeper at 'k.k.k.k.k.k.k.k'"),
        ({"a": {"b": {"c": [1]}}}, "a map of names to arrays, strings, numbers or such maps, got list at 'a.b.c'"),
        (
            {"a": {"b\nc": {"d": None}}},
            "a map of names to arrays, strings, numbers or such maps, got NoneType at 'a.b\\nc.d'",
        ),  # a name from the client, quoted
    ],
)
def test_an_observation_past_its_bounds_gets_one_error_reply_and_the_connection_serves_on(
    protocol_name: str, obs: dict[str, Any], expected: str
) -> None:
    served = InProcessServer(protocol_name, max_message_bytes=LIMIT)
    try:
        reply = _served(served, obs)
        if protocol_name == "openpi":
            assert isinstance(reply, str) and reply.startswith(f"bad request: an observation must be {expected}")
            message = reply
        else:
            refused = protocol.unpack(reply)
            assert refused["code"] == protocol.BAD_REQUEST, refused
            message = refused["message"]
            assert message.startswith(f"'act' needs 'obs' as {expected}"), message
        assert "\n" not in message
        reply = _served(served, {"rgb": np.zeros(LIMIT // 2, np.uint8), "instruction": "go"})
        assert protocol.unpack(reply)["actions"].shape[1] == 7, "the server serves on"
        assert served.server.stats()["open_episodes"] == 0
    finally:
        served.close()


_LEAVES = (
    st.builds(np.zeros, st.integers(0, 48), st.sampled_from([np.uint8, np.float32, np.float64]))
    | st.text(max_size=8)
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.booleans()
)
_OBSERVATIONS = st.dictionaries(
    st.text(max_size=6),
    st.recursive(_LEAVES, lambda inner: st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=30),
    max_size=4,
)


def _size(obs: dict[str, Any]) -> tuple[int, int]:
    """An observation's bytes of values (arrays' bytes, strings' UTF-8, 8 a number) and its depth in maps."""
    size, depth = 0, 1
    for value in obs.values():
        if isinstance(value, dict):
            inner, levels = _size(value)
            size, depth = size + inner, max(depth, levels + 1)
        else:
            size += (
                value.nbytes if isinstance(value, np.ndarray) else len(value.encode()) if isinstance(value, str) else 8
            )
    return size, depth


@settings(max_examples=300, deadline=None)
@given(obs=_OBSERVATIONS, limit=st.integers(0, 1500))
def test_an_observation_is_refused_for_its_size_never_for_its_shape(obs: dict[str, Any], limit: int) -> None:
    """However an observation nests (these hold far fewer names than the bound), it passes exactly
    when its values fit the frame's bytes, and a refusal is one line."""
    size, depth = _size(obs)
    problem = protocol.observation_problem(obs, limit)
    assert (problem is None) == (size <= limit and depth <= protocol.MAX_OBS_NESTING), (problem, size, depth)
    assert problem is None or "\n" not in problem
