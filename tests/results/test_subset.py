"""Which episodes a session runs: shards of any count cost what the episodes cost, and an episode
list is read only when it is a regular file of bounded size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_vlaeval.benchmark.model import Selection, load_benchmark, select
from pytest_vlaeval.choices import EPISODE_LIST_MAX_MIB
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.subset import parse_shard, read_episode_list, shard, unfinished_shards

HERE = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def short() -> Selection:
    return select(load_benchmark(HERE / "fake.yaml"), "short")  # 2 tasks x 3 seeds


@pytest.mark.parametrize("count", [10**9, 999_999_999_999, 10**18 - 1])
def test_more_shards_than_episodes_leave_the_extra_shards_empty_at_no_cost(short: Selection, count: int) -> None:
    parts = [shard(short, index, count) for index in range(1, 7)]
    assert sorted(key for part in parts for key in part) == sorted(short.episode_ids), "one episode a shard"
    assert shard(short, 7, count) == [] and shard(short, count, count) == []
    assert unfinished_shards(short, count, set()) == [1, 2, 3, 4, 5, 6]
    assert unfinished_shards(short, count, set(parts[2])) == [1, 2, 4, 5, 6]


@pytest.mark.parametrize("value", ["1/" + "9" * 19, "1/" + "9" * 5000, "9" * 5000 + "/1"])
def test_a_shard_count_of_too_many_digits_is_one_line(value: str) -> None:
    with pytest.raises(SpecError, match=r"^--vla-shard '\d+/\d+': expected I/N with 1 <= I <= N"):
        parse_shard(value)


def test_an_episode_list_that_is_not_a_regular_file_is_refused_without_reading_it(
    short: Selection, tmp_path: Path
) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # opening it to read would wait for a writer forever
    for path in (Path("/dev/zero"), pipe, tmp_path):
        with pytest.raises(SpecError, match=rf"^--vla-episode-list {path}: not a regular file$"):
            read_episode_list(path, short)


def test_an_episode_list_over_the_cap_is_refused(short: Selection, tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(EPISODE_LIST_MAX_MIB * 2**20 + 1)  # sparse: no disk, but a size no run's episodes need
    with pytest.raises(SpecError, match=rf"^--vla-episode-list {huge}: larger than {EPISODE_LIST_MAX_MIB} MiB"):
        read_episode_list(huge, short)
    at_cap = tmp_path / "at-cap.json"
    at_cap.write_text('[["Alpha-v0", 100]]'.ljust(EPISODE_LIST_MAX_MIB * 2**20))
    assert read_episode_list(at_cap, short) == [("Alpha-v0", 100)]
