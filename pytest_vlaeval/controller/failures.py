"""Failed episodes are results, not bug reports: pytest's FAILURES section leaves them out (the
results table counts them, the short test summary still lists them under ``-r``), unless
``--vla-failure-details`` asks for them. Errors keep their sections and tracebacks, and so does
a failed episode with a video (``--vla-video`` asked to see it).

Leaving them out also keeps the terminal summary linear: for each report in that section pytest
scans every report of the session for teardown output, which at thousands of failed episodes
costs more than the episodes.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vlaeval.episodes.collect import RECORD_ATTR


def is_plain_failed_episode(report: Any) -> bool:
    """A completed episode without success and without a video: its records ride on a failed
    call-phase report (episodes that could not be evaluated fail in setup, as errors)."""
    records = getattr(report, RECORD_ATTR, None)
    return getattr(report, "when", None) == "call" and bool(records) and not records[-1].get("video")


class FailedEpisodeSections:
    """Takes failed episodes out of the reports pytest's FAILURES section reads, for as long as
    that section is written.

    pytest writes the section in its terminal summary wrapper before the plain hook
    implementations run, and the short test summary after them; so this plugin's outer wrapper
    takes the episodes out and its plain implementation puts them back. Both go through
    ``TerminalReporter.stats``, the reports by category that the terminal summary reads.
    """

    def __init__(self) -> None:
        self._all_failed: list[Any] | None = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Any:
        failed = terminalreporter.stats.get("failed")
        if failed:
            self._all_failed = failed
            terminalreporter.stats["failed"] = [report for report in failed if not is_plain_failed_episode(report)]
        try:
            return (yield)
        finally:
            self.pytest_terminal_summary_put_back(terminalreporter)

    # A second implementation of the same hook in this plugin (pytest reads only "pytest_" names).
    @pytest.hookimpl(tryfirst=True, specname="pytest_terminal_summary")
    def pytest_terminal_summary_put_back(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Every failed report again, for the short test summary and the counts."""
        if self._all_failed is not None:
            terminalreporter.stats["failed"] = self._all_failed
            self._all_failed = None
