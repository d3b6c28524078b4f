"""report.html and compare.html opened from disk in headless Chromium (Debian's ``chromium``,
driven by Playwright): no console error, no network request, one row per task, sorting and
filtering change the rows, a failed episode's video loads its file. Screenshots go to the
system's temp folder for a person to look at; they are not part of the repository."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import checkpoint_runs, read_json, run_dir

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(tempfile.gettempdir())


@dataclass
class Browser:
    context: Any
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    """Every URL a page asked for that is not a file on disk (refused)."""

    def open(self, path: Path) -> Any:
        page = self.context.new_page()
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.console_errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        return page


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    assert CHROMIUM.is_file(), "the browser tests need Debian's chromium: run scripts/install_browser.sh"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), args=FLAGS, headless=True
        )
        opened = Browser(context)

        def route(request_route: Any) -> None:
            url = request_route.request.url
            if url.startswith("file://"):
                request_route.continue_()
            else:
                opened.requests.append(url)
                request_route.abort()

        context.route("**/*", route)
        try:
            yield opened
        finally:
            context.close()


def _visible(page: Any, table: str) -> list[str]:
    return page.eval_on_selector_all(f"#{table} tbody tr:not([hidden])", "rows => rows.map(r => r.dataset.name)")


def test_report_html_in_a_browser(fake: pytest.Pytester, browser: Browser) -> None:
    fake.runpytest("--benchmark=fake.yaml", "-k", "Alpha or Beta or Gamma or Broken", "--vla-video=failed")
    directory = run_dir(fake)
    summary = read_json(directory / "summary.json")
    page = browser.open(directory / "report.html")

    every_task = summary["tasks"] + summary["tasks_without_results"]
    assert sorted(_visible(page, "tasks")) == sorted(every_task)  # one row per task
    page.click("#tasks th:nth-child(6)")  # SR, ascending
    ascending = _visible(page, "tasks")
    page.click("#tasks th:nth-child(6)")  # SR, descending
    descending = _visible(page, "tasks")
    by_sr = sorted(summary["tasks"], key=lambda t: summary["per_task_sr"][t])
    assert ascending != descending
    assert [t for t in descending if t in by_sr] == sorted(by_sr, key=lambda t: -summary["per_task_sr"][t])

    page.fill("form[data-filters=tasks] input", "alpha")
    assert _visible(page, "tasks") == ["Alpha-v0"]
    page.fill("form[data-filters=tasks] input", "")
    page.select_option("form[data-filters=tasks] select[name=outcome]", "not evaluated")
    assert sorted(_visible(page, "tasks")) == sorted(summary["tasks_without_results"])
    page.select_option("form[data-filters=tasks] select[name=outcome]", "")
    page.select_option("form[data-filters=tasks] select[name=split]", "Long")
    assert _visible(page, "tasks") == ["Gamma-v0"]
    page.select_option("form[data-filters=tasks] select[name=split]", "")

    failed = next(
        (t, seed)
        for t in summary["tasks"]
        for seed, ok in zip(
            read_json(directory / f"{t}.json")["episode_seeds"],
            read_json(directory / f"{t}.json")["successes"],
            strict=True,
        )
        if not ok
    )
    page.eval_on_selector_all("details", "all => all.forEach(d => d.open = true)")
    video = page.locator(f"#task-{failed[0]} tr[data-seed='{failed[1]}'] video")
    video.scroll_into_view_if_needed()
    page.wait_for_function("v => v.readyState >= 1 || v.error !== null", arg=video.element_handle(), timeout=15000)
    assert video.evaluate("v => [v.readyState >= 1, v.error && v.error.code, v.duration > 0]") == [True, None, True]
    assert video.evaluate("v => v.currentSrc").endswith(f"videos/{failed[0]}/{failed[1]}.webm")

    page.screenshot(path=str(SCREENSHOTS / "vlaeval-report.png"), full_page=True)
    assert browser.console_errors == []
    assert browser.requests == []


def test_compare_html_in_a_browser(fake: pytest.Pytester, browser: Browser, tmp_path: Path) -> None:
    from pytest_vlaeval.cli import main

    runs = checkpoint_runs(fake, "Early", "Middle", "Late")
    assert main(["compare", *map(str, runs), "--out", str(tmp_path)]) == 0
    page = browser.open(tmp_path / "compare.html")

    rows = _visible(page, "comparison")
    assert len(rows) == 6
    page.select_option("form[data-filters=comparison] select[name=axis]", "task")
    assert sorted(_visible(page, "comparison")) == ["Alpha-v0", "Beta-v0"]
    page.select_option("form[data-filters=comparison] select[name=axis]", "")
    page.click("#comparison th:nth-child(2)")  # by name, ascending then descending
    ascending = [name.lower() for name in _visible(page, "comparison")]
    page.click("#comparison th:nth-child(2)")
    descending = [name.lower() for name in _visible(page, "comparison")]
    assert ascending == sorted(rows_lower := [name.lower() for name in rows]) != rows_lower
    assert descending == sorted(rows_lower, reverse=True)
    assert page.locator("#curves g.curve").count() == 4
    assert page.locator("#curves polyline").first.bounding_box()["width"] > 100  # a curve across the runs

    page.screenshot(path=str(SCREENSHOTS / "vlaeval-compare.png"), full_page=True)
    assert browser.console_errors == []
    assert browser.requests == []


HOSTILE = '"\'><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>&amp;'
"""A string that runs script wherever a page puts data into markup unescaped."""

HOSTILE_POLICY = f"""
import numpy as np

HOSTILE = {HOSTILE!r}


class Hostile:
    chunk_size = 1
    name = HOSTILE
    config = {{"note": HOSTILE}}

    def reset(self, episode):
        self.seed = episode.seed

    def act(self, obs):
        if self.seed == 101:
            raise RuntimeError(HOSTILE)
        return np.full(7, 0.95, np.float32)
"""


def test_hostile_strings_in_every_field_stay_text(fake: pytest.Pytester, browser: Browser, tmp_path: Path) -> None:
    """A group name, an axis label, a policy's name and config, an error message, a run's label: each
    carries markup that would run script; report.html and compare.html show it as text."""
    text = (fake.path / "fake.yaml").read_text()
    quoted = json.dumps(HOSTILE)  # a YAML scalar too
    text = text.replace("label: memory type", f"label: {quoted}").replace(
        "memory_type: Spatial", f"memory_type: {quoted}"
    )
    fake.makefile(".yaml", hostile=text)
    fake.makepyfile(hostile_policy=HOSTILE_POLICY)
    runs = []
    for name in ("a", "b"):
        label = f"{name}{HOSTILE}".replace("/", "_")
        fake.runpytest("--benchmark=hostile.yaml:short", "--policy=hostile_policy:Hostile", f"--vla-run-name={label}")
        runs.append(fake.path / "results" / label)
    from pytest_vlaeval.cli import main

    assert main(["compare", *map(str, runs), "--out", str(tmp_path)]) == 0
    for path in (runs[0] / "report.html", tmp_path / "compare.html"):
        page = browser.open(path)
        assert page.evaluate("window.__pwned") is None, path
        assert page.evaluate("document.querySelectorAll('img, script:not(:last-of-type)').length") == 0, path
        assert HOSTILE in page.evaluate("document.body.innerText"), path
    assert browser.console_errors == []


def test_a_video_path_with_markup_stays_a_path_in_pytest_htmls_report(fake: pytest.Pytester, browser: Browser) -> None:
    """The pytest-html extra's ``<video src>`` comes from the results folder's path, which may hold a quote."""
    results = 'res"><img src=x onerror="window.__pwned=3">'
    fake.runpytest(
        "--benchmark=fake.yaml:short", "--vla-video=failed", f"--vla-results={results}", "--html=pages/e.html"
    )
    page = browser.open(fake.path / "pages" / "e.html")
    page.wait_for_selector("#results-table")
    page.eval_on_selector_all("tr.collapsible td", "cells => cells.forEach(c => c.click())")
    assert page.evaluate("window.__pwned") is None and page.locator("img[src=x]").count() == 0
    sources = page.eval_on_selector_all("video[preload=metadata]", "videos => videos.map(v => v.getAttribute('src'))")
    assert sources and all(results in source for source in sources), sources


def test_a_camel_case_axis_field_filters_its_rows(fake: pytest.Pytester, browser: Browser) -> None:
    """HTML lowercases attribute names: a ``memoryType`` axis still filters its table."""
    text = (fake.path / "fake.yaml").read_text().replace("field: memory_type", "field: memoryType")
    fake.makefile(".yaml", camel=text.replace("memory_type:", "memoryType:"))
    fake.runpytest("--benchmark=camel.yaml:short")
    page = browser.open(run_dir(fake) / "report.html")
    page.select_option("form[data-filters=tasks] select[name=memorytype]", "Spatial")
    assert _visible(page, "tasks") == ["Beta-v0"]
