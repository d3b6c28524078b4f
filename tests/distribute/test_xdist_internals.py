"""The private pytest-xdist and execnet attributes this package uses (``distribute.xdist_internals``),
checked against the installed versions: an upgrade that drops one fails here, loudly, not in a
user's session."""

from __future__ import annotations

import time
from pathlib import Path

import execnet
import pytest
import xdist.dsession

from pytest_vlaeval.distribute import xdist_internals


def test_every_private_name_is_there_in_the_installed_xdist(pytester: pytest.Pytester) -> None:
    assert xdist_internals.missing() == []
    session = xdist.dsession.DSession(pytester.parseconfig("-n", "1"))
    assert isinstance(session._active_nodes, set), "the live workers a cut-off one is counted against"


def test_a_dropped_name_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(xdist.dsession.DSession, "_clone_node")
    assert [line for line in xdist_internals.missing() if "DSession._clone_node" in line]


def test_a_real_gateway_says_its_process_and_is_cut_off_without_waiting() -> None:
    gateway = execnet.makegateway("popen")
    pid = xdist_internals.worker_pid(gateway)
    assert pid == gateway.remote_exec("import os; channel.send(os.getpid())").receive(timeout=30)
    started = time.monotonic()
    xdist_internals.cut_connection(gateway)
    while running(pid):
        if time.monotonic() - started > 20:
            pytest.fail(f"the worker process {pid} still runs after its connection was cut")
        time.sleep(0.1)


def running(pid: int) -> bool:
    """Whether the process runs (a zombie, ended but not yet reaped by this process, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
