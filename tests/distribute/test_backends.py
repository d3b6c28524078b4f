"""A worker backend's lifecycle (``distribute.backends``): what ``start`` sets up for local workers in
a benchmark's own interpreter, ``stop`` undoes, so a later session in the same process starts clean."""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_vlaeval.distribute import xdist_internals
from pytest_vlaeval.distribute.backends import LocalWorkers, OwnInterpreter


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
