"""Groups act requests from many episodes into one policy call.

A batch goes out when it is full, when its oldest request has waited ``max_wait_s``, or when
every open episode already has a request waiting (nobody else can join), whichever comes first;
a lone request at an idle server therefore waits at most ``max_wait_s``. Requests that arrive
while a call runs are collected meanwhile and go out as soon as it returns: the wait is never
added after a policy call. Each episode has at most one request in flight (the server refuses
a second), so the queue is bounded by the number of open episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vlaeval.errors import PolicyError
from pytest_vlaeval.policy.batched import BatchEpisode, Outcome

log = logging.getLogger("pytest_vlaeval.serving")

Forward = Callable[[Sequence[BatchEpisode], Sequence[dict[str, Any]]], Awaitable[list[Outcome]]]


@dataclass(eq=False)
class Request:
    episode: BatchEpisode
    obs: dict[str, Any]
    future: asyncio.Future[Outcome]
    arrived: float


class Batcher:
    def __init__(
        self, forward: Forward, *, max_batch: int, max_wait_s: float, open_episodes: Callable[[], int]
    ) -> None:
        self.forward = forward
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.open_episodes = open_episodes
        self.sizes: Counter[int] = Counter()
        """How many batches of each size went out."""
        self.busy_s = 0.0
        self._pending: deque[Request] = deque()
        self._arrival = asyncio.Event()

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def submit(self, episode: BatchEpisode, obs: dict[str, Any]) -> asyncio.Future[Outcome]:
        loop = asyncio.get_running_loop()
        request = Request(episode, obs, loop.create_future(), loop.time())
        self._pending.append(request)
        self._arrival.set()
        return request.future

    def withdraw(self, episode: BatchEpisode) -> None:
        """Forget an episode's waiting request (its episode closed); one already running is dropped on return."""
        for request in [r for r in self._pending if r.episode is episode]:
            self._pending.remove(request)
            request.future.cancel()

    async def run(self) -> None:
        while True:
            batch = await self._next_batch()
            started = time.perf_counter()
            try:
                outcomes = await self.forward([r.episode for r in batch], [r.obs for r in batch])
            except Exception as exc:  # a server bug, not the policy's: fail this batch, keep serving
                log.exception("batch of %d failed", len(batch))
                outcomes = [PolicyError(f"server fault while serving the batch: {type(exc).__name__}: {exc}")] * len(
                    batch
                )
            self.busy_s += time.perf_counter() - started
            self.sizes[len(batch)] += 1
            for request, outcome in zip(batch, outcomes, strict=True):
                if not request.future.done():
                    request.future.set_result(outcome)

    async def _next_batch(self) -> list[Request]:
        loop = asyncio.get_running_loop()
        while True:
            timeout = None
            if self._pending:
                waited = loop.time() - self._pending[0].arrived
                full = len(self._pending) >= min(self.max_batch, self.open_episodes())
                if full or waited >= self.max_wait_s:
                    return [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]
                timeout = self.max_wait_s - waited
            self._arrival.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrival.wait(), timeout)
