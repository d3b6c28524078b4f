"""The same-machine fast path (``serving/wire/shared_frames.py``): real servers in child processes
on loopback and real clients, for every protocol. Arrays go through shared memory and come out
bit for bit; hostile requests get error replies and the server serves on; no segment outlives
its client, however the client ends; sessions record the same episodes with and without it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TESTS, episode_records
from websockets.sync.client import ClientConnection, connect

from pytest_vlaeval.errors import ServerError
from pytest_vlaeval.policy import EpisodeInfo
from pytest_vlaeval.serving.client.connect import connect_policy
from pytest_vlaeval.serving.server.launcher import ServerProcess
from pytest_vlaeval.serving.url import parse_remote_spec
from pytest_vlaeval.serving.wire import native as protocol
from pytest_vlaeval.serving.wire import shared_frames
from pytest_vlaeval.serving.wire import vla_eval as vla_eval_wire
from pytest_vlaeval.serving.wire.shared_frames import DIRECTORY, NAME, SegmentWriter

pytestmark = pytest.mark.skipif(not shared_frames.available(), reason="no /dev/shm: the fast path is off here")

HERE = Path(__file__).parent
WAIT_S = 30.0
"""Upper bound for conditions polled in these tests; never a measured duration."""
PROTOCOLS = {"ws": "vlaeval", "openpi": "openpi", "vla-eval": "vla-eval"}


class Checksum:
    """Actions that tell what the policy was shown, to the bit: any byte the fast path moved
    wrong, or any array it lost, changes them."""

    chunk_size = 1

    def reset(self, episode: EpisodeInfo) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        sums = [
            zlib.crc32(repr((path, a.dtype.str, a.shape)).encode() + a.tobytes()) % 2**20 for path, a in arrays(obs)
        ]
        return np.array([(sums + [0] * 7)[:7]], np.float32)


def arrays(value: Any, path: str = "") -> list[tuple[str, np.ndarray]]:
    """Every array in an observation (maps nest), by its path, in order of the paths."""
    if isinstance(value, np.ndarray):
        return [(path, value)]
    if isinstance(value, dict):
        return [found for key in sorted(value) for found in arrays(value[key], f"{path}/{key}")]
    return []


def observation(step: int) -> dict[str, Any]:
    """Arrays of every kind a policy may be shown: images, proprio, nested cameras, a bool mask,
    a strided view, a big-endian array, an empty one and a 0-d one."""
    rng = np.random.default_rng(step)
    return {
        "rgb": rng.integers(0, 256, (1, 32, 32, 6), dtype=np.uint8),
        "proprio": rng.standard_normal((1, 7), dtype=np.float32),
        "cameras": {"wrist": rng.integers(0, 256, (24, 24, 3), dtype=np.uint8), "mask": rng.random((5, 5)) > 0.5},
        "strided": (np.arange(40, dtype=np.int64).reshape(5, 8) * step)[:, ::3],
        "big_endian": np.arange(3, dtype=">f4") + step,
        "empty": np.zeros((0, 7), np.float64),
        "instruction": "stack the cubes",
    }


def segment_files() -> list[str]:
    return sorted(name for name in os.listdir(DIRECTORY) if NAME.fullmatch(name))


def held_segments(pid: int) -> list[str]:
    """The segments a process holds open (their names are unlinked: they show as deleted)."""
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            continue  # closed meanwhile
    return [link for link in links if link.startswith(f"{DIRECTORY}/{shared_frames.PREFIX}")]


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.02)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start ``vlaeval serve`` for a policy in a child process (``shared=False``: ``--no-shared-memory``)."""
    servers: list[ServerProcess] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(TESTS), os.environ.get("PYTHONPATH", "")])}

    def start(policy: str, protocol_name: str = "vlaeval", shared: bool = True, action_dim: int = 7) -> ServerProcess:
        args = [
            "--protocol",
            protocol_name,
            "--action-dim",
            str(action_dim),
            *([] if shared else ["--no-shared-memory"]),
        ]
        server = ServerProcess(policy, tmp_path / f"server-{len(servers)}.log", args, env)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


def client_of(server: ServerProcess, scheme: str) -> Any:
    return connect_policy(parse_remote_spec(server.url.replace("ws://", f"{scheme}://", 1) + "?timeout=30"), 7)


# -- the fast path, used and exact ---------------------------------------------------------------


@pytest.mark.parametrize("scheme", PROTOCOLS)
def test_a_client_on_this_machine_sends_its_arrays_through_shared_memory_and_they_arrive_exactly(
    serve: Callable[..., ServerProcess], scheme: str
) -> None:
    fast = serve("test_shared_memory:Checksum", PROTOCOLS[scheme])
    wire = serve("test_shared_memory:Checksum", PROTOCOLS[scheme], shared=False)
    steps = [observation(step) for step in range(5)]
    expected = [Checksum().act(obs) for obs in steps]
    for server, frames in ((fast, len(steps)), (wire, 0)):
        policy = client_of(server, scheme)
        policy.reset(EpisodeInfo("Task-v0", 3, "stack the cubes", 0, 50))
        assert segment_files() == [], "a client unlinks its segment's name as soon as the server answers"
        actions = [policy.act(obs) for obs in steps]
        health = server.health()
        assert (health["shared_memory_frames"], health["shared_memory_segments"]) == (frames, int(bool(frames)))
        for got, want in zip(actions, expected, strict=True):  # vla-eval's protocol answers one action, not a chunk
            np.testing.assert_array_equal(np.reshape(got, -1), want[0])
        policy.close()
        wait_until(lambda server=server: server.health()["shared_memory_segments"] == 0)


def test_an_observation_past_the_frame_limit_is_refused_by_the_client_as_on_the_wire(
    serve: Callable[..., ServerProcess],
) -> None:
    """Shared memory is no way around ``--max-message-bytes``: the arrays count against it."""
    server = serve("test_shared_memory:Checksum")
    policy = client_of(server, "ws")
    policy.reset(EpisodeInfo("Task-v0", 3, "", 0, 50))
    too_big = {"rgb": np.zeros((3000, 3000), np.uint8), "instruction": ""}  # 9 MB, the limit is 8 MiB
    with pytest.raises(ServerError, match=r"the act message of 9,?0\d\d,?\d{3} bytes exceeds the server's limit"):
        policy.act(too_big)
    assert server.health()["shared_memory_frames"] == 0
    policy.close()


# -- hostile requests ----------------------------------------------------------------------------


class RawClient:
    """Our protocol spoken by hand, past the metadata: a test may send anything."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.metadata = protocol.unpack(ws.recv(WAIT_S))

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.ws.send(protocol.pack(message))
        return protocol.unpack(self.ws.recv(WAIT_S))

    def act(self, step: int, obs: dict[str, Any]) -> dict[str, Any]:
        return self.ask({"type": "act", "episode": "e", "step": step, "obs": obs})


def refused(reply: dict[str, Any], *fragments: str) -> bool:
    return (
        reply["type"] == "error"
        and reply["code"] == protocol.BAD_REQUEST
        and all(f in reply["message"] for f in fragments)
    )


@pytest.fixture
def segment() -> Iterator[SegmentWriter]:
    writer = SegmentWriter.create()
    assert writer is not None
    yield writer
    writer.close()


def a_name() -> str:
    """A name of the segments' form that nothing holds."""
    return f"{shared_frames.PREFIX}{os.getpid()}-{os.urandom(16).hex()}"


def test_hostile_attach_requests_are_refused_with_error_replies_and_the_connection_serves_on(
    serve: Callable[..., ServerProcess], segment: SegmentWriter
) -> None:
    server = serve("test_shared_memory:Checksum")
    made: list[Path] = []

    def planted(make: Callable[[Path], None]) -> str:
        name = a_name()
        path = DIRECTORY / name
        made.append(path)
        make(path)
        return name

    def file_with_nonce(mode: int) -> Callable[[Path], None]:
        def make(path: Path) -> None:
            path.write_bytes(segment.nonce + bytes(64))
            path.chmod(mode)

        return make

    group_readable = planted(file_with_nonce(0o640))
    linked = planted(lambda path: os.symlink(DIRECTORY / segment.name, path))
    fifo = planted(os.mkfifo)
    hard_linked = planted(file_with_nonce(0o600))
    made.append(DIRECTORY / f"{hard_linked}-second-link")
    os.link(DIRECTORY / hard_linked, made[-1])
    cases = [
        ({"segment": "../../etc/passwd", "nonce": segment.nonce}, "is named vlaeval-frames-PID-HEX"),
        ({"segment": f"{shared_frames.PREFIX}1-{'g' * 32}", "nonce": segment.nonce}, "is named"),
        ({"segment": a_name(), "nonce": segment.nonce}, "cannot open shared-memory segment", "No such file"),
        ({"segment": linked, "nonce": segment.nonce}, "cannot open shared-memory segment"),  # links are not followed
        ({"segment": fifo, "nonce": segment.nonce}, "is not a private file"),  # and never waited on
        ({"segment": group_readable, "nonce": segment.nonce}, "is not a private file"),
        ({"segment": hard_linked, "nonce": segment.nonce}, "with one link"),
        ({"segment": segment.name, "nonce": os.urandom(16)}, "does not hold the nonce"),
        ({"segment": segment.name, "nonce": b"short"}, "must be 16 bytes"),
        ({"segment": segment.name, "nonce": "text"}, "'attach' needs 'nonce' as bytes"),
    ]
    try:
        with connect(server.url, compression=None, proxy=None) as ws:
            raw = RawClient(ws)
            assert raw.metadata["shared_memory"] is True
            for request, *fragments in cases:
                assert refused(raw.ask({"type": "attach", **request}), *fragments), request
            assert server.health()["shared_memory_segments"] == 0
            assert raw.ask({"type": "attach", **segment.request}) == {"type": "attached", "segment": segment.name}
            again = raw.ask({"type": "attach", **segment.request})
            assert refused(again, "already attached"), again
            assert server.health()["shared_memory_segments"] == 1
    finally:
        for path in made:
            path.unlink()


def test_hostile_array_headers_are_refused_with_error_replies_and_the_connection_serves_on(
    serve: Callable[..., ServerProcess], segment: SegmentWriter
) -> None:
    server = serve("test_shared_memory:Checksum")
    obs = {"rgb": np.arange(96, dtype=np.uint8).reshape(4, 4, 6), "instruction": ""}
    placed, _ = segment.place(obs)
    header = placed["rgb"]
    end = shared_frames.DATA_START + 96
    hostile = [
        ({"offset": end}, "ends before the 96 bytes at offset 160"),  # out of bounds: past the segment's end
        ({"offset": 0}, "offset in shared memory must be an int >= 64"),  # the nonce is no array
        ({"offset": -5}, "offset in shared memory must be an int >= 64"),
        ({"offset": True}, "offset in shared memory must be an int >= 64"),
        ({"offset": 2**62}, "offset in shared memory must be an int >= 64"),
        ({"dtype": "|O"}, "array dtype must be bool, integer or float"),  # nothing is ever unpickled
        ({"dtype": "<c16"}, "array dtype must be bool, integer or float"),
        ({"shape": [4, -4, 6]}, "array shape must be a list of non-negative ints"),
        ({"shape": [1] * 40}, "at most 32 dimensions"),
        ({"shape": [2**40, 2**40]}, "exceed 8,388,608 bytes (the largest frame accepted)"),  # before any allocation
    ]
    with connect(server.url, compression=None, proxy=None, max_size=2**24) as ws:
        raw = RawClient(ws)
        assert refused(raw.act(0, placed), "no shared-memory segment is attached to this connection")
        assert raw.ask({"type": "attach", **segment.request})["type"] == "attached"
        assert (
            raw.ask({"type": "open", "episode": "e", **EpisodeInfo("Task-v0", 1, "", 0, 50).to_dict()})["type"]
            == "opened"
        )
        for step, (change, fragment) in enumerate(hostile):
            assert refused(raw.act(step, {**placed, "rgb": {**header, **change}}), fragment), change
            reply = raw.act(step, placed)  # the connection serves on, reading the segment as it should
            assert reply["type"] == "actions", reply
            np.testing.assert_array_equal(reply["actions"], Checksum().act(obs))
        os.truncate(DIRECTORY / segment.name, 100)  # a client that shrinks its segment gets a short read
        assert refused(raw.act(50, placed), "ends before the 96 bytes at offset 64")
        assert raw.ask({"type": "close", "episode": "e"})["type"] == "closed"
    assert server.health()["shared_memory_frames"] == len(hostile)


def test_an_observation_split_between_shared_memory_and_its_frame_counts_as_one_against_the_limit(
    serve: Callable[..., ServerProcess], segment: SegmentWriter
) -> None:
    """Shared memory is no second budget: each half of this observation is under ``--max-message-bytes``
    (8 MiB), its arrays in the segment and in the frame together are past it."""
    server = serve("test_shared_memory:Checksum")
    half = 5 * 2**20
    placed, _ = segment.place({"rgb": np.zeros(half, np.uint8)})
    with connect(server.url, compression=None, proxy=None, max_size=2**24) as ws:
        raw = RawClient(ws)
        assert raw.ask({"type": "attach", **segment.request})["type"] == "attached"
        info = EpisodeInfo("Task-v0", 1, "", 0, 50).to_dict()
        assert raw.ask({"type": "open", "episode": "e", **info})["type"] == "opened"
        reply = raw.act(0, {**placed, "wrist": np.zeros(half, np.uint8), "instruction": ""})
        assert refused(reply, "'act' needs 'obs' as a map of at most 8,388,608 bytes of values"), reply
        assert "\n" not in reply["message"]
        reply = raw.act(0, {**placed, "instruction": ""})
        assert reply["type"] == "actions", reply
        np.testing.assert_array_equal(reply["actions"], Checksum().act({"rgb": np.zeros(half, np.uint8)}))


@pytest.mark.parametrize("scheme", ["openpi", "vla-eval"])
def test_other_protocols_refuse_a_hostile_attach_with_their_own_error_and_serve_on(
    serve: Callable[..., ServerProcess], scheme: str
) -> None:
    server = serve("test_shared_memory:Checksum", PROTOCOLS[scheme])
    obs = observation(1)
    request = {"segment": "../../etc/passwd", "nonce": bytes(16)}
    with connect(server.url, compression=None, proxy=None) as ws:
        if scheme == "openpi":
            ws.recv(WAIT_S)  # the metadata
            ws.send(protocol.pack({protocol.OPENPI_ATTACH: request}))
            reply = ws.recv(WAIT_S)
            assert isinstance(reply, str) and "is named vlaeval-frames-PID-HEX" in reply, reply
            ws.send(protocol.pack({**obs, "prompt": ""}))
            actions = protocol.unpack(ws.recv(WAIT_S))["actions"]
        else:
            hello = vla_eval_wire.hello_payload("test")
            ws.send(vla_eval_wire.pack_frame("hello", {**hello, "shared_memory": request}, 1))
            kind, payload, seq = vla_eval_wire.unpack_frame(ws.recv(WAIT_S), 2**20)
            assert (kind, seq) == ("error", 1) and "is named vlaeval-frames-PID-HEX" in payload["error"], payload
            ws.send(vla_eval_wire.pack_frame("episode_start", {"task": {"name": "Task-v0", "seed": 1}}, 2))
            ws.send(vla_eval_wire.pack_frame("observation", obs, 3))
            kind, payload, seq = vla_eval_wire.unpack_frame(ws.recv(WAIT_S), 2**20)
            assert (kind, seq) == ("action", 3), payload
            actions = payload["actions"][None]
    np.testing.assert_array_equal(actions, Checksum().act(obs))
    assert server.health()["shared_memory_segments"] == 0


# -- no segment outlives its client --------------------------------------------------------------

CLIENT = """
import sys, time
import numpy as np
from pytest_vlaeval.errors import ServerError
from pytest_vlaeval.policy import EpisodeInfo
from pytest_vlaeval.serving import connect_policy, parse_remote_spec

policy = connect_policy(parse_remote_spec(sys.argv[1]), 7)
policy.reset(EpisodeInfo("Task-v0", 0, "", 0, 10))
policy.act({"rgb": np.zeros((1, 64, 64, 6), np.uint8), "proprio": np.zeros((1, 7), np.float32), "instruction": ""})
print("acted", flush=True)
if sys.argv[2] == "close":
    policy.close()
    print("closed", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("scheme", PROTOCOLS)
@pytest.mark.parametrize("ending", ["close", "SIGKILL"])
def test_no_segment_outlives_its_client_however_it_ends(
    serve: Callable[..., ServerProcess], scheme: str, ending: str
) -> None:
    server = serve("zero", PROTOCOLS[scheme])
    assert server.proc is not None
    url = server.url.replace("ws://", f"{scheme}://", 1)
    client = subprocess.Popen([sys.executable, "-c", CLIENT, url, ending], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline() == "acted\n"
        assert [name for name in segment_files() if f"-{client.pid}-" in name] == [], "its name is unlinked at once"
        if ending == "SIGKILL":
            assert len(held_segments(server.proc.pid)) == len(held_segments(client.pid)) == 1
            assert server.health()["shared_memory_segments"] == 1
            client.send_signal(signal.SIGKILL)
            client.wait(WAIT_S)
        else:
            assert client.stdout.readline() == "closed\n"
            assert held_segments(client.pid) == []
        wait_until(lambda: server.health()["shared_memory_segments"] == 0)
        assert held_segments(server.proc.pid) == [], "the server let go of it: the memory is freed"
        assert server.health()["shared_memory_frames"] == 1
    finally:
        client.kill()
        client.wait(WAIT_S)


def test_a_segment_left_by_a_client_killed_before_unlinking_it_is_removed_by_the_next() -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = DIRECTORY / f"{shared_frames.PREFIX}{int(gone.stdout)}-{os.urandom(16).hex()}"
    alive = DIRECTORY / a_name()  # this process's: still running
    for path in (stale, alive):
        path.write_bytes(bytes(16))
    try:
        writer = SegmentWriter.create()
        assert writer is not None
        writer.close()
        assert not stale.exists() and alive.exists()
    finally:
        alive.unlink()
        stale.unlink(missing_ok=True)


# -- whole sessions ------------------------------------------------------------------------------

READS_EVERYTHING = """
import zlib

import numpy as np


class ReadsEverything:
    \"\"\"Acts on every byte it is shown: a checksum of the observation's arrays sets the action.\"\"\"

    chunk_size = 2

    def reset(self, episode):
        pass

    def act(self, obs):
        data = b"".join(np.ascontiguousarray(obs[key]).tobytes() for key in sorted(obs) if key != "instruction")
        return np.full((2, 7), zlib.crc32(data) % 1000 / 1000, np.float32)
"""


def test_sessions_record_the_same_episodes_with_and_without_shared_memory(fake: pytest.Pytester) -> None:
    """In-process, through the session's own server (``--vla-serve``, two workers, shared memory)
    and through a server that takes none: the same records."""
    fake.makepyfile(served=READS_EVERYTHING)
    args = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--episodes=3"]
    wire = ServerProcess("served:ReadsEverything", fake.path / "wire.log", ["--no-shared-memory"])
    wire.start()
    try:
        runs = {
            "local": fake.runpytest_subprocess(*args, "--policy=served:ReadsEverything", "--vla-results=local"),
            "shared": fake.runpytest_subprocess(
                *args, "--vla-serve=served:ReadsEverything", "-n", "2", "--vla-results=shared"
            ),
            "wire": fake.runpytest_subprocess(*args, f"--policy={wire.url}?identity=x", "--vla-results=wire"),
        }
    finally:
        wire.stop()
    records = {}
    for name, result in runs.items():
        assert result.ret in (0, 1), result.stdout.str()
        (run_dir,) = (fake.path / name).iterdir()
        records[name] = {
            key: (r["outcome"], r["episode_return"], r["length"]) for key, r in episode_records(run_dir).items()
        }
        if name == "shared":
            requests = sum((r["length"] + 1) // 2 for r in episode_records(run_dir).values())
            assert f"stopped after {requests} requests" in (run_dir / "server.log").read_text()
            assert f"; {requests} frames came through shared memory" in (run_dir / "server.log").read_text()
    assert records["shared"] == records["local"] == records["wire"]
    assert {outcome for outcome, *_ in records["local"].values()} == {"success", "failure"}, "a meaningful comparison"
    assert "; 0 frames came through shared memory" in wire.log_path.read_text()


def test_pusht_sessions_of_a_pixel_driven_policy_are_the_same_with_and_without_shared_memory(tmp_path: Path) -> None:
    """The scripted pusher reads every pixel; 64 steps of seed 1015, which it solves."""
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    args = ["--benchmark=pusht", "--episodes=1", "--vla-start-seed=1015", "-p", "no:cacheprovider"]
    args += ["--rootdir", str(tmp_path)]
    wire = ServerProcess(
        "pusht_reference:Pusher", tmp_path / "wire.log", ["--action-dim", "2", "--no-shared-memory"], env
    )
    wire.start()
    try:
        sessions = {
            "local": "--policy=pusht_reference:Pusher",
            "shared": "--vla-serve=pusht_reference:Pusher",
            "wire": f"--policy={wire.url}?identity=pusher",
        }
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "pytest", *args, option, f"--vla-results={name}"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for name, option in sessions.items()
        }
        outputs = {name: proc.communicate(timeout=600)[0] for name, proc in procs.items()}
    finally:
        wire.stop()
    records = {}
    for name, proc in procs.items():
        assert proc.returncode == 0, outputs[name][-3000:]
        (run_dir,) = (tmp_path / name).iterdir()
        (record,) = episode_records(run_dir).values()
        records[name] = (record["success"], record["episode_return"], record["length"], record["extras"])
    assert records["shared"] == records["local"] == records["wire"]
    assert records["local"][0] is True and records["local"][2] == 64
    (shared_run,) = (tmp_path / "shared").iterdir()
    assert "; 64 frames came through shared memory" in (shared_run / "server.log").read_text()
