"""The run's files as a session goes: a finished task's canonical JSON at once, ``summary.json``
and ``report.html`` at a bounded rate, and the whole set (``report/run_files.py``) at the end, each from the run's latest records
caught up under the run's lock with what concurrent sessions appended, so the last writer never
overwrites newer files with an older view."""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_vlaeval.controller.intake import Intake
from pytest_vlaeval.errors import ResultsUnwritable
from pytest_vlaeval.gate.baseline import Baseline
from pytest_vlaeval.gate.verdict import Verdict
from pytest_vlaeval.lerobot.eval_info import eval_info
from pytest_vlaeval.report.run_files import Written, write_run_files
from pytest_vlaeval.results.canonical import finished_task, summary, write_task
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.store import RunStore
from pytest_vlaeval.run_context import RunContext
from pytest_vlaeval.schema import Canonical, TaskResult

REFRESH_SHARE = 0.1
"""The whole set is rewritten once the tasks finished since its last write are this share of all
finished so far: a bounded number of rewrites per doubling of the run, so keeping the files
current costs time linear in the run, not quadratic."""

REFRESH_SECONDS = 30.0
"""... or once this long has passed, so a slow run's report stays current."""


class RunWriter:
    def __init__(
        self, run: RunContext, store: RunStore, latest: LatestRecords, intake: Intake, baseline: Baseline | None
    ) -> None:
        self.run = run
        self.store = store
        self.latest = latest
        self.intake = intake
        """Nothing is written while it holds this session's records back (the run's policy unclaimed)."""
        self.baseline = baseline
        """The gate's baseline, for the report's flipped episodes."""
        self.written: Canonical | None = None
        """The summary and per-task results the last write of the whole set was made from."""
        self.files = Written()
        """What the last write left on disk (which files it could not write)."""
        self._tasks = {task.env_id: task for task in run.selection.tasks}
        self._finished = 0
        self._refreshed = (0, time.monotonic())
        """Tasks finished, and when, at the last write of the whole set."""

    def task_finished(self, env_id: str, *, interrupted: bool) -> TaskResult | None:
        """A task of this session finished: write its canonical JSON, and the whole set when due.
        Returns the task's result (None while it has no completed episode)."""
        self._finished += 1
        with self.store.locked():
            self.latest.catch_up(skip=self.store.log_path)
            result = finished_task(self.run.selection, self.latest, self._tasks[env_id])
            if result is not None and self._writes:
                try:
                    write_task(self.store.dir, result)
                except ResultsUnwritable as exc:  # shown unless a later write of the whole set succeeds
                    self.files.canonical_refused = str(exc)
        finished, at = self._refreshed
        due = self._finished - finished >= max(1.0, REFRESH_SHARE * self._finished)
        if due or time.monotonic() - at >= REFRESH_SECONDS:
            self.write(interrupted=interrupted)
        return result

    def write(
        self,
        *,
        interrupted: bool,
        judge: Callable[[list[TaskResult]], Verdict | None] | None = None,
        final: bool = False,
    ) -> None:
        """The whole set, from one summary of the caught-up records; ``judge`` gives the gate's
        verdict on that same summary (at the session's end), so the run is summarised once."""
        with self.store.locked():
            self.latest.catch_up(skip=self.store.log_path)
            body, per_task = summary(self.run.selection, self.latest, interrupted=interrupted)
            verdict = judge(per_task) if judge else None
            if self._writes:
                self.files = write_run_files(
                    self.store.dir,
                    body,
                    per_task,
                    policy=self.run.policy.identity,
                    eval_info=eval_info(self.run.selection, self.latest),
                    verdict=verdict,
                    baseline=self.baseline,
                    final=final,
                )
        self._refreshed = (self._finished, time.monotonic())
        self.written = body, per_task

    @property
    def _writes(self) -> bool:
        """Not while this session's records are held back, nor in a shard of an array (its merge writes)."""
        return not self.intake.held and not self.run.subset.merged_later

    @property
    def unwritten(self) -> list[str]:
        """A line for each file of the run the disk refused at the last write."""
        return [*filter(None, [self.files.canonical_refused]), *self.files.refused]
