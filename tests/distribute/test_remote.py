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
from helpers import FREEZES, TESTS, episode_records, read_json, run_dir


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


def _wait_for(port: int, server: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    """Until something listens on ``port``; fails, saying why (``log``: the server's stderr), if
    ``server`` ends first or nothing listens within 20 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            pytest.fail(f"the socket server ended before listening: {log.read_text() if log else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    pytest.fail(f"nothing listens on 127.0.0.1:{port} after 20 s")


NAMESPACE_INIT = """
import subprocess, sys
with open("/proc/sys/kernel/ns_last_pid", "w") as last_pid:
    last_pid.write(sys.argv[1])
sys.exit(subprocess.Popen(sys.argv[2:]).wait())
"""
"""A PID namespace's init: the server it starts gets the id after ``argv[1]``; it waits for the
server's exit (``waitpid`` without ``WUNTRACED``: a stopped server does not end it)."""


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


@pytest.mark.long
def test_a_frozen_remote_worker_is_cut_off_and_no_local_process_is_signalled(
    fake: pytest.Pytester, tmp_path: Path
) -> None:
    """A socket worker in its own PID namespace, whose process id there is the id of a local decoy,
    freezes mid-episode: the controller must not signal that id here (the decoy lives); it closes
    the worker's connection, does not wait on a replacement from that host, records the episode as
    a crash and finishes."""
    home = tmp_path / "remote"
    home.mkdir()
    (home / "fake.yaml").write_text((TESTS / "fake.yaml").read_text())
    (home / "fake_env_base.py").write_text((TESTS / "fake_env.py").read_text())
    (home / "fake_env.py").write_text(FREEZES)
    decoy = subprocess.Popen(["sleep", "600"])
    port = free_port()
    log = tmp_path / "namespace.log"
    # The namespace's first process (its init) is a Python one that gives the next process id, the
    # server's, the decoy's number, and waits for the server's end alone (a shell's wait may return
    # on a stopped child, and an init's exit ends the namespace). --kill-child: killing unshare
    # ends the namespace, the frozen server in it included.
    namespace = subprocess.Popen(
        [
            "unshare", "--pid", "--kill-child", "--mount-proc", sys.executable, "-c", NAMESPACE_INIT,
            str(decoy.pid - 1), sys.executable, execnet_socketserver.__file__, f"127.0.0.1:{port}",
        ],
        cwd=home, env={"PYTHONPATH": str(home), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL, stderr=log.open("w"),
    )  # fmt: skip
    try:
        _wait_for(port, namespace, log)
        result = fake.runpytest_subprocess(
            f"--tx=socket=127.0.0.1:{port}//chdir={home}", "--tx=popen", "--benchmark=fake.yaml:short",
            "--vla-timeout=1", "-p", "no:cacheprovider", timeout=180,
        )  # fmt: skip
        assert decoy.poll() is None, "the controller signalled a local process with the remote worker's id"
    finally:
        for process in (decoy, namespace):
            process.kill()
            process.wait()
    output = result.stdout.str()
    said = [line for line in output.splitlines() if line.startswith("E ") or line.startswith("vlaeval:")]
    assert "cannot be signalled from here" in output, said
    assert f"end process {decoy.pid} on 127.0.0.1:{port}" in output, said
    records = episode_records(run_dir(fake))
    assert len(records) == 6, records
    errors = sorted(r["error_kind"] for r in records.values() if r["outcome"] == "error")
    # The frozen episode crashed with its worker; the rest of that worker's queue had nobody left to
    # run it (the local worker had finished its own): errors, never silently missing.
    assert errors[0] == "crash" and set(errors[1:]) <= {"lost"}, errors
    assert {r["worker"] for r in records.values() if r["outcome"] != "error"} == {"gw1"}
