"""What ``plugin.py`` does until ``--benchmark`` is given (nothing), and what ``configure.start``
wires for the controller's role (the run's latest records, read from its logs)."""

from __future__ import annotations

import json

import pytest
from helpers import run_dir

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
