"""Where a session's workers start, what is set up for them and undone after, and how a frozen
one is ended: one class per backend behind ``WorkerBackend``, each saying which xdist specs it
``owns``.

A backend's lifecycle: ``specs`` edits the xdist specs it owns while the session is configured
(before xdist reads ``-n``/``--tx``); ``start`` runs from xdist's ``pytest_xdist_setupnodes``,
before any worker is set up; ``stop`` undoes it when the session ends; ``end`` says how to end
one of its workers that froze.

- ``LocalWorkers``: popen workers on this host (``-n``), started in a benchmark's interpreter of
  its own where it has one. A frozen one gets SIGKILL by its process id, and xdist replaces it.
- ``GatewayWorkers``: xdist's gateways to other hosts (``--tx ssh=``, ``socket=``). A remote
  worker's process id names a process on its own host (and in its own PID namespace):
  signalling that number here would hit an unrelated local process. Its connection is closed
  instead, and it is not replaced: its host may be frozen too (``WorkerBackends.start_watch``).

``WorkerBackends`` is the one session plugin of the lifecycle, over a sequence of backends: it
starts and stops them, hands the frozen-worker watch (``watch.py``) each worker's ender as the
worker comes up, and keeps a worker the watch cut off from being replaced. ``--vla-placement``
gives each worker, of any backend, its GPUs. A job array (``vlaeval slurm``, ``--vla-shard=auto``)
needs no backend here: each array task is a session of local workers. Another backend (Ray, a
Kubernetes pod per worker) is one more class in the sequence ``place_workers`` builds. xdist's
private attributes are named in ``xdist_internals`` alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from pytest_vlaeval.distribute import placement, xdist_internals
from pytest_vlaeval.distribute.watch import EpisodeWatch
from pytest_vlaeval.errors import SpecError


@dataclass(frozen=True)
class OwnInterpreter:
    """A benchmark's interpreter of its own, as its local workers start in it: its executable and
    its ``sys.path``, read when the session checked it (``install.interpreters.probe``)."""

    python: Path
    path: tuple[str, ...]


class WorkerBackend(Protocol):
    def owns(self, spec: Any) -> bool:
        """Whether a worker of this xdist spec (``execnet.XSpec``) is this backend's."""
        ...

    def specs(self, config: pytest.Config) -> None:
        """Edit the xdist specs this backend owns (``config.option.tx``), before xdist reads them."""
        ...

    def start(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        """Before any worker is set up (xdist's ``pytest_xdist_setupnodes``)."""
        ...

    def stop(self) -> None:
        """When the session ends: undo what ``start`` changed."""
        ...

    def end(self, gateway: Any, cut_off: set[str]) -> Callable[[], str]:
        """How to end this backend's frozen worker: a callable that ends it and says how."""
        ...


def on_this_host(spec: Any) -> bool:
    """A popen worker runs on this host, unless it is started through a gateway to another."""
    return bool(spec.popen and not spec.via)


class LocalWorkers:
    def __init__(self, interpreter: OwnInterpreter | None = None) -> None:
        self.interpreter = interpreter
        self._handed: list[str] | None = None
        """The sys.path xdist handed local workers before ``start`` changed it."""

    def owns(self, spec: Any) -> bool:
        return on_this_host(spec)

    def specs(self, config: pytest.Config) -> None:
        """In a benchmark's own interpreter every local worker starts there: one worker without
        ``-n``. A spec that names its own ``python=`` is kept as given."""
        if self.interpreter is None:
            return
        if not config.pluginmanager.has_plugin("xdist"):
            raise SpecError("this benchmark's workers run in an interpreter of their own, which needs pytest-xdist")
        if not config.option.tx:
            config.option.tx = ["popen"]
            if config.option.dist == "no":
                config.option.dist = "load"
        python = self.interpreter.python
        config.option.tx = [
            f"{spec}//python={python}"
            if spec.split("//")[0].split("*")[-1] == "popen" and "python=" not in spec
            else spec
            for spec in config.option.tx
        ]
        gone = xdist_internals.missing()
        if gone:
            raise SpecError(
                f"this pytest-xdist no longer has {gone[0]}, which a benchmark in an interpreter of its own "
                f"needs: use {xdist_internals.SUPPORTED}"
            )

    def start(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        """xdist hands every local worker the controller's ``sys.path``, which in another
        interpreter would import this env's packages (its numpy, its gymnasium) before the
        worker's own. The workers' path becomes the controller's own folders (the working
        directory, ``PYTHONPATH``: the user's code), then the benchmark interpreter's path: its
        standard library and its packages."""
        if self.interpreter is None:
            return
        prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        users = [
            entry
            for entry in xdist_internals.controller_sys_path()
            if entry and not any(os.path.realpath(entry).startswith(prefix + os.sep) for prefix in prefixes)
        ]
        self._handed = xdist_internals.local_workers_sys_path()
        xdist_internals.set_local_workers_sys_path(list(dict.fromkeys([*users, *self.interpreter.path])))

    def stop(self) -> None:
        if self._handed is not None:
            xdist_internals.set_local_workers_sys_path(self._handed)
            self._handed = None

    def end(self, gateway: Any, cut_off: set[str]) -> Callable[[], str]:
        pid = xdist_internals.worker_pid(gateway)  # asked once, when the worker is set up

        def end() -> str:
            with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
                os.kill(pid, signal.SIGKILL)
            return "ending it; xdist replaces it"

        return end


class GatewayWorkers:
    def owns(self, spec: Any) -> bool:
        """Every worker not on this host: an ssh or socket one, or a popen one through a ``via``."""
        return not on_this_host(spec)

    def specs(self, config: pytest.Config) -> None:
        return None  # a remote spec is the user's, as given

    def start(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        return None

    def stop(self) -> None:
        return None

    def end(self, gateway: Any, cut_off: set[str]) -> Callable[[], str]:
        spec, pid = gateway.spec, xdist_internals.worker_pid(gateway)
        where = spec.socket or (spec.ssh.split()[-1] if spec.ssh else None) or spec.via or "another host"

        def end() -> str:
            cut_off.add(gateway.id)
            xdist_internals.cut_connection(gateway)
            return (
                f"it runs on {where} (process {pid} there), which cannot be signalled from here: its connection is "
                f"closed and the session goes on without it; end process {pid} on {where} if it still runs"
            )

        return end


class WorkerBackends:
    """The one session plugin of the workers' lifecycle, run from xdist's public hooks: each
    backend set up before any worker (``pytest_xdist_setupnodes``) and undone at the end
    (``pytest_unconfigure``); the watch given each worker's ender as it comes up
    (``pytest_testnodeready``); a worker the watch cut off kept down (as xdist's own
    ``NodeManager`` keeps every node's lifecycle in one class)."""

    def __init__(self, backends: Sequence[WorkerBackend]) -> None:
        self.backends = tuple(backends)
        """Each worker is the first one's that ``owns`` its spec."""
        self.cut_off: set[str] = set()
        """Workers whose connection the watch closed: their host may be frozen too."""
        self._watch: EpisodeWatch | None = None

    def backend_of(self, spec: Any) -> WorkerBackend:
        """The backend of a worker, by its xdist spec."""
        for backend in self.backends:
            if backend.owns(spec):
                return backend
        raise LookupError(f"no worker backend owns the xdist spec {spec}")

    def start_watch(self, config: pytest.Config, watch: EpisodeWatch) -> EpisodeWatch | None:
        """Start ``watch`` over this session's xdist workers: each worker hands it its ender as it
        comes up. None, and nothing started, in a session without xdist workers.

        xdist replaces a lost worker with a new one of the same spec; for a remote worker the
        watch cut off, that means connecting to a host that may be frozen too, and waiting on it
        forever. Such a worker is not replaced; others are. When it leaves nobody to run what it
        held, the session ends (the rest is recorded as lost)."""
        dsession = xdist_internals.dsession(config)
        if dsession is None:
            return None
        xdist_internals.replace_lost_workers_unless(dsession, lambda node: node.gateway.id in self.cut_off)
        self._watch = watch
        watch.start()
        return watch

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        for backend in self.backends:
            backend.start(config, specs)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        """Note how to end the worker, for the watch to end it if it freezes (its backend asks
        what it needs, a process id, now, while the worker still answers)."""
        if self._watch is not None:
            ender = self.backend_of(node.gateway.spec).end(node.gateway, self.cut_off)
            self._watch.worker_ready(node.gateway.id, ender)

    def pytest_unconfigure(self) -> None:
        for backend in self.backends:
            backend.stop()


WORKERS_PLUGIN = "vlaeval-workers"


def worker_specs(config: pytest.Config) -> list[Any]:
    """``--vla-placement`` applied to the xdist specs, then the workers the session starts, one
    spec (``execnet.XSpec``) each, as ``-n``, ``--tx`` and the placement give them; empty: a serial
    session. Called once, before ``place_workers``."""
    placement.apply(config)
    if not getattr(config.option, "tx", None) or config.option.dist == "no":
        return []
    import execnet
    from xdist.workermanage import parse_tx_spec_config

    return [execnet.XSpec(spec) for spec in parse_tx_spec_config(config)]


def place_workers(config: pytest.Config, interpreter: OwnInterpreter | None = None) -> WorkerBackends:
    """The worker specs xdist starts (``config.option.tx``), before xdist reads them: ``-n``
    and ``--tx`` as given and placed on GPUs (``worker_specs``, called first), and each backend's
    own edits; the backends' plugin registered to run their lifecycle."""
    backends = WorkerBackends((LocalWorkers(interpreter), GatewayWorkers()))
    for backend in backends.backends:
        backend.specs(config)
    config.pluginmanager.register(backends, WORKERS_PLUGIN)
    return backends
