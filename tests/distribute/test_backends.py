"""A worker backend's lifecycle (``distribute.backends``): what ``start`` sets up for local workers in
a benchmark's own interpreter, ``stop`` undoes, so a later session in the same process starts clean;
which backend owns a worker; and ``WorkerBackends`` running any sequence of backends in a real
xdist session."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import execnet
import pytest

from pytest_vlaeval.distribute import xdist_internals
from pytest_vlaeval.distribute.backends import GatewayWorkers, LocalWorkers, OwnInterpreter, WorkerBackends


def test_the_own_interpreters_path_is_handed_to_local_workers_and_taken_back_at_stop() -> None:
    before = xdist_internals.local_workers_sys_path()
    own = ("/opt/benchmark/lib/python3.12", "/opt/benchmark/lib/python3.12/site-packages")
    workers = LocalWorkers(OwnInterpreter(Path(sys.executable), own))
    workers.start(None, [])  # type: ignore[arg-type]  (start reads neither)
    try:
        handed = xdist_internals.local_workers_sys_path()
        assert handed[-2:] == list(own), "the benchmark's own packages come last, after the user's folders"
        assert not any(entry.startswith(sys.prefix + "/") for entry in handed), "none of this env's packages"
    finally:
        workers.stop()
    assert xdist_internals.local_workers_sys_path() == before


def test_without_an_own_interpreter_nothing_is_changed() -> None:
    before = xdist_internals.local_workers_sys_path()
    workers = LocalWorkers(None)
    workers.start(None, [])  # type: ignore[arg-type]
    assert xdist_internals.local_workers_sys_path() == before
    workers.stop()
    assert xdist_internals.local_workers_sys_path() == before


def test_each_worker_is_the_backend_that_owns_its_spec() -> None:
    local, remote = LocalWorkers(None), GatewayWorkers()
    backends = WorkerBackends((local, remote))
    assert backends.backend_of(execnet.XSpec("popen")) is local
    for elsewhere in ("ssh=user@host", "socket=127.0.0.1:8888", "popen//via=gw0"):
        assert backends.backend_of(execnet.XSpec(elsewhere)) is remote, elsewhere


def test_a_backend_placed_first_takes_the_specs_it_owns() -> None:
    class Pinned(LocalWorkers):
        def owns(self, spec: execnet.XSpec) -> bool:
            return spec.id == "pinned"

    pinned, local = Pinned(None), LocalWorkers(None)
    backends = WorkerBackends((pinned, local, GatewayWorkers()))
    assert backends.backend_of(execnet.XSpec("popen//id=pinned")) is pinned
    assert backends.backend_of(execnet.XSpec("popen")) is local


LIFECYCLE_CONFTEST = """
import json
from pytest_vlaeval.distribute.backends import WorkerBackends
from pytest_vlaeval.distribute.watch import EpisodeWatch


class Recorded:
    \"\"\"A backend of its own, owning every worker: what the lifecycle asks of it, in order.\"\"\"

    def __init__(self):
        self.calls = []

    def owns(self, spec):
        return True

    def specs(self, config):
        pass

    def start(self, config, specs):
        self.calls.append(["start", sorted(spec.id for spec in specs)])

    def stop(self):
        self.calls.append("stop")
        with open("lifecycle.json", "w") as file:
            json.dump(self.calls, file)

    def end(self, gateway, cut_off):
        self.calls.append(["ready", gateway.id])
        return lambda: "ended"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        backends = WorkerBackends((Recorded(),))
        config.pluginmanager.register(backends, "backends-under-test")


def pytest_sessionstart(session):
    backends = session.config.pluginmanager.get_plugin("backends-under-test")
    if backends is not None:
        watch = backends.start_watch(session.config, EpisodeWatch(None, 1, print, lambda stalled: None))
        session.config.add_cleanup(watch.stop)
"""


def test_the_backends_plugin_runs_any_backend_through_a_real_session(pytester: pytest.Pytester) -> None:
    """Set up before any worker, each worker's ender handed to the watch as it comes up, undone at
    the end: the lifecycle asks only what ``WorkerBackend`` says, so one more class is one more
    backend."""
    pytester.makeconftest(LIFECYCLE_CONFTEST)
    pytester.makepyfile("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    calls = json.loads((pytester.path / "lifecycle.json").read_text())
    assert calls[0] == ["start", ["gw0", "gw1"]]
    assert sorted(calls[1:-1]) == [["ready", "gw0"], ["ready", "gw1"]]
    assert calls[-1] == "stop"
