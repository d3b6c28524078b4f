"""The private pytest-xdist and execnet attributes this package uses (``distribute.xdist_internals``),
checked against the installed versions: an upgrade that drops one fails here, loudly, not in a
user's session."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import execnet
import execnet.gateway
import execnet.gateway_base
import pytest
import xdist.dsession
import xdist.plugin

from pytest_vlaeval.distribute import xdist_internals


def test_every_private_name_is_there_in_the_installed_xdist(pytester: pytest.Pytester) -> None:
    assert xdist_internals.missing() == []
    session = xdist.dsession.DSession(pytester.parseconfig("-n", "1"))
    assert isinstance(session._active_nodes, set), "the live workers a cut-off one is counted against"
    assert session.sched is None, "the scheduler, set once the workers have collected"


@pytest.mark.parametrize(
    ("owner", "name"),
    [
        (xdist.plugin, "_sys_path"),
        (xdist.dsession.DSession, "_clone_node"),
        (xdist.dsession.DSession, "triggershutdown"),
        (execnet.gateway.Gateway, "_rinfo"),
    ],
)
def test_a_dropped_name_is_named(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    monkeypatch.delattr(owner, name)
    assert [line for line in xdist_internals.missing() if f"{owner.__name__}.{name} (" in line]


def test_a_name_no_longer_set_on_each_instance_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``__init__`` that stops setting them: the session's scheduler and live workers, the
    gateway's connection."""

    def bare_init(self: Any, *args: Any, **kwargs: Any) -> None:
        self.config = None

    monkeypatch.setattr(xdist.dsession.DSession, "__init__", bare_init)
    monkeypatch.setattr(execnet.gateway_base.BaseGateway, "__init__", bare_init)
    named = [line.partition(" (")[0] for line in xdist_internals.missing()]
    assert named == ["DSession.sched", "DSession._active_nodes", "BaseGateway._io"]


HOLDERS_CONFTEST = """
import json
from pytest_vlaeval.distribute import xdist_internals


class Holders:
    def __init__(self, config):
        self.config = config
        self.held = {}
        self.ran = {}

    def pytest_runtest_logstart(self, nodeid):
        self.held[nodeid] = xdist_internals.holder(self.config, nodeid)

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.ran[report.nodeid] = report.node.gateway.id

    def pytest_sessionfinish(self):
        with open("holders.json", "w") as file:
            json.dump({"held": self.held, "ran": self.ran}, file)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Holders(config))
"""


def test_the_holder_of_each_test_is_the_worker_that_runs_it(pytester: pytest.Pytester) -> None:
    """``holder`` reads xdist's own session plugin and load scheduler in a real session: as each
    test starts, it names the worker the test was sent to, the one whose report then comes back."""
    pytester.makeconftest(HOLDERS_CONFTEST)
    pytester.makepyfile("import time\n\n" + "".join(f"def test_{i}():\n    time.sleep(0.05)\n\n" for i in range(8)))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    seen = json.loads((pytester.path / "holders.json").read_text())
    assert len(seen["ran"]) == 8
    assert seen["held"] == seen["ran"]
    assert set(seen["ran"].values()) == {"gw0", "gw1"}


def test_a_real_gateway_says_its_process_and_is_cut_off_without_waiting() -> None:
    gateway = execnet.makegateway("popen")
    assert gateway._io is not None, "the connection cut_connection closes"
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
