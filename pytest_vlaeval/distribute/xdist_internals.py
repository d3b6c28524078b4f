"""The one place that names pytest-xdist's and execnet's private attributes this package relies on,
each behind a function saying what it is for; ``missing`` lists the ones a session's xdist no
longer has (a test runs it against the installed xdist, so an upgrade that drops one fails there,
loudly, not in a user's session).

Public hooks cover the rest: ``pytest_xdist_setupnodes`` (the backends start), ``pytest_configure_node``,
``pytest_testnodeready`` (a worker's ender handed to the watch), ``pytest_xdist_make_scheduler``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import execnet.gateway
import execnet.gateway_base
import pytest
import xdist
import xdist.dsession
import xdist.plugin
import xdist.scheduler
import xdist.workermanage

SUPPORTED = "pytest-xdist 3.6 to 3.8"


def missing() -> list[str]:
    """The private names of xdist's and execnet's modules and classes this package uses that are
    not there. A name set on each instance is looked for in its class's ``__init__``, so no
    session or gateway has to be made to check it."""
    on_module_or_class = [
        (xdist.plugin, "_sys_path", "the controller's sys.path, handed to local workers"),
        (xdist.workermanage, "_sys_path", "the sys.path a local worker is given"),
        (xdist.dsession.DSession, "_clone_node", "how xdist replaces a lost worker"),
        (xdist.dsession.DSession, "report_line", "saying a cut-off worker is not replaced"),
        (xdist.dsession.DSession, "triggershutdown", "ending a session nobody is left to run"),
        (execnet.gateway.Gateway, "_rinfo", "a worker's process id"),
    ]
    on_instance = [
        (xdist.dsession.DSession, "sched", "the session's scheduler, which says who holds an episode"),
        (xdist.dsession.DSession, "_active_nodes", "the live workers a cut-off one is counted against"),
        (xdist.scheduler.LoadScheduling, "node2pending", "the episodes each worker was sent"),
        (xdist.scheduler.LoadScheduling, "collection", "the node ids those episodes index"),
        (execnet.gateway_base.BaseGateway, "_io", "the connection cut to a frozen worker"),
    ]
    gone = [
        f"{owner.__name__}.{name} ({why})" for owner, name, why in on_module_or_class if not hasattr(owner, name)
    ] + [
        f"{owner.__name__}.{name} ({why})"
        for owner, name, why in on_instance
        if name not in owner.__init__.__code__.co_names
    ]
    if not all(isinstance(getattr(m, "_sys_path", None), list) for m in (xdist.plugin, xdist.workermanage)):
        gone.append("xdist's _sys_path is no longer a list")
    return gone


def dsession(config: pytest.Config) -> Any | None:
    """xdist's session plugin, in a session with xdist workers (None: a session without)."""
    return config.pluginmanager.get_plugin("dsession")


def holder(config: pytest.Config, nodeid: str) -> str | None:
    """The id of the xdist worker that was sent ``nodeid`` and has not completed it, read from
    the session's scheduler (this package's and xdist's load schedulers keep ``node2pending``);
    None when it cannot be told."""
    scheduler = getattr(dsession(config), "sched", None)
    collection = getattr(scheduler, "collection", None) or []
    for node, pending in getattr(scheduler, "node2pending", {}).items():
        if any(collection[index] == nodeid for index in pending):
            return node.gateway.id
    return None


def controller_sys_path() -> list[str]:
    """The controller's ``sys.path`` as xdist froze it at its import (its own copy: the one it hands
    workers may hold an earlier session's rewrite)."""
    return list(xdist.plugin._sys_path)


def local_workers_sys_path() -> list[str]:
    return list(xdist.workermanage._sys_path)


def set_local_workers_sys_path(path: list[str]) -> None:
    """The ``sys.path`` xdist hands every local (popen) worker it sets up from now on."""
    xdist.workermanage._sys_path = list(path)


def worker_pid(gateway: Any) -> int:
    """The worker's process id on its own host (execnet asks the worker once, and keeps it)."""
    return gateway._rinfo().pid


def cut_connection(gateway: Any) -> None:
    """Close a gateway to a frozen peer without waiting on it: end the local process that carries
    it (ssh), exit, and stop reading its side, which a frozen peer never closes."""
    with contextlib.suppress(OSError, AttributeError):
        gateway._io.kill()
    gateway.exit()
    with contextlib.suppress(OSError, AttributeError):
        gateway._io.close_read()


def replace_lost_workers_unless(dsession: Any, keep_down: Callable[[Any], bool]) -> None:
    """xdist replaces a lost worker with a new one of the same spec; one ``keep_down`` names is not
    replaced, and when it leaves nobody to run what it held, the session ends."""
    clone = dsession._clone_node

    def clone_unless_kept_down(node: Any) -> Any:
        if keep_down(node):
            dsession.report_line(f"not replacing {node.gateway.id}: its host stopped answering")
            if not [other for other in dsession._active_nodes if other is not node]:
                dsession.triggershutdown()
            return None
        return clone(node)

    dsession._clone_node = clone_unless_kept_down
