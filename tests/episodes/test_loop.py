"""The episode loop in real sessions: what reaches the policy (never a privileged key), and an
action the policy keeps is never changed by what the env does to the one it was given."""

from __future__ import annotations

import json

import pytest

SHORT = ["--benchmark=fake.yaml:short"]


def test_privileged_keys_never_reach_the_policy(fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake.path / "spy.jsonl"
    monkeypatch.setenv("SPY_LOG", str(log))
    result = fake.runpytest(*SHORT, "--policy=spy_policies:ObservationLog", "--vla-tasks=Alpha-v0", "--episodes=1")
    result.assert_outcomes(failed=1)
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(seen) == 3  # 6 steps, chunks of 2
    for call in seen:
        assert call["keys"] == ["instruction", "proprio", "rgb"]
        assert call["instruction"] == "pick alpha"
        assert set(call["episode"]) == {"task", "seed", "instruction", "episode_index", "max_steps"}


def test_cached_action_buffer_survives_in_place_zeroing(fake: pytest.Pytester) -> None:
    """The fake env zeroes the previous action in place on reset, like 11 MIKASA envs do."""
    result = fake.runpytest(*SHORT, "--policy=spy_policies:CachedAction", "--vla-tasks=Alpha-v0")
    result.assert_outcomes(passed=3)  # had the env's zeroing reached the cached buffer, later episodes would fail
