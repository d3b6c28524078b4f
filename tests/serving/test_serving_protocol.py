"""The serving wire format and remote specs, without a network: encoding, validation, interop."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from openpi_client import msgpack_numpy

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.serving.url import RemoteSpec, parse_remote_spec
from pytest_vlaeval.serving.wire import vlaeval as protocol


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
        ("openpi://host:1?chunk_size=2.5", "chunk_size must be a positive number"),
        ("ws://host:1?timeout=-1", "timeout must be a positive number"),
    ]:
        with pytest.raises(SpecError, match=reason):
            parse_remote_spec(bad)


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
