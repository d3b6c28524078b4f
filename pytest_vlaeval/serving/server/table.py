"""The server's episode table: admission, the open episodes, their one request in flight, closing
and idle reaping. No network here: a protocol handler calls it with a ``Connection`` (anything
with an ``episodes`` dict and an ``opening`` count), so it is tested without websockets."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from pytest_vlaeval.policy.batched import BatchEpisode, Outcome
from pytest_vlaeval.policy.contract import EpisodeInfo
from pytest_vlaeval.serving.server.admission import EpisodeSlots
from pytest_vlaeval.serving.server.connection import Connection, OpenEpisode, Refused, served_id
from pytest_vlaeval.serving.wire import native as protocol

log = logging.getLogger("pytest_vlaeval.serving")

REAPED_MEMORY = 1024
"""How many reaped episode ids are remembered, to tell a late client why its episode is gone."""


class EpisodeTable:
    def __init__(
        self,
        max_episodes: int,
        admission_timeout_s: float,
        idle_timeout_s: float,
        submit: Callable[[BatchEpisode, dict[str, Any]], asyncio.Future[Outcome]],
        release: Callable[[BatchEpisode], None],
    ) -> None:
        self.max_episodes = max_episodes
        self.admission_timeout_s = admission_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._submit = submit
        """Queue an act request (the batcher)."""
        self._release = release
        """Drop a closed episode's queued requests and policy state."""
        self.episodes: dict[str, OpenEpisode] = {}
        """Every open episode, by its server-wide id (``served_id``)."""
        self.slots = EpisodeSlots(max_episodes)
        self.requests = 0
        self.reaped = 0
        self._reaped: OrderedDict[str, None] = OrderedDict()

    async def admit(
        self,
        connection: Connection,
        episode_id: str,
        info: EpisodeInfo,
        reset: Callable[[BatchEpisode], Awaitable[Any]],
    ) -> OpenEpisode:
        """Wait for a slot, register the episode and ``reset`` its state in the policy. ``episode_id``
        is the connection's own: another connection's episodes neither block nor reveal it."""
        if episode_id in connection.episodes:
            raise Refused(protocol.BAD_REQUEST, f"episode {episode_id} is already open")
        if len(connection.episodes) + connection.opening >= self.max_episodes:
            raise Refused(protocol.ADMISSION, f"this connection already holds {self.max_episodes} episodes")
        connection.opening += 1
        try:
            admitted = await self.slots.acquire(self.admission_timeout_s)
        finally:
            connection.opening -= 1
        if not admitted:
            raise Refused(
                protocol.ADMISSION,
                f"no free episode slot within {self.admission_timeout_s:g} s: {len(self.episodes)} episodes "
                f"are open (max-episodes {self.max_episodes})",
            )
        try:  # the slot is ours: until the episode is registered (then close frees it), give it back on any exit
            if episode_id in connection.episodes:
                raise Refused(protocol.BAD_REQUEST, f"episode {episode_id} is already open")
            loop = asyncio.get_running_loop()
            episode = BatchEpisode(served_id(connection, episode_id), info)
            entry = OpenEpisode(episode_id, episode, connection, loop.time())
        except BaseException:
            self.slots.release()
            raise
        self.episodes[episode.id] = entry
        connection.episodes[episode_id] = entry
        try:
            await reset(entry.episode)
        except BaseException:
            self.close(entry, None)
            raise
        return entry

    def find(self, connection: Connection, episode_id: str) -> OpenEpisode:
        """The connection's open episode ``episode_id``; ``Refused`` saying why it is not open."""
        entry = connection.episodes.get(episode_id)
        if entry is None:
            raise Refused(protocol.UNKNOWN_EPISODE, self.why_unknown(connection, episode_id))
        return entry

    def submit(self, entry: OpenEpisode, step: int, obs: dict[str, Any]) -> asyncio.Future[Outcome]:
        """The episode's next act request (one in flight at a time, steps never going back)."""
        if entry.request is not None:
            raise Refused(protocol.BUSY, f"episode {entry.id} already has a request in flight")
        if step < entry.episode.step:
            raise Refused(protocol.BAD_REQUEST, f"step {step} goes back from step {entry.episode.step}")
        entry.episode.step = step
        entry.request = future = self._submit(entry.episode, obs)
        self.requests += 1

        def settled(_: asyncio.Future[Outcome]) -> None:
            entry.request = None
            entry.last_active = asyncio.get_running_loop().time()

        future.add_done_callback(settled)
        return future

    def close(self, entry: OpenEpisode, reason: str | None) -> None:
        """Forget an episode, free its slot and its queued requests and state. Idempotent."""
        episode = entry.episode
        if self.episodes.get(episode.id) is not entry:
            return
        del self.episodes[episode.id]
        entry.connection.episodes.pop(entry.id, None)
        self._release(episode)
        self.slots.release()
        if reason:
            log.info("closed episode %s (%s seed %d): %s", episode.id, episode.info.task, episode.info.seed, reason)

    def reap(self, now: float) -> None:
        """Close the episodes idle longer than the limit, remembering their ids."""
        limit = self.idle_timeout_s
        for entry in [e for e in self.episodes.values() if e.request is None and now - e.last_active > limit]:
            self.reaped += 1
            self._reaped[entry.episode.id] = None
            while len(self._reaped) > REAPED_MEMORY:
                self._reaped.popitem(last=False)
            log.warning(
                "closed episode %s (%s seed %d) after %.0f s without a request (idle limit %g s); its state is freed",
                entry.episode.id,
                entry.episode.info.task,
                entry.episode.info.seed,
                now - entry.last_active,
                limit,
            )
            self.close(entry, None)

    def why_unknown(self, connection: Connection, episode_id: str) -> str:
        """Why the connection's ``episode_id`` is not open, from what the connection itself did."""
        if served_id(connection, episode_id) in self._reaped:
            return f"episode {episode_id} was closed by the server after {self.idle_timeout_s:g} s without a request"
        return f"episode {episode_id} is not open on this connection"
