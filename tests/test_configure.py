"""Session wiring (``plugin.py``'s options, ``configure/``): without ``--benchmark`` the plugin
is inert; with it, bad input stops the session in one line before anything runs."""

from __future__ import annotations

import json

import pytest
from helpers import CONFIGURED, assert_one_line_usage_error, run_dir, usage_error

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


def test_inert_without_benchmark_and_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        import sys

        def test_user_test_runs(pytestconfig):
            assert pytestconfig.pluginmanager.hasplugin("vlaeval")
            heavy = {"torch", "gymnasium", "mani_skill", "sapien", "yaml", "rich"} & set(sys.modules)
            assert not heavy, heavy
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--benchmark=shortt"], "unknown benchmark 'shortt'; valid: short, medium, long, all, "),
        (
            ["--benchmark=fake.yaml:medium"],
            "unknown split 'medium' for benchmark 'fake'; valid: short, long, extra, crash, flaky, all",
        ),
        (
            ["--benchmark=fake.yaml:short", "--vla-tasks=Alpha-v0,Gama-v0"],
            "unknown task 'Gama-v0' in split 'short' of 'fake'; valid: Alpha-v0, Beta-v0",
        ),
        (["--benchmark=nope.yaml"], "benchmark file 'nope.yaml' not found"),
        (
            ["--benchmark=fake.yaml", "--policy=no_such_module:make"],
            "--policy 'no_such_module:make': module 'no_such_module' is not importable",
        ),
        (["--benchmark=fake.yaml", "--policy=randm"], "--policy 'randm': expected module:attr or one of random, zero"),
        (["--benchmark=fake.yaml", "--episodes=0"], "--episodes must be at least 1, got 0"),
    ],
)
def test_bad_input_is_one_clear_line(fake: pytest.Pytester, args: list[str], expected: str) -> None:
    result = fake.runpytest(*args)
    assert_one_line_usage_error(result, expected)


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--vla-timeout=-5", "argument --vla-timeout: must be in (0, inf), got -5"),
        ("--vla-timeout=0", "argument --vla-timeout: must be in (0, inf), got 0"),
        ("--vla-timeout=nan", "argument --vla-timeout: must be in (0, inf), got nan"),
        ("--vla-timeout=inf", "argument --vla-timeout: must be in (0, inf), got inf"),
        ("--vla-retries=-1", "argument --vla-retries: must be in [0, inf), got -1"),
        ("--vla-max-drop=1.5", "argument --vla-max-drop: must be in [0, 1], got 1.5"),
        ("--vla-gate-alpha=1", "argument --vla-gate-alpha: must be in (0, 1), got 1"),
        ("--vla-gate-alpha=0", "argument --vla-gate-alpha: must be in (0, 1), got 0"),
        ("--episodes=0", "--episodes must be at least 1, got 0"),
        ("--vla-start-seed=-1", "argument --vla-start-seed: must be in [0, inf), got -1"),
        ("--vla-shard=3/2", "--vla-shard '3/2': expected I/N with 1 <= I <= N"),
    ],
)
def test_numeric_options_out_of_range_stop_in_one_line_before_anything_runs(
    fake: pytest.Pytester, option: str, expected: str
) -> None:
    result = fake.runpytest(*SHORT, option)
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--policy=", "argument --policy: is empty: name a policy, e.g. --policy=random"),
        ("--policy= ", "argument --policy: is empty: name a policy, e.g. --policy=random"),
        (
            "--vla-serve=",
            "argument --vla-serve: is empty: name the policy to serve, e.g. --vla-serve=my_pkg.policies:make_policy",
        ),
    ],
)
def test_an_empty_policy_is_refused_as_parsed_not_read_as_the_default(
    fake: pytest.Pytester, option: str, expected: str
) -> None:
    """``--policy=`` (a variable that expanded to nothing) once ran the default ``random`` policy."""
    result = fake.runpytest(*SHORT, option)
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()


def test_a_policy_attribute_typo_stops_before_any_worker_starts(fake: pytest.Pytester) -> None:
    fake.makepyfile(policies=CONFIGURED)
    result = fake.runpytest(*SHORT, "--policy=policies:Configurd", "-n", "2")
    assert_one_line_usage_error(result, "module 'policies' (")
    assert "defines no 'Configurd'" in usage_error(result)
    assert not (fake.path / "results").exists()


def test_a_session_keeps_only_the_runs_episodes_of_what_its_logs_hold(fake: pytest.Pytester) -> None:
    """A log received into the run may hold records of any episode: the session counts them and
    keeps none (its memory follows the run's episodes, not its logs)."""
    fake.runpytest(*SHORT)
    log = next((run_dir(fake) / "episodes").glob("*.jsonl"))
    stranger = json.loads(log.read_text().splitlines()[0])
    with log.open("a") as received:
        received.writelines(json.dumps(stranger | {"seed": seed}) + "\n" for seed in range(1000, 1500))
    kept: list[tuple[int, int]] = []

    class Spy:
        def pytest_sessionfinish(self, session: pytest.Session) -> None:
            latest = session.config.pluginmanager.get_plugin("vlaeval-controller").latest
            kept.append((len(latest), latest.outside))

    fake.inline_run(*SHORT, plugins=[Spy()])
    assert kept == [(6, 500)]
