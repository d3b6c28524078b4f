"""Where a session's workers start and how a frozen one is ended: one class per backend behind
``WorkerBackend``, chosen per worker by its xdist spec.

- ``LocalWorkers``: popen workers on this host (``-n``). A frozen one gets SIGKILL by its process
  id, and xdist replaces it.
- ``GatewayWorkers``: xdist's gateways to other hosts (``--tx ssh=``, ``socket=``). A remote
  worker's process id names a process on its own host (and in its own PID namespace):
  signalling that number here would hit an unrelated local process. Its connection is closed
  instead (for ssh, by ending the local ssh process that carries it), and it is not replaced:
  its host may be frozen too (``keep_cut_off_workers_down``).

``place_workers`` hands xdist the worker specs (``--vla-placement`` gives each worker, of either
backend, its GPUs). A job array (``vlaeval slurm``, ``--vla-shard=auto``) needs no backend here:
each array task is a session of local workers. A Ray or Kubernetes backend is one more class (how
it ends one of its workers) and its specs in ``place_workers``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from pytest_vlaeval.distribute import placement
from pytest_vlaeval.errors import SpecError


@dataclass(frozen=True)
class OwnInterpreter:
    """A benchmark's interpreter of its own, as its local workers start in it: its executable and
    its ``sys.path``, read when the session checked it (``install.interpreters.probe``)."""

    python: Path
    path: tuple[str, ...]


def place_workers(config: pytest.Config, interpreter: OwnInterpreter | None = None) -> None:
    """The worker specs xdist starts (``config.option.tx``), before xdist reads them: ``-n``
    and ``--tx`` as given, ``--vla-placement`` giving each worker, local or remote, its GPUs, and
    ``interpreter`` (a benchmark's own) starting every local worker: one worker without ``-n``. A
    spec that names its own ``python=`` (a remote host's) is kept as given."""
    placement.apply(config)
    if interpreter is None:
        return
    if not config.pluginmanager.has_plugin("xdist"):
        raise SpecError("this benchmark's workers run in an interpreter of their own, which needs pytest-xdist")
    if not config.option.tx:
        config.option.tx = ["popen"]
        if config.option.dist == "no":
            config.option.dist = "load"
    python = interpreter.python
    config.option.tx = [
        f"{spec}//python={python}" if spec.split("//")[0].split("*")[-1] == "popen" and "python=" not in spec else spec
        for spec in config.option.tx
    ]
    _keep_workers_own_packages(interpreter.path)


def _keep_workers_own_packages(own: tuple[str, ...]) -> None:
    """xdist hands every local worker the controller's ``sys.path`` (frozen at its import, in
    ``xdist.workermanage._sys_path``), which in another interpreter would import this env's
    packages (its numpy, its gymnasium) before the worker's own. The workers' path becomes the
    controller's own folders (the working directory, ``PYTHONPATH``: the user's code), then the
    benchmark interpreter's path ``own``: its standard library and its packages."""
    import xdist.plugin
    import xdist.workermanage

    if not all(isinstance(getattr(module, "_sys_path", None), list) for module in (xdist.plugin, xdist.workermanage)):
        raise SpecError(
            f"pytest-xdist {xdist.__version__} no longer hands local workers a sys.path this plugin can set; "
            "a benchmark in an interpreter of its own needs pytest-xdist 3.6 to 3.8"
        )
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    users = [  # from xdist's own copy: the one in workermanage may hold an earlier session's rewrite
        entry
        for entry in xdist.plugin._sys_path
        if entry and not any(os.path.realpath(entry).startswith(prefix + os.sep) for prefix in prefixes)
    ]
    xdist.workermanage._sys_path = list(dict.fromkeys([*users, *own]))


class WorkerBackend(Protocol):
    def ender(self, gateway: Any, cut_off: set[str]) -> Callable[[], str]:
        """How to end this backend's frozen worker: a callable that ends it and says how."""
        ...


class LocalWorkers:
    def ender(self, gateway: Any, cut_off: set[str]) -> Callable[[], str]:
        pid = gateway._rinfo().pid  # asked once, when the worker is set up

        def end() -> str:
            with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
                os.kill(pid, signal.SIGKILL)
            return "ending it; xdist replaces it"

        return end


class GatewayWorkers:
    def ender(self, gateway: Any, cut_off: set[str]) -> Callable[[], str]:
        spec, pid = gateway.spec, gateway._rinfo().pid
        where = spec.socket or (spec.ssh.split()[-1] if spec.ssh else None) or spec.via or "another host"

        def end() -> str:
            cut_off.add(gateway.id)
            with contextlib.suppress(OSError, AttributeError):
                gateway._io.kill()  # an ssh connection is a local ssh process: end it first, or exit() blocks
            gateway.exit()
            with contextlib.suppress(OSError, AttributeError):
                gateway._io.close_read()  # a frozen peer never closes its side: stop waiting on it here
            return (
                f"it runs on {where} (process {pid} there), which cannot be signalled from here: its connection is "
                f"closed and the session goes on without it; end process {pid} on {where} if it still runs"
            )

        return end


def backend_of(spec: Any) -> WorkerBackend:
    """The backend of a worker, by its xdist spec (an ssh or socket one is on another host)."""
    return LocalWorkers() if spec.popen and not spec.via else GatewayWorkers()


def keep_cut_off_workers_down(dsession: Any, cut_off: set[str]) -> None:
    """xdist replaces a lost worker with a new one of the same spec; for a remote worker the watch
    cut off, that means connecting to a host that may be frozen too, and waiting on it forever.
    Such a worker is not replaced (xdist's ``DSession._clone_node``, wrapped); others are. When it
    leaves nobody to run what it held, the session ends (the rest is recorded as lost)."""
    clone = dsession._clone_node

    def clone_unless_cut_off(node: Any) -> Any:
        if node.gateway.id in cut_off:
            dsession.report_line(f"not replacing {node.gateway.id}: its host stopped answering")
            if not [other for other in dsession._active_nodes if other is not node]:
                dsession.triggershutdown()
            return None
        return clone(node)

    dsession._clone_node = clone_unless_cut_off
