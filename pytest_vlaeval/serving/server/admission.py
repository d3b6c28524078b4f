"""Admission counted in open episodes, the one unit used everywhere (a worker holds one).

Opens beyond the limit wait first-come first-served and give up after a timeout; a slot freed
by a close goes straight to the oldest waiter, so no slot is lost to a timeout or cancellation.
"""

from __future__ import annotations

import asyncio
from collections import deque


class EpisodeSlots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self._waiters: deque[asyncio.Future[bool]] = deque()

    @property
    def waiting(self) -> int:
        return sum(not w.done() for w in self._waiters)

    async def acquire(self, timeout_s: float) -> bool:
        """True once a slot is ours, False when none came free within ``timeout_s``."""
        if self.free and not self.waiting:
            self.free -= 1
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout_s, lambda: waiter.done() or waiter.set_result(False))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()  # handed a slot in the same instant we were cancelled: pass it on
            raise
        finally:
            timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self.free += 1
