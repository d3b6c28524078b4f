"""pytest-html, where people already look: each episode's row carries its record and, when
recorded, its video (pytest-html's extras), and the run's headline table joins the report's
summary. Registered by the session only when pytest-html writes a report (``--html``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_vlaeval.controller.run_writer import RunWriter
from pytest_vlaeval.episodes.collect import RECORD_ATTR
from pytest_vlaeval.report.html import headline_table
from pytest_vlaeval.report.page import render


def wanted(config: pytest.Config) -> bool:
    """pytest-html is active and writes a report in this session."""
    return config.pluginmanager.hasplugin("html") and bool(getattr(config.option, "htmlpath", None))


class PytestHtmlExtras:
    def __init__(self, writer: RunWriter, report_path: Path) -> None:
        self.writer = writer
        self.report_dir = report_path.resolve().parent

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """On the controller, before pytest-html files the report: the episode's record
        (its latest attempt) and its video, linked relative to the HTML report."""
        attempts = getattr(report, RECORD_ATTR, None)
        if not attempts or report.when not in ("call", "setup") or (report.when == "setup" and report.passed):
            return
        from pytest_html import extras

        record = attempts[-1]
        added = [extras.json(record, name="episode record")]
        if record.get("video"):
            source = Path(os.path.relpath(Path(record["video"]).resolve(), self.report_dir)).as_posix()
            added.append(extras.html(render("video.html.j2", source=source)))
        report.extras = [*getattr(report, "extras", []), *added]  # type: ignore[attr-defined]

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix: list[str], summary: list[str], postfix: list[str]) -> None:
        if self.writer.written is not None:
            prefix.append(headline_table(self.writer.written[0], self.writer.run.policy.identity))
