"""Controller side: records arrive on reports, go to the durable store, and come out as the
canonical JSON (rewritten as each task completes) and the terminal summary.

Runs only in the controlling process (with xdist, workers report here). Every scheduled
episode ends up with a record: a worker crash or a harness bug becomes an error record, and an
episode that was scheduled but never reported becomes one at session end.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

import pytest

from pytest_vlaeval.collect import RECORD_ATTR, EpisodeItem, parse_nodeid
from pytest_vlaeval.record import ERROR, EpisodeRecord
from pytest_vlaeval.results import summary, write_json_atomic
from pytest_vlaeval.session import RunContext
from pytest_vlaeval.store import RunStore


class ResultsController:
    def __init__(self, run: RunContext, store: RunStore) -> None:
        self.run = run
        self.store = store
        self.records = store.load()
        self.scheduled: dict[str, tuple[str, int]] = {}
        self.reported: set[str] = set()
        self.pending_by_task: dict[str, set[str]] = defaultdict(set)
        self.interrupted = False
        self.written: tuple[dict[str, Any], list[dict[str, Any]]] | None = None

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

    # -- what came back --------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.scheduled or report.nodeid in self.reported:
            return
        payload = getattr(report, RECORD_ATTR, None)
        if payload is not None:
            self._accept(report.nodeid, EpisodeRecord.from_dict(payload))
        elif report.failed:  # a crashed worker, or a harness fault before the episode ran
            message = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "no result"
            self._accept(report.nodeid, self._error(report.nodeid, message, "harness", getattr(report, "node", None)))

    def _accept(self, nodeid: str, record: EpisodeRecord) -> None:
        previous = self.records.get(record.key)
        if previous is not None:
            record = dataclasses.replace(record, attempt=previous.attempt + 1)
        self.reported.add(nodeid)
        self.store.append(record)
        self.records[record.key] = record
        pending = self.pending_by_task[record.task]
        pending.discard(nodeid)
        if not pending:
            self.write()

    def _error(self, nodeid: str, message: str, kind: str, node: Any = None) -> EpisodeRecord:
        task, seed = self.scheduled[nodeid]
        worker = getattr(node, "gateway", None)
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
        self.interrupted = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.interrupted = self.interrupted or exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
        if not self.interrupted:
            for nodeid in sorted(set(self.scheduled) - self.reported):
                self._accept(nodeid, self._error(nodeid, "scheduled but no result arrived from any worker", "lost"))
        self.write()
        self.store.close()

    def write(self) -> None:
        """Materialise the canonical files from every record of the run (all sessions)."""
        body, per_task = summary(self.run.selection, self.records, interrupted=self.interrupted)
        for result in per_task:
            write_json_atomic(self.run.run_dir / f"{result['env_id']}.json", result)
        write_json_atomic(self.run.run_dir / "summary.json", body)
        self.written = body, per_task

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written is None:
            return
        from pytest_vlaeval.report import render_summary

        render_summary(terminalreporter, *self.written, self.run)
