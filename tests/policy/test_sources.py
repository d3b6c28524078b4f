"""A policy source is a class and a prefix entry: ``echo_source`` (the suite's own, registered as
the package registers ``lerobot:``) runs real sessions with ``--policy=echo:VALUE`` and no edit
to the package: parsed by its prefix, checked against the benchmark before any episode, built by
its factory in each worker, recorded by its identity."""

from __future__ import annotations

import pytest
from helpers import TESTS, assert_one_line_usage_error, episode_records, run_dir

from pytest_vlaeval.policy.sources import register_policy_source

FAKE = ("--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "-p", "echo_source", "--episodes=2")


@pytest.fixture
def echo(fake: pytest.Pytester) -> pytest.Pytester:
    """The fake benchmark's directory, with the echo source importable there (and by its workers)."""
    fake.makepyfile(echo_source=(TESTS / "echo_source.py").read_text())
    return fake


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_source_of_its_own_runs_a_session_by_its_prefix(echo: pytest.Pytester, workers: tuple[str, ...]) -> None:
    result = echo.runpytest(*FAKE, "--policy=echo:0.95", *workers)
    assert result.ret == 0, result.stdout.str()
    directory = run_dir(echo)
    assert directory.name.startswith("fake-short-echo_0.95-")  # its identity names the run
    records = episode_records(directory)
    assert sorted(records) == [(task, seed) for task in ("Alpha-v0", "Beta-v0") for seed in (100, 101)]
    for record in records.values():  # above every seed's bar: the constant action was the policy's
        assert (record["outcome"], record["model"]) == ("success", {"name": "echo", "config": {"value": 0.95}})


def test_a_source_is_checked_against_the_benchmark_before_any_episode(echo: pytest.Pytester) -> None:
    result = echo.runpytest(*FAKE, "--policy=echo:2")
    assert_one_line_usage_error(result, "--policy 'echo:2.0': Fake-Bench's actions lie in [-1, 1]")
    assert not (echo.path / "results").exists()


def test_a_source_refuses_its_own_malformed_text_in_one_line(echo: pytest.Pytester) -> None:
    result = echo.runpytest(*FAKE, "--policy=echo:loud")
    assert_one_line_usage_error(result, "--policy 'echo:loud': expected echo:VALUE, VALUE a number")


def test_a_prefix_is_a_name_and_a_colon() -> None:
    from echo_source import EchoSource

    with pytest.raises(ValueError, match="a name and ':'"):
        register_policy_source("echo", EchoSource.parse)
