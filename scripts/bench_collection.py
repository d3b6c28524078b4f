"""Collection cost per episode item: ``python scripts/bench_collection.py BENCHMARK EPISODES``.

Runs ``pytest --benchmark=BENCHMARK --episodes=EPISODES --co -q`` in this process under
tracemalloc and prints the items collected, the memory they hold (traced at the end of
collection, less what was traced when it began) per item, and the time (tracemalloc slows it).
"""

from __future__ import annotations

import sys
import time
import tracemalloc

import pytest


class Count:
    items = 0
    before = 0
    held = 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self) -> None:
        Count.before = tracemalloc.get_traced_memory()[0]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        Count.items = len(session.items)
        Count.held = tracemalloc.get_traced_memory()[0] - Count.before


def main() -> None:
    benchmark, episodes = sys.argv[1], sys.argv[2]
    args = [
        f"--benchmark={benchmark}",
        f"--episodes={episodes}",
        "--co",
        "-qq",
        "-p",
        "no:cacheprovider",
        *sys.argv[3:],
    ]
    tracemalloc.start()
    start = time.perf_counter()
    status = pytest.main(args, plugins=[Count()])
    seconds = time.perf_counter() - start
    items = max(Count.items, 1)
    held = Count.held
    print(
        f"exit {int(status)}: {Count.items} items hold {held / 2**20:.1f} MiB, {held / items:.0f} B/item, {seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
