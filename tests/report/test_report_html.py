"""report.html: written with the canonical files, from them alone, every task one row."""

from __future__ import annotations

import re

import pytest
from helpers import read_json, read_page, run_dir

SHORT = ["--benchmark=fake.yaml:short"]


def test_report_has_every_task_its_episodes_and_failure_videos(fake: pytest.Pytester) -> None:
    fake.runpytest("--benchmark=fake.yaml", "-k", "Alpha or Beta or Broken", "--vla-video=failed", "-p", "no:randomly")
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    page = read_page(directory / "report.html")

    tasks = {row["data-name"]: row for row in page.rows["tasks"]}
    assert set(tasks) == set(summary["tasks"]) | set(summary["tasks_without_results"])
    assert tasks["BrokenSim-v0"]["data-outcome"] == "not evaluated"
    assert tasks["Alpha-v0"]["data-split"] == "Short" and tasks["Alpha-v0"]["data-memory_type"] == "Object"
    groups = {(row["data-axis"], row["data-name"]) for row in page.rows["groups"]}
    assert groups == {("split", s) for s in summary["sr_per_split"]} | {
        ("memory type", m) for m in summary["sr_per_memory_type"]
    }
    failed = {
        (r["env_id"], seed)
        for r in (read_json(directory / f"{t}.json") for t in summary["tasks"])
        for seed, ok in zip(r["episode_seeds"], r["successes"], strict=True)
        if not ok
    }
    assert failed, "the random policy fails some fake episodes"
    assert sorted(page.sources) == sorted(f"videos/{task}/{seed}.webm" for task, seed in failed)
    assert all((directory / source).is_file() for source in page.sources)
    assert all(not re.match(r"[a-z]+://", url) for url in page.urls), page.urls  # nothing fetched
    text = (directory / "report.html").read_text(encoding="utf-8")
    assert summary["ci95_methods"]["sr_split_ci95"] in text
    assert "cannot build BrokenSim-v0" in text  # its errors are in the report, not lost
    assert f"{summary['n_completed']} of {summary['n_expected']} episodes completed" in text


def test_failures_come_first_in_a_tasks_episodes(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "-k", "Alpha")
    directory = run_dir(fake)
    result = read_json(directory / "Alpha-v0.json")
    text = (directory / "report.html").read_text(encoding="utf-8")
    section = text[text.index('id="task-Alpha-v0"') :]
    order = [int(s) for s in re.findall(r'<tr data-seed="(\d+)"', section)]
    outcome = dict(zip(result["episode_seeds"], result["successes"], strict=True))
    assert sorted(order) == sorted(outcome)
    assert [outcome[s] for s in order] == sorted(outcome[s] for s in order)  # failures, then successes


def test_report_is_rewritten_with_the_summary_and_never_contradicts_it(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "-k", "Alpha")
    fake.runpytest(*SHORT, "-k", "Beta")  # a second session on the same run adds a task
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    page = read_page(directory / "report.html")
    assert {row["data-name"] for row in page.rows["tasks"]} == {"Alpha-v0", "Beta-v0"}
    assert summary["written_at"] in (directory / "report.html").read_text(encoding="utf-8")
    assert not list(directory.glob(".report.html.*"))  # written atomically, no temp file left


def test_with_a_baseline_the_flipped_episodes_are_listed_both_ways(fake: pytest.Pytester) -> None:
    fake.runpytest(*SHORT, "--policy=random")
    (baseline,) = (fake.path / "results").iterdir()
    base = {t: read_json(baseline / f"{t}.json") for t in ("Alpha-v0", "Beta-v0")}
    fake.runpytest(*SHORT, "--policy=zero", f"--vla-baseline={baseline}", "--vla-max-drop=1")
    current = fake.path / "results" / "fake-short-zero"
    page = read_page(current / "report.html")
    assert "verdict" in page.ids
    flips = {row["data-name"] for row in page.rows["flips"]}
    assert flips == set(base)
    text = (current / "report.html").read_text(encoding="utf-8")
    for env_id, result in base.items():
        lost = [s for s, ok in zip(result["episode_seeds"], result["successes"], strict=True) if ok]
        row = text[text.index(f'<tr data-name="{env_id}"><td>{env_id}</td><td class="num">3</td>') :]
        assert f"{len(lost)}: {', '.join(map(str, lost))}" in row.split("</tr>")[0]


def test_the_chart_shows_tasks_without_a_completed_episode_as_not_evaluated(fake: pytest.Pytester) -> None:
    from pytest_vlaeval.report.chart import draw_chart

    fake.runpytest("--benchmark=fake.yaml", "-k", "Alpha or Broken")
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    per_task = [read_json(directory / f"{t}.json") for t in summary["tasks"]]
    assert summary["tasks"] == ["Alpha-v0"] and "BrokenSim-v0" in summary["tasks_without_results"]
    figure = draw_chart(summary, per_task)
    labels = [label.get_text() for label in figure.axes[1].get_yticklabels()]
    assert labels == ["Alpha-v0"] + [f"{t} (not evaluated)" for t in summary["tasks_without_results"]]
    assert (directory / "summary.png").is_file()


def test_past_its_row_limit_the_chart_shows_the_lowest_tasks_and_says_so(fake: pytest.Pytester) -> None:
    from pytest_vlaeval.report.chart import TASK_ROWS, draw_chart

    fake.runpytest(*SHORT, "--policy=random", "-k", "Alpha")
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    (result,) = [read_json(directory / f"{t}.json") for t in summary["tasks"]]
    per_task = [{**result, "env_id": f"T{i}-v0", "sr": (i % 7) / 7} for i in range(TASK_ROWS + 20)]
    summary = {**summary, "tasks_without_results": ["Gone-v0"]}
    figure = draw_chart(summary, per_task)
    labels = [label.get_text() for label in figure.axes[1].get_yticklabels()]
    lowest = sorted(per_task, key=lambda r: r["sr"])[: TASK_ROWS - 1]
    assert labels == [r["env_id"] for r in lowest] + ["Gone-v0 (not evaluated)"]
    assert f"the {TASK_ROWS} lowest of {TASK_ROWS + 21} tasks" in figure.axes[1].get_title()


def test_pytest_html_rows_carry_records_and_videos_and_its_summary_the_headline(fake: pytest.Pytester) -> None:
    import html
    import json

    fake.runpytest_subprocess(*SHORT, "--vla-video=failed", "-n", "2", "--html=pages/episodes.html")
    page = (fake.path / "pages" / "episodes.html").read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', page)
    assert blob is not None
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    assert f"<td>{100 * summary['sr_split']:.1f}%" in page.split('id="vlaeval-headline"')[1].split("</table>")[0]
    for env_id in summary["tasks"]:
        result = read_json(directory / f"{env_id}.json")
        for seed, success in zip(result["episode_seeds"], result["successes"], strict=True):
            (row,) = tests[f"fake-short::{env_id}::{seed}"]
            extras = {extra["name"]: extra for extra in row["extras"]}
            record = json.loads((fake.path / "pages" / extras["episode record"]["content"]).read_text())
            assert (record["task"], record["seed"], record["success"]) == (env_id, seed, success)
            pages = [extra["content"] for extra in row["extras"] if extra["format_type"] == "html"]
            videos = [v for content in pages for v in re.findall(r'<video[^>]* src="([^"]+)"', content)]
            assert len(videos) == (0 if success else 1)
            assert all(
                (fake.path / "pages" / v).resolve() == (directory / "videos" / env_id / f"{seed}.webm").resolve()
                for v in videos
            )
