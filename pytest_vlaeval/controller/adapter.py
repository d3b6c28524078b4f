"""Controller side: records arrive on reports, go to the durable store, and come out as the
canonical JSON (rewritten as each task completes), the gate verdict and the terminal summary.

Runs only in the controlling process (with xdist, workers report here). Every scheduled
episode ends up with a record: a worker crash or a harness bug becomes an error record (retried
with ``--vla-retries``), and an episode that was scheduled but never reported becomes one at
session end.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vlaeval.context import WORKER_PLAN, RunContext
from pytest_vlaeval.controller.progress import Progress
from pytest_vlaeval.episodes.collect import RECORD_ATTR, EpisodeItem, parse_nodeid
from pytest_vlaeval.episodes.deadline import HARD_FACTOR
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.canonical import summary, write_canonical
from pytest_vlaeval.results.record import ERROR, EpisodeRecord
from pytest_vlaeval.results.store import POLICY_FILE, RunStore, latest

if TYPE_CHECKING:
    from pytest_vlaeval.results.sequential_gate import SequentialGate

JUDGED_BY_THE_GATE = (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
"""Exit statuses a passing gate turns into 0: failed episodes are the measurement, and a session
that selected nothing (``--vla-rerun=errors`` on a complete run) just re-judges the run."""

RERUN_OUTCOME = "rerun"
"""Outcome given to a crashed attempt that will be retried, so pytest counts it apart."""


class ResultsController:
    def __init__(
        self, run: RunContext, store: RunStore, history: list[EpisodeRecord], sequential: SequentialGate | None = None
    ) -> None:
        self.run = run
        self.store = store
        self.latest = latest(history)
        self.held: list[EpisodeRecord] = []
        """Records kept off the store while a recorded policy may still refuse this session."""
        self.may_refuse = store.holds(POLICY_FILE)
        self.refused = False
        self.scheduled: dict[str, tuple[str, int]] = {}
        self.reported: set[str] = set()
        self.pending_by_task: dict[str, set[str]] = defaultdict(set)
        self.crash_retries: dict[str, int] = defaultdict(int)
        self.interrupted = False
        self.written: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
        self.gate: Any = None
        self.policy_claimed = False
        self.chart: Path | None = None
        self.progress = Progress(None, {}, live=False)  # replaced at session start
        self.sequential = sequential
        self.session: pytest.Session | None = None

    # -- what was scheduled --------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._schedule(item.nodeid for item in session.items if isinstance(item, EpisodeItem))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._schedule(ids)

    def _schedule(self, nodeids: Any) -> None:
        for nodeid in nodeids:
            key = parse_nodeid(nodeid)
            if key is not None and nodeid not in self.scheduled:
                self.scheduled[nodeid] = key
                self.pending_by_task[key[0]].add(nodeid)
                self.progress.schedule(key[0])
                if self.sequential:
                    self.sequential.schedule(key[1])

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Hand every worker the same episode list, chosen once here."""
        node.workerinput[WORKER_PLAN] = sorted(self.run.episodes)

    # -- what came back --------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died mid-episode: record the crash, and retry it if retries are left."""
        if crashitem not in self.scheduled:
            return
        worker = getattr(getattr(report, "node", None), "gateway", None)
        message = f"worker {getattr(worker, 'id', '?')} crashed while running this episode"
        if self.run.timeout:
            message += f" (or was ended for being stuck past {HARD_FACTOR:g}x --vla-timeout)"
        self._accept(crashitem, self._error(crashitem, message, "crash", worker), final=False)
        if self.crash_retries[crashitem] < self.run.retries:
            self.crash_retries[crashitem] += 1
            report.outcome = RERUN_OUTCOME  # type: ignore[assignment]
            sched.mark_test_pending(crashitem)
        else:
            report.when = "setup"  # the episode could not be evaluated: pytest counts it as an error
            self._settle(crashitem)

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        if report.outcome == RERUN_OUTCOME:
            return "rerun", "R", ("RERUN", {"yellow": True})
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.scheduled or report.nodeid in self.reported:
            return
        payload = getattr(report, RECORD_ATTR, None)
        if payload is not None:
            for attempt in payload:
                self._accept(report.nodeid, EpisodeRecord.from_dict(attempt), final=False)
            self._settle(report.nodeid)
        elif report.failed:  # a harness fault before the episode ran (crashes come through handlecrashitem)
            message = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "no result"
            self._accept(report.nodeid, self._error(report.nodeid, message, "harness"), final=True)

    def _accept(self, nodeid: str, record: EpisodeRecord, *, final: bool) -> None:
        previous = self.latest.get(record.key)
        record = dataclasses.replace(record, attempt=previous.attempt + 1 if previous else 1)
        self.latest[record.key] = record
        if record.completed and not self.policy_claimed:
            self._claim_policy(record)
        if self.policy_claimed or not self.may_refuse:
            self._store_held()
            self.store.append(record)
        else:  # until an episode shows this is the run's policy, the run's files stay as they are
            self.held.append(record)
        if final:
            self._settle(nodeid)

    def _claim_policy(self, record: EpisodeRecord) -> None:
        """What only a worker learns joins the run's fingerprint: the policy's own description
        (name, config, chunk size) and the render backend ``auto`` resolved to."""
        identity = {
            "model": record.model,
            "action_chunk_size": record.chunk_size,
            "render_backend": record.render_backend,
        }
        try:
            self.store.claim(identity, POLICY_FILE)
        except SpecError as exc:
            self.store.close()
            self.refused = True
            pytest.exit(f"refusing to mix episodes into this run: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
        self.policy_claimed = True

    def _store_held(self) -> None:
        held, self.held = self.held, []
        for record in held:
            self.store.append(record)

    def _settle(self, nodeid: str) -> None:
        self.reported.add(nodeid)
        task, seed = self.scheduled[nodeid]
        pending = self.pending_by_task[task]
        pending.discard(nodeid)
        self.progress.settled(task, self.latest[(task, seed)].outcome)
        if not pending:
            self.write()
            self.progress.task_finished(task, next((r for r in self.written[1] if r["env_id"] == task), None))
        if self.sequential and self.sequential.settle(seed, self.latest) and self.session is not None:
            self._stop_early(self.session)

    def _stop_early(self, session: pytest.Session) -> None:
        """The sequential gate's verdict is settled: run nothing more (the affinity scheduler
        reads ``stopped``; a serial session stops after this episode)."""
        from pytest_vlaeval.controller.report import completion_command

        assert self.sequential is not None
        self.sequential.stopped = True
        self.sequential.resume_command = completion_command(session.config.invocation_params.args, resume=True)
        session.shouldstop = f"{self.sequential.outcome}: the sequential gate's verdict is settled"

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from pytest_vlaeval.controller.progress import Progress, live_wanted

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        steps = {t.env_id: t.max_steps for t in self.run.selection.tasks}
        self.progress = Progress(reporter, steps, live_wanted(session.config.getoption("vla_live")))
        self.progress.start()
        self.session = session

    def _errored_this_session(self) -> bool:
        """Whether an episode of this session ended in an error (an incomplete run never passes)."""
        settled = {self.scheduled[nodeid] for nodeid in self.reported}
        return any(self.latest[key].outcome == ERROR for key in settled if key in self.latest)

    def _error(self, nodeid: str, message: str, kind: str, worker: Any = None) -> EpisodeRecord:
        task, seed = self.scheduled[nodeid]
        return EpisodeRecord(
            task=task,
            seed=seed,
            outcome=ERROR,
            success=None,
            episode_return=None,
            length=None,
            message=message,
            wall_time=0.0,
            worker=getattr(worker, "id", "controller"),
            time=datetime.now(timezone.utc).isoformat(),
            error_kind=kind,
        )

    # -- session end -------------------------------------------------------------------------

    def pytest_keyboard_interrupt(self) -> None:
        self.interrupted = not self._stopped_early  # a gate's early stop reaches pytest as an interruption

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.progress.stop()
        if self.refused:  # a session refused by the run leaves every file of the run as it found it
            return
        self.session = None  # no early stop once the session is ending
        stopped = self._stopped_early
        self.interrupted = not stopped and (
            self.interrupted or exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
        )
        unreported = sorted(set(self.scheduled) - self.reported)
        if stopped:
            self.sequential.saved = len(unreported)  # not needed for the verdict: neither errors nor lost
        elif not self.interrupted:
            for nodeid in unreported:
                self._accept(
                    nodeid, self._error(nodeid, "scheduled but no result arrived from any worker", "lost"), final=True
                )
        self._store_held()  # no episode completed to claim the policy; its errors still count
        if self.sequential is not None:
            self.gate = self.sequential
        elif self.run.baseline is not None:
            from pytest_vlaeval.results.gate import compare

            _, per_task = self._summary()
            self.gate = compare(per_task, self.run.baseline, self.run.max_drop, self.run.gate_alpha)
        if self.gate is not None:
            session.exitstatus = self._gate_exit_status(session.exitstatus, stopped)
        self.write()
        self.store.close()
        assert self.written is not None
        body, per_task = self.written
        from pytest_vlaeval.controller.report import markdown_report
        from pytest_vlaeval.results.chart import CHART_FILE, write_chart

        self.chart = write_chart(body, per_task, self.run.run_dir / CHART_FILE)

        markdown = markdown_report(body, per_task, self.gate, self.run)
        (self.run.run_dir / "report.md").write_text(markdown, encoding="utf-8")
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            with Path(step_summary).open("a", encoding="utf-8") as f:
                f.write(markdown + "\n")

    @property
    def _stopped_early(self) -> bool:
        return self.sequential is not None and self.sequential.stopped

    def _gate_exit_status(self, status: int, stopped: bool) -> int:
        """6 on FAIL, ``--vla-undecided-exit`` on UNDECIDED; on PASS, 1 if an episode of this
        session errored (an incomplete run never passes), else 0 where the gate judges the run."""
        from pytest_vlaeval.results.gate import EXIT_GATE_FAILED, FAIL, UNDECIDED

        if self.gate.outcome == FAIL:
            return EXIT_GATE_FAILED
        if self.gate.outcome == UNDECIDED:
            return self.run.sequential.undecided_exit
        if status not in JUDGED_BY_THE_GATE and not stopped:
            return status
        if self._errored_this_session():
            return pytest.ExitCode.TESTS_FAILED
        return pytest.ExitCode.OK  # failed episodes are the measurement; the gate judged it

    def _summary(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return summary(self.run.selection, self.store.history() + self.held, interrupted=self.interrupted)

    def write(self) -> None:
        """Materialise the canonical files from what the store holds on disk now (every session's
        log, including concurrent sessions on the same run), under the run's lock, so the last
        writer never overwrites newer files with an older view; with the gate's verdict once there
        is one."""
        with self.store.locked():
            body, per_task = self._summary()
            if self.gate is not None:
                body["gate"] = self.gate.as_dict()
            if not self.held:
                write_canonical(self.run.run_dir, body, per_task)
        self.written = body, per_task

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if self.written is None:
            return
        from pytest_vlaeval.controller.report import render_summary

        render_summary(terminalreporter, *self.written, self.run, self.gate, config.invocation_params.args, self.chart)
