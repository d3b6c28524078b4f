"""The server's episode table on its own: admission, one request in flight, closing, reaping."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_vlaeval.policy import EpisodeInfo
from pytest_vlaeval.serving.server.connection import Connection, Refused
from pytest_vlaeval.serving.server.table import EpisodeTable
from pytest_vlaeval.serving.wire import native as protocol


def info(seed: int) -> EpisodeInfo:
    return EpisodeInfo(task="Task-v0", seed=seed, instruction="", episode_index=0, max_steps=5)


def table(**limits: Any) -> tuple[EpisodeTable, list[Any]]:
    released: list[Any] = []

    def submit(episode: Any, obs: dict[str, Any]) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    settings = {"max_episodes": 2, "admission_timeout_s": 0.05, "idle_timeout_s": 60.0, **limits}
    return EpisodeTable(**settings, submit=submit, release=released.append), released


async def reset(episode: Any) -> None:
    pass


def test_admission_is_limited_and_a_closed_episode_frees_its_slot() -> None:
    async def scenario() -> None:
        episodes, released = table(max_episodes=1)
        first, second = Connection(ws=None), Connection(ws=None)  # type: ignore[arg-type]
        entry = await episodes.admit(first, "a", info(1), reset)
        with pytest.raises(Refused, match=r"no free episode slot within 0\.05 s") as refused:
            await episodes.admit(second, "b", info(2), reset)
        assert refused.value.code == protocol.ADMISSION
        episodes.close(entry, None)
        episodes.close(entry, None)  # idempotent
        assert released == [entry.episode]
        await episodes.admit(second, "b", info(2), reset)
        assert [entry.id for entry in episodes.episodes.values()] == ["b"] and list(second.episodes) == ["b"]

    asyncio.run(scenario())


def test_one_request_in_flight_and_steps_never_go_back() -> None:
    async def scenario() -> None:
        episodes, _ = table()
        connection = Connection(ws=None)  # type: ignore[arg-type]
        entry = await episodes.admit(connection, "a", info(1), reset)
        future = episodes.submit(entry, 3, {})
        with pytest.raises(Refused, match="already has a request in flight"):
            episodes.submit(entry, 4, {})
        future.set_result(None)
        await asyncio.sleep(0)
        with pytest.raises(Refused, match="step 2 goes back from step 3"):
            episodes.submit(entry, 2, {})
        assert episodes.requests == 1

    asyncio.run(scenario())


def test_idle_episodes_are_reaped_and_remembered() -> None:
    async def scenario() -> None:
        episodes, released = table(idle_timeout_s=1.0)
        connection = Connection(ws=None)  # type: ignore[arg-type]
        entry = await episodes.admit(connection, "a", info(1), reset)
        episodes.reap(entry.last_active + 0.5)
        assert episodes.reaped == 0
        episodes.reap(entry.last_active + 2.0)
        assert episodes.reaped == 1 and released == [entry.episode]
        with pytest.raises(Refused, match="was closed by the server after 1 s without a request"):
            episodes.find(connection, "a")
        with pytest.raises(Refused, match="episode b is not open on this connection"):
            episodes.find(connection, "b")

    asyncio.run(scenario())


def test_episode_ids_are_each_connections_own_and_reveal_nothing_of_another() -> None:
    async def scenario() -> None:
        episodes, _ = table(idle_timeout_s=1.0)
        mine, theirs = Connection(ws=None), Connection(ws=None)  # type: ignore[arg-type]
        held = await episodes.admit(theirs, "e", info(1), reset)
        own = await episodes.admit(mine, "e", info(2), reset)  # another connection's "e" is no business of mine
        assert own.episode.id != held.episode.id, "the policy tells the two apart"
        with pytest.raises(Refused, match=r"^episode e is already open$"):
            await episodes.admit(mine, "e", info(3), reset)
        episodes.reap(held.last_active + 2.0)  # both idle: both closed, each on its own connection
        for connection in (mine, theirs):
            with pytest.raises(Refused, match="episode e was closed by the server after 1 s"):
                episodes.find(connection, "e")
        late = await episodes.admit(theirs, "f", info(4), reset)
        episodes.reap(late.last_active + 2.0)
        with pytest.raises(Refused, match=r"^episode f is not open on this connection$"):
            episodes.find(mine, "f")  # not "closed by the server": that was another connection's "f"

    asyncio.run(scenario())
