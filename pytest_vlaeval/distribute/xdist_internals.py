"""The one place that names pytest-xdist's and execnet's private attributes this package relies on,
each behind a function saying what it is for; ``missing`` lists the ones a session's xdist no
longer has (a test runs it against the installed xdist, so an upgrade that drops one fails there,
loudly, not in a user's session).

Public hooks cover the rest: ``pytest_xdist_setupnodes`` (the backends start), ``pytest_configure_node``,
``pytest_testnodeready``, ``pytest_xdist_make_scheduler``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import xdist
import xdist.dsession
import xdist.plugin
import xdist.workermanage

SUPPORTED = "pytest-xdist 3.6 to 3.8"


def missing() -> list[str]:
    """The private names of xdist's modules and classes this package uses that are not there."""
    needed = [
        (xdist.plugin, "_sys_path", "the controller's sys.path, handed to local workers"),
        (xdist.workermanage, "_sys_path", "the sys.path a local worker is given"),
        (xdist.dsession.DSession, "_clone_node", "how xdist replaces a lost worker"),
    ]
    gone = [
        f"{getattr(owner, '__name__', owner)}.{name} ({why})" for owner, name, why in needed if not hasattr(owner, name)
    ]
    if not all(isinstance(getattr(m, "_sys_path", None), list) for m in (xdist.plugin, xdist.workermanage)):
        gone.append("xdist's _sys_path is no longer a list")
    return gone


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
