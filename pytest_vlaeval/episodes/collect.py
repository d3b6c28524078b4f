"""Episodes as pytest items, one per (task, seed), under a node per split and per task (``nodeid``).

The episode runs in ``setup`` and its verdict is checked in ``call``: anything the harness
could not do is therefore a pytest *error* (and a failed setup everywhere: terminal, junitxml,
``--lf``), and only a finished episode without success is a *failure*.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vlaeval.benchmark.model import Selection, Task
from pytest_vlaeval.episodes.nodeid import lockstep_group_positions, split_nodeid
from pytest_vlaeval.episodes.runner import EpisodeRunner
from pytest_vlaeval.errors import EpisodeError, EpisodeFailed, SpecError
from pytest_vlaeval.results.record import ERROR, EpisodeRecord

if TYPE_CHECKING:
    from pytest_vlaeval.gate.settings import GateSettings

RECORD_ATTR = "vla_records"
"""Attribute of a TestReport that carries the episode's records, one per attempt (JSON-safe dicts)."""


class EpisodeItem(pytest.Item):
    """One episode. Items are many (tasks x seeds, in the controller and again in every worker),
    so each holds only its seed and index: the task, its markers and the plan live on its
    ``TaskNode``."""

    parent: TaskNode
    group: tuple[tuple[int, int], ...] | None = None
    """``(seed, index)`` of the episodes run in lockstep with this one, itself included; set (one
    tuple shared by the group) only under ``--vla-lockstep``."""

    def __init__(self, *, seed: int, index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seed = seed
        self.index = index
        self.attempts: list[EpisodeRecord] = []

    @property
    def task(self) -> Task:
        return self.parent.task

    @property
    def runner(self) -> EpisodeRunner:
        return self.parent.plan.runner

    @property
    def retries(self) -> int:
        return self.parent.plan.retries

    @property
    def record(self) -> EpisodeRecord | None:
        """The attempt that counts: the last one."""
        return self.attempts[-1] if self.attempts else None

    def setup(self) -> None:
        """Run the episode (with its lockstep group); an error is retried, alone, up to
        ``--vla-retries`` times."""
        for attempt in range(1 + self.retries):
            if attempt == 0:
                record = self.runner.record(self.task, self.seed, self.group or ((self.seed, self.index),))
            else:
                record = self.runner.retry(self.task, self.seed, self.index)
            self.attempts.append(record)
            if record.video:
                self.user_properties.append(("video", record.video))  # e.g. into junitxml
            if record.outcome != ERROR:
                return
            self.runner.close()  # a retry starts from a freshly built env
        raise EpisodeError(self.attempts[-1].message)

    def runtest(self) -> None:
        assert self.record is not None
        if not self.record.success:
            raise EpisodeFailed(self.record.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, EpisodeFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.task.env_id} seed {self.seed}"


@dataclass(frozen=True)
class Plan:
    """What this session evaluates: the run's selection, narrowed to ``episodes``."""

    selection: Selection
    episodes: frozenset[tuple[str, int]]
    runner: EpisodeRunner
    retries: int
    note: str | None = None
    """Why the session runs less than the universe (a shard, a rerun), said at session start."""
    sequential: GateSettings | None = None
    """The sequential gate's blocks: every task's block b runs before any task's block b+1."""


class TaskNode(pytest.Collector):
    def __init__(self, *, task: Task, plan: Plan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.plan = plan
        for marker in task.marker_names:  # ``-m`` sees a collector's markers on every item under it
            self.add_marker(marker)

    def collect(self) -> Iterator[EpisodeItem]:
        for index, seed in enumerate(self.plan.selection.seeds):
            if (self.task.env_id, seed) in self.plan.episodes:
                yield EpisodeItem.from_parent(self, name=str(seed), seed=seed, index=index)


class SplitNode(pytest.Collector):
    def __init__(self, *, tasks: list[Task], plan: Plan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks = tasks
        self.plan = plan

    def collect(self) -> Iterator[TaskNode]:
        for task in self.tasks:
            yield TaskNode.from_parent(self, name=task.env_id, task=task, plan=self.plan)


class BenchmarkCollection:
    """Replaces the session's collection with the benchmark's episodes."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if self.plan.note and reporter is not None:
            reporter.write_line(self.plan.note, bold=True)

    def pytest_ignore_collect(self, collection_path: Path) -> bool:
        return True  # the user's own test files are not part of an evaluation

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        report = yield
        if isinstance(collector, pytest.Session):
            report.result.extend(self._split_nodes(collector))
        return report

    def _split_nodes(self, session: pytest.Session) -> list[SplitNode]:
        by_split: dict[str, list[Task]] = {}
        for task in self.plan.selection.tasks:
            if any(key[0] == task.env_id for key in self.plan.episodes):
                by_split.setdefault(task.split, []).append(task)
        name = self.plan.selection.benchmark.name
        return [
            SplitNode.from_parent(
                session,
                name=split_nodeid(name, split),
                nodeid=split_nodeid(name, split),
                tasks=tasks,
                plan=self.plan,
            )
            for split, tasks in by_split.items()
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Benchmark order (task, then seed; block first for the sequential gate), whatever a
        shuffling plugin did before us."""
        order = {task.env_id: i for i, task in enumerate(self.plan.selection.tasks)}
        sequential = self.plan.sequential
        items.sort(
            key=lambda item: (
                (sequential.block_of(item.index) if sequential else 0, order[item.task.env_id], item.seed)
                if isinstance(item, EpisodeItem)
                else (-1, -1, 0)
            )
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Check the selection against the execution mode (``--vla-reference-order`` runs whole
        tasks), and tell each episode its lockstep group (``--vla-lockstep``), as the scheduler
        groups them."""
        items = [item for item in session.items if isinstance(item, EpisodeItem)]
        try:
            self.plan.runner.check_order([(item.task.env_id, item.index) for item in items])
        except SpecError as exc:
            raise pytest.UsageError(str(exc)) from None
        size = self.plan.runner.group_size
        if size == 1:
            return
        sequential = self.plan.sequential
        keys = [(item.task.env_id, sequential.block_of(item.index) if sequential else 0) for item in items]
        for positions in lockstep_group_positions(keys, size):
            group = tuple((items[p].seed, items[p].index) for p in positions)
            for p in positions:
                items[p].group = group

    def pytest_unconfigure(self) -> None:
        self.plan.runner.close()


SECTION_LIMIT = 20_000
"""The most characters of an error's detail shown in the session's output (the record keeps all)."""


def bounded(text: str) -> str:
    """``text`` as a report section shows it: its end (where a traceback says what broke) when long."""
    if len(text) <= SECTION_LIMIT:
        return text
    return f"... ({len(text) - SECTION_LIMIT:,} characters before, in the episode's record)\n{text[-SECTION_LIMIT:]}"


class EpisodeReports:
    """Puts each episode's records on the report that settles it (setup error or call), and
    shows an episode error as its one-line message, the original traceback as a section."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        record = getattr(item, "record", None)
        if not isinstance(item, EpisodeItem) or record is None:
            return report
        if call.when == "setup" and report.failed and call.excinfo and call.excinfo.errisinstance(EpisodeError):
            report.longrepr = record.message
            if record.detail:
                report.sections.append(("episode error traceback", bounded(record.detail)))
        if record.video and (call.when == "call" or report.failed):
            report.sections.append(("episode video", record.video))
        if call.when == "call" or (call.when == "setup" and report.failed):
            # Round-trip through JSON: execnet carries builtin types only, and anything else
            # in a report would be lost with a silent INTERNALERROR.
            setattr(report, RECORD_ATTR, json.loads(json.dumps([a.to_dict() for a in item.attempts])))
        return report
