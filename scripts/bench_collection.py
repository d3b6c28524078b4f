"""Collection cost per episode item: ``python scripts/bench_collection.py BENCHMARK EPISODES``.

Runs ``pytest --benchmark=BENCHMARK --episodes=EPISODES --co -q`` in this process under
tracemalloc and prints the items collected, the memory they hold (traced at the end of
collection, less what was traced when it began) per item, and the time (tracemalloc slows it).
Collection builds no env, so this needs no simulator.
"""

from __future__ import annotations

import argparse
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", nargs="?", default="mikasa:short", help="a --benchmark value [mikasa:short]")
    parser.add_argument("episodes", nargs="?", type=int, default=1000, help="episodes per task [1000]")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 2 episodes per task")
    known, extra = parser.parse_known_args()
    args = [
        f"--benchmark={known.benchmark}",
        f"--episodes={2 if known.smoke else known.episodes}",
        "--co",
        "-qq",
        "-p",
        "no:cacheprovider",
        *extra,
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
