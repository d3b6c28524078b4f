"""The chart's imports warmed ahead of the session's end (``chart.warm``): on a thread of their own,
started by the controller once fewer episodes are left than workers (a core idles until the end)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider", "--policy=zero"]

SPY = '''
"""Each call of ``chart.warm`` in the controller, with how many records the run's store held then."""
import pathlib

from pytest_vlaeval.report import chart

warm = chart.warm


def spied_warm():
    stored = sum(len(log.read_text().splitlines()) for log in pathlib.Path("results").glob("*/episodes/*.jsonl"))
    with open("warmed", "a") as calls:
        calls.write(f"{stored}\\n")
    return warm()


chart.warm = spied_warm
'''


def warm_calls(fake: pytest.Pytester) -> list[str]:
    calls = fake.path / "warmed"
    return calls.read_text().split() if calls.exists() else []


def test_a_session_of_two_workers_warms_the_chart_once_one_episode_is_left(fake: pytest.Pytester) -> None:
    fake.makeconftest(SPY)
    result = fake.runpytest_subprocess(*SHORT, "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the zero policy fails every episode
    summary = read_json(run_dir(fake) / "summary.json")
    assert (run_dir(fake) / "summary.png").is_file()
    assert warm_calls(fake) == [str(summary["n_expected"] - 1)]  # once, as the next-to-last settled


def test_a_serial_session_warms_nothing_and_a_drawing_started_with_a_warm_up_draws(fake: pytest.Pytester) -> None:
    """No worker idles in a serial session; a drawing started as the warm-up starts draws on Agg,
    and a warm-up once pyplot is imported starts nothing."""
    fake.makeconftest(SPY)
    assert fake.runpytest_subprocess(*SHORT).ret == pytest.ExitCode.TESTS_FAILED
    assert warm_calls(fake) == []
    directory = run_dir(fake)
    script = textwrap.dedent(
        f"""
        import json, pathlib, sys
        from pytest_vlaeval.report import chart
        assert "matplotlib.pyplot" not in sys.modules
        directory = pathlib.Path({str(directory)!r})
        summary = json.loads((directory / "summary.json").read_text())
        per_task = [json.loads((directory / f"{{task}}.json").read_text()) for task in summary["tasks"]]
        thread = chart.warm()
        figure = chart.draw_chart(summary, per_task)  # as the warm-up starts (it may not have imported yet)
        thread.join()
        import matplotlib
        print(thread.name, matplotlib.get_backend().lower(), len(figure.axes), chart.warm())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["vlaeval-chart-warm", "agg", "2", "None"]
