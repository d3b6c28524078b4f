"""Episodes as pytest items (``collect``, ``nodeid``): one per (task, seed), their node ids and
markers, and selection with ``-m``, ``-k``, ``--episodes`` and ``--vla-start-seed``."""

from __future__ import annotations

import pytest

SHORT = ["--benchmark=fake.yaml:short"]


def test_episode_node_ids_markers_and_no_user_tests(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_user="def test_mine(): pass")
    result = fake.runpytest("--benchmark=fake.yaml", "--co", "-q", "--strict-markers", "-m", "short and object")
    assert result.ret == 0
    ids = [line for line in result.outlines if "::" in line]
    assert ids == ["fake-short::Alpha-v0::100", "fake-short::Alpha-v0::101", "fake-short::Alpha-v0::102"]
    assert not (fake.path / "results").exists(), "collect-only must not write results"


def test_k_selection_and_episode_count(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "--co", "-q", "--episodes=2", "--vla-start-seed=7", "-k", "Beta")
    assert [line for line in result.outlines if "::" in line] == ["fake-short::Beta-v0::7", "fake-short::Beta-v0::8"]
