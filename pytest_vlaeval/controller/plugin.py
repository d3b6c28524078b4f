"""Controller side: records arrive on reports, go to the durable store, and come out as the
run's files (a task's canonical JSON as it completes, the whole set at a bounded rate and at the
end), the gate verdict and the terminal summary.

Runs only in the controlling process (with xdist, workers report here). Every scheduled
episode ends up with a record: a worker crash or a harness bug becomes an error record (retried
with ``--vla-retries``), and an episode that was scheduled but never reported becomes one at
session end.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Generator, Iterable
from dataclasses import replace
from typing import Any

import pytest

from pytest_vlaeval import termination
from pytest_vlaeval.controller.gate_run import GateRun
from pytest_vlaeval.controller.intake import Intake
from pytest_vlaeval.controller.ledger import Ledger
from pytest_vlaeval.controller.progress import Progress, live_wanted
from pytest_vlaeval.controller.run_writer import RunWriter
from pytest_vlaeval.controller.terminal import completion_command, render_summary
from pytest_vlaeval.distribute.backends import WorkerBackends, on_this_host
from pytest_vlaeval.distribute.watch import EpisodeWatch
from pytest_vlaeval.distribute.xdist_internals import holder
from pytest_vlaeval.episodes.collect import RECORD_ATTR, EpisodeItem
from pytest_vlaeval.episodes.deadline import HARD_FACTOR
from pytest_vlaeval.episodes.nodeid import parse_nodeid
from pytest_vlaeval.errors import EpisodeError, HarnessFault, ResultLost, ResultsUnwritable, SpecError, WorkerCrash
from pytest_vlaeval.gate.protocol import Gate
from pytest_vlaeval.gate.verdict import UNDECIDED, VERDICT_PREFIX
from pytest_vlaeval.printable import terminal_safe
from pytest_vlaeval.report import chart
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.made_with import MadeWith, hosts_note, made_with, this_machine
from pytest_vlaeval.results.record import EpisodeRecord, error_record, record_line
from pytest_vlaeval.results.store import RunStore
from pytest_vlaeval.run_context import WORKER_PLAN, RunContext

RERUN_OUTCOME = "rerun"
"""Outcome given to a crashed attempt that will be retried, so pytest counts it apart."""


class ResultsController:
    """pytest's hooks in, the ledger's bookkeeping and the store's files out."""

    def __init__(
        self,
        run: RunContext,
        store: RunStore,
        latest: LatestRecords,
        gate: Gate,
        workers: WorkerBackends,
    ) -> None:
        self.run = run
        self.workers = workers
        """The workers' lifecycle, which runs the frozen-worker watch of an xdist session."""
        self.store = store
        self.latest = latest
        self.ledger = Ledger(latest, run.execution.retries)
        self.intake = Intake(store)
        self._vetted: dict[str, list[EpisodeRecord]] = {}
        """Each report's records as ``pytest_runtest_logreport_vet`` checked them, until the report is logged."""
        self.refused = False
        self.interrupted = False
        self.gate = gate
        self.gate_run = GateRun(gate, store.dir)
        self.writer = RunWriter(run, store, latest, self.intake, gate.baseline)
        self.progress = Progress(None, {}, live=False)  # replaced at session start
        self.watch: EpisodeWatch | None = None  # started at session start, under xdist
        self.session: pytest.Session | None = None
        self.worker_count = 0
        """The session's xdist workers (0 when serial); a worker replaced after a crash is one of them."""
        self.chart_warmed = False
        """Whether the chart's imports were warmed (``chart.warm``), once per session."""

    # -- what was scheduled --------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._schedule(item.nodeid for item in session.items if isinstance(item, EpisodeItem))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._schedule(ids)

    def _schedule(self, nodeids: Iterable[str]) -> None:
        episodes = ((nodeid, key) for nodeid in nodeids if (key := parse_nodeid(nodeid)) is not None)
        for task, seed in self.ledger.schedule(episodes):
            self.progress.schedule(task)
            self.gate.schedule(seed)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Hand every worker the same episode list, chosen once here."""
        node.workerinput[WORKER_PLAN] = sorted(self.run.subset.episodes)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: list[Any]) -> None:
        self.worker_count = len(specs)

    # -- who holds what --------------------------------------------------------------------

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        key = self.ledger.scheduled.get(nodeid)
        if self.watch is None or key is None or self.session is None:
            return
        worker = holder(self.session.config, nodeid)
        if worker is not None:
            self.watch.started(nodeid, worker, *key)

    # -- what came back --------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died mid-episode: record the crash, and retry it if retries are left."""
        if crashitem not in self.ledger.scheduled:
            return
        worker = getattr(getattr(report, "node", None), "gateway", None)
        worker_id = getattr(worker, "id", "?")
        ended = self.watch.ended.get(worker_id) if self.watch is not None else None
        if self.watch is not None:
            self.watch.finished(crashitem, completed=False)
        if ended:
            message = f"worker {worker_id} stopped answering: {ended}"
        else:
            message = f"worker {worker_id} crashed while running this episode"
            if self.run.execution.timeout:
                message += f" (or was ended for being stuck past {HARD_FACTOR:g}x --vla-timeout)"
        self._accept(self._error(crashitem, WorkerCrash(message), worker))
        if self.ledger.retry_crash(crashitem):
            report.outcome = RERUN_OUTCOME  # type: ignore[assignment]
            sched.mark_test_pending(crashitem)
        else:
            report.when = "setup"  # the episode could not be evaluated: pytest counts it as an error
            self._settle(crashitem)

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        if report.outcome == RERUN_OUTCOME:
            return "rerun", "R", ("RERUN", {"yellow": True})
        return None

    @pytest.hookimpl(tryfirst=True, specname="pytest_runtest_logreport")
    def pytest_runtest_logreport_vet(self, report: pytest.TestReport) -> None:
        """Before the terminal counts the report: a record the store cannot keep (a policy's config
        nested past what a log holds, say) becomes a harness error of its episode, and its report an
        error too, never a failure; the run goes on."""
        payload = getattr(report, RECORD_ATTR, None)
        if payload is None or not self.ledger.expects(report.nodeid):
            return
        records, refused = [], False
        for attempt in payload:
            try:
                record = EpisodeRecord.from_dict(attempt)
                record_line(record)  # the store's own check, before the record can claim the run's policy
            except (ValueError, TypeError) as exc:
                record = self._error(report.nodeid, HarnessFault(f"the record of this episode cannot be stored: {exc}"))
                refused = True
            records.append(record)
        self._vetted[report.nodeid] = records
        if refused and report.when == "call":
            report.outcome, report.when, report.longrepr = "failed", "setup", records[-1].message  # type: ignore[assignment]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown" and self.watch is not None:
            self.watch.finished(report.nodeid, completed=True)
        if not self.ledger.expects(report.nodeid):
            return
        records = self._vetted.pop(report.nodeid, None)
        if records is not None:
            for record in records:
                self._accept(record)
            self._settle(report.nodeid)
        elif report.failed:  # a harness fault before the episode ran (crashes come through handlecrashitem)
            message = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "no result"
            self._accept(self._error(report.nodeid, HarnessFault(message)))
            self._settle(report.nodeid)

    def _accept(self, record: EpisodeRecord) -> None:
        try:
            self.intake.add(self.ledger.number(record))
        except SpecError as exc:  # the run's recorded policy is another one
            self.store.close()
            self.refused = True
            pytest.exit(f"refusing to mix episodes into this run: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
        except ResultsUnwritable as exc:  # nothing more can be kept: stop, naming the file
            self.store.close()
            self.refused = True
            args = self.session.config.invocation_params.args if self.session is not None else ()
            pytest.exit(
                f"{exc}; the episodes stored before it are kept: free space, then run {completion_command(args)}",
                returncode=pytest.ExitCode.INTERNAL_ERROR,
            )

    def _settle(self, nodeid: str) -> None:
        task, seed = self.ledger.scheduled[nodeid]
        task_done = self.ledger.settle(nodeid)
        self.progress.settled(self.latest[(task, seed)])
        if task_done:
            self.progress.task_finished(task, self.writer.task_finished(task, interrupted=self.interrupted))
        looks, stop = self.gate.settle(seed, self.latest.outcomes)
        for line in looks:
            self.progress.notice(line)
        if stop is not None and self.session is not None:
            # Run nothing more: the affinity scheduler asks the gate; a serial session stops after this episode.
            self.gate_run.stop(completion_command(self.session.config.invocation_params.args, resume=True))
            self.session.shouldstop = stop
        if not self.chart_warmed and 0 < self.ledger.unsettled() < self.worker_count:
            # Fewer episodes left than workers: a core idles until the end, and the chart's imports
            # run on it now instead of after the last episode.
            self.chart_warmed = True
            chart.warm()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        steps = {t.env_id: t.max_steps for t in self.run.selection.tasks}
        self.progress = Progress(reporter, steps, live_wanted(session.config.getoption("vla_live")))
        self.progress.start()
        self.session = session
        made = self._made_with(session.config)
        hosts = hosts_note(made.machines, "this run's sessions")
        gate_made_with = self.gate_run.made_with_note(made)
        if reporter is not None:
            for line in self.gate.start_lines():
                reporter.write_line(line, yellow=line.endswith(UNDECIDED), bold=True)
            for line in filter(None, [hosts, gate_made_with and f"{VERDICT_PREFIX}: {gate_made_with}"]):
                reporter.write_line(terminal_safe(line), yellow=True)
        execution = self.run.execution
        watch = EpisodeWatch(execution.timeout, 1 + execution.retries, self.progress.notice, self.progress.show_stalled)
        self.watch = self.workers.start_watch(session.config, watch)

    def _made_with(self, config: pytest.Config) -> MadeWith:
        """What the run is made with once this session's host joins it, which the intake records
        with the session's first stored episode (a session refused leaves the run as it was)."""
        host = this_machine(self.run.selection.benchmark.install.system_packages, _workers_elsewhere(config))
        self.intake.host = host
        try:
            made = made_with(self.run.run_dir)
        except SpecError as exc:
            raise pytest.UsageError(terminal_safe(str(exc))) from None
        return made if host in made.machines else replace(made, machines=(*made.machines, host))

    def _error(self, nodeid: str, error: EpisodeError, worker: Any = None) -> EpisodeRecord:
        task, seed = self.ledger.scheduled[nodeid]
        return error_record(task, seed, error, worker=getattr(worker, "id", "controller"))

    # -- session end -------------------------------------------------------------------------

    def pytest_keyboard_interrupt(self) -> None:
        self.interrupted = not self.gate_run.stopped_early  # a gate's early stop reaches pytest as an interruption

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.watch is not None:
            self.watch.stop()
        self.progress.stop()
        if self.refused:  # a session refused by the run leaves every file of the run as it found it
            return
        self.session = None  # no early stop once the session is ending
        stopped = self.gate_run.stopped_early
        self.interrupted = not stopped and (
            self.interrupted or exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
        )
        unreported = self.ledger.unreported()
        if not stopped and not self.interrupted:
            for nodeid in unreported:
                self._accept(self._error(nodeid, ResultLost("scheduled but no result arrived from any worker")))
                self._settle(nodeid)
        self.intake.release()  # no episode completed to claim the policy; its errors still count
        with termination.deferred() as received:  # the run's files are written whole, signal or not
            judge = functools.partial(self.gate_run.judge, len(unreported))
            self.writer.write(interrupted=self.interrupted, judge=judge, final=True)
            if self.gate_run.verdict is not None:
                session.exitstatus = self.gate_run.exit_status(
                    session.exitstatus, self.ledger.errored(), self.run.gate.undecided_exit
                )
            if self.writer.files.canonical_refused is not None and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # the run's result was not kept
            self.store.close()
        if received:
            self.progress.notice(f"vlaeval: {received[0]} received while the run's files were written: they are whole")
            session.exitstatus = pytest.ExitCode.INTERRUPTED

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> Generator[None]:
        """The run's result ends its output: the results table comes after pytest's short test
        summary (which lists failed episodes only under ``-r``: see ``plugin.pytest_configure``)."""
        result = yield
        written = self.writer.written
        if written is not None:
            args = config.invocation_params.args
            verdict, writer = self.gate_run.verdict, self.writer
            hosts = hosts_note(made_with(self.run.run_dir).machines, "this run's sessions")
            render_summary(
                terminalreporter, *written, self.run, verdict, args, writer.files.chart, writer.unwritten, hosts
            )
        return result


def _workers_elsewhere(config: pytest.Config) -> bool:
    """Whether ``--tx`` starts a worker on another host (``ssh=``, ``socket=``, ``popen//via=``):
    this host's record then says nothing of the host that ran its episodes."""
    import execnet

    specs = getattr(config.option, "tx", None) or ()
    return any(not on_this_host(execnet.XSpec(re.sub(r"^\d+\*", "", spec))) for spec in specs)
