"""A policy server on an event loop in a thread of the calling process.

This is how a policy that exists only as an in-memory object (a model being trained) reaches
evaluation workers in other processes: it is served from where it lives, and the workers
connect to it as to any ``ws://`` server.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pytest_vlaeval.serving.server.policy_server import PolicyServer, ServerConfig

if TYPE_CHECKING:
    from pytest_vlaeval.policy.sources import PolicySource


class ServerThread:
    """``with ServerThread(name, config, factory) as url:`` serves until the block ends."""

    def __init__(self, spec: PolicySource, config: ServerConfig, factory: Callable[[], Any] | None = None) -> None:
        self.server = PolicyServer(spec, config, factory)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="vlaeval-server", daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        return self.server.url

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        self.server.join_policy_thread()

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            await self.server.start()
            await self.server.load()
        except BaseException as exc:
            self._failure = exc
        finally:
            self._ready.set()
        try:
            if self._failure is None:
                await self._stop.wait()
        finally:
            await self.server.stop()
