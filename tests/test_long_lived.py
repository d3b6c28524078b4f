"""What a process keeps for its life leaves the cyclic collector, and nothing else does."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Iterator

import pytest

from pytest_vlaeval.long_lived import built_for_life


class Node:
    """A weak-referenceable object to build cycles of."""

    other: Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The suite's own process gives back what a test froze."""
    yield
    gc.unfreeze()


def _cycle() -> weakref.ref:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.mark.parametrize("enabled", [True, False])
def test_what_is_built_is_frozen_its_garbage_freed_and_the_collector_as_it_was(unfrozen: None, enabled: bool) -> None:
    before = gc.isenabled()
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    (gc.enable if enabled else gc.disable)()
    gc.callbacks.append(count)
    try:
        with built_for_life():
            assert not gc.isenabled()
            garbage = _cycle()
            kept = Node()
            kept.other = Node()
            many = [[Node()] for _ in range(50_000)]  # far past the collector's thresholds
            assert collections == []
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.remove(count)
        (gc.enable if before else gc.disable)()
    assert garbage() is None, "a cycle dropped while building was frozen, not freed"
    assert collections == [2], "one full collection, after the build"
    tracked = {id(o) for o in gc.get_objects()}
    assert id(kept) not in tracked and id(many) not in tracked
    assert gc.get_freeze_count() > 0


def test_a_build_that_raises_freezes_nothing(unfrozen: None) -> None:
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), built_for_life():
        left = _cycle()
        raise RuntimeError("the factory failed")
    assert gc.isenabled() and gc.get_freeze_count() == before
    gc.collect()
    assert left() is None, "what a failed build left is collected"


@pytest.mark.parametrize(
    ("args", "walked"),
    [
        (["--policy=spy_policies:CollectorSeen", "-n", "1"], False),
        (["--vla-serve=spy_policies:CollectorSeen"], False),
        (["--policy=spy_policies:CollectorSeen"], True),
    ],
    ids=["xdist-worker", "server-process", "serial"],
)
def test_a_process_of_the_sessions_freezes_its_policy_and_a_serial_session_leaves_the_callers_collector(
    fake: pytest.Pytester, args: list[str], walked: bool
) -> None:
    """A worker and a policy server are processes of the session's; a serial session runs in the
    caller's (``evaluate()`` in a training loop), whose objects must stay collectable."""
    fake.runpytest_subprocess("--benchmark=fake.yaml:short", "--episodes=1", *args)
    (seen,) = fake.path.glob("collector-*.json")
    assert json.loads(seen.read_text()) == {"walked": walked, "enabled": True}
