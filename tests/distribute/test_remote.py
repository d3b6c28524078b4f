"""Workers on other hosts through xdist's own gateways, tried on loopback: two execnet socket
servers, each in a directory of its own (as another machine would be), serve the workers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import execnet.script.socketserver as execnet_socketserver
import pytest
from helpers import TESTS, episode_records, read_json, run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def socket_hosts(tmp_path: Path) -> Iterator[list[str]]:
    """Two loopback 'hosts', each with its own copy of the fake benchmark."""
    servers, specs = [], []
    for name in ("host1", "host2"):
        home = tmp_path / name
        home.mkdir()
        for file in ("fake.yaml", "fake_env.py"):
            (home / file).write_text((TESTS / file).read_text())
        port = free_port()
        servers.append(
            subprocess.Popen(
                [sys.executable, execnet_socketserver.__file__, f"127.0.0.1:{port}"],
                cwd=home,
                env={"PYTHONPATH": str(home), "PATH": "/usr/bin:/bin"},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_for(port)
        # xdist runs socket workers in <server cwd>/pyexecnetcache unless told where.
        specs.append(f"socket=127.0.0.1:{port}//chdir={home}")
    yield specs
    for server in servers:
        server.kill()
        server.wait()


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"socket server on port {port} did not start")


def test_socket_workers_send_their_episodes_to_the_controller(fake: pytest.Pytester, socket_hosts: list[str]) -> None:
    tx = [arg for spec in socket_hosts for arg in ("--tx", spec)]
    result = fake.runpytest_subprocess(
        *tx, "-v", "--benchmark=fake.yaml:short", "--vla-tasks=Alpha-v0,Beta-v0", "-p", "no:cacheprovider"
    )
    assert result.ret in (0, 1), result.stdout.str()
    result.stdout.fnmatch_lines(["*scheduling tests via AffinityScheduling*"])  # the plugin's scheduler, remotely too
    records = episode_records(run_dir(fake))
    assert len(records) == 6
    assert {r["worker"] for r in records.values()} <= {"gw0", "gw1"}
    assert read_json(run_dir(fake) / "summary.json")["n_completed"] == 6
    hosts = [Path(spec.split("//chdir=")[1]) for spec in socket_hosts]
    assert not any((host / "results").exists() for host in hosts), "results live on the controller"
