"""Where a run is, on the controller: a line per finished task (SR, progress, ETA by expected
steps) everywhere, and on a terminal a rich live panel (overall bar, per-task rows).

The ETA prices what is known to be left (each unfinished episode at its step limit, an env
build for each task not started) at the rate measured on the steps actually run since the
episodes were scheduled (bringing up the workers is no episode work): an episode
that errored (an env that could not be built, a missing asset) ran no steps, so it does not
make the rate look faster than it is. Early on the rate rests on a few episodes, so the ETA is
a range, narrowing as episodes complete.

The live panel never garbles pytest's output: while it is shown, pytest's terminal writer goes
through a line buffer that prints whole lines above the panel.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import IO, Any

from pytest_vlaeval.gate.stats import success_rate
from pytest_vlaeval.report.page import pct
from pytest_vlaeval.results.record import ERROR, SUCCESS, EpisodeRecord
from pytest_vlaeval.schema import TaskResult

RECENT_ROWS = 8
# Costs in env steps for the ETA (measured on MIKASA: a step ~0.13 s, a reconfiguring reset
# ~0.4 s, an env build ~5 s); a worker builds each task's env about once.
RESET_STEPS = 3
BUILD_STEPS = 38
RANGE_UNTIL = 0.1
"""The ETA is shown as a range while its relative spread (1/sqrt(completed episodes)) is above this."""


class Progress:
    def __init__(
        self, reporter: Any, steps: dict[str, int], live: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.reporter = reporter
        self.steps = steps
        self.live_wanted = live
        self.clock = clock
        self.started = clock()
        self.work_started = self.started
        self.work_done = 0.0
        """Step units actually run: completed episodes' steps, a reset per episode, a build per task."""
        self.completed = 0
        self.scheduled: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.finished: list[str] = []
        self.total = self.total_done = 0
        self.left_work = 0
        """Step units still to run, kept as episodes come and go (the ETA's numerator), so a
        refresh costs the same at 3,000 tasks as at 3."""
        self.running: dict[str, None] = {}
        """Tasks with some but not all of their episodes done, in the order they started."""
        self.stalled: list[str] = []
        """Episodes running far longer than they should (see ``distribute/watch.py``)."""
        self._live: Any = None
        self._proxy: LineBuffer | None = None

    # -- what the controller tells --------------------------------------------------------

    def schedule(self, task: str) -> None:
        if not self.scheduled:  # workers are up: bringing them up is no episode work
            self.work_started = self.clock()
        with self._changing(task):
            self.scheduled[task] += 1
            self.total += 1

    def settled(self, record: EpisodeRecord) -> None:
        task = record.task
        if record.completed:
            self.work_done += (
                (record.length or 0) + RESET_STEPS + (0 if self.done[task] - self.errors[task] else BUILD_STEPS)
            )
            self.completed += 1
        else:
            self.work_done += RESET_STEPS
        with self._changing(task):
            self.done[task] += 1
            self.total_done += 1
        self.successes[task] += record.outcome == SUCCESS
        self.errors[task] += record.outcome == ERROR
        self._refresh()

    @contextlib.contextmanager
    def _changing(self, task: str) -> Iterator[None]:
        """Keep the work left and the running tasks current across a change to ``task``'s counts."""
        self.left_work -= self._left(task)
        yield
        self.left_work += self._left(task)
        if 0 < self.done[task] < self.scheduled[task]:
            self.running.setdefault(task)
        else:
            self.running.pop(task, None)

    def _left(self, task: str) -> int:
        left = self.scheduled[task] - self.done[task]
        if left <= 0:
            return 0
        return left * (self.steps[task] + RESET_STEPS) + (0 if self.done[task] else BUILD_STEPS)

    def task_finished(self, task: str, result: TaskResult | None) -> None:
        self.finished.append(task)
        if self.reporter is None:
            return
        verdict = (
            f"SR {pct(result['sr'])} ({result['n_episodes']}/{result['n_expected']}, {result['n_errors']} errors)"
            if result
            else "no completed episode"
        )
        if self._writer().width_of_current_line:  # after a row of progress dots
            self.reporter.write("\n")
        self.reporter.write_line(f"vlaeval: {task} {verdict} | {self._overall()}")
        self._refresh()

    def notice(self, line: str) -> None:
        """A line from outside pytest's own flow (the episode watch's thread), shown at once."""
        if self.reporter is None:
            return
        if self._writer().width_of_current_line:
            self.reporter.write("\n")
        self.reporter.write_line(line, yellow=True)
        self._writer().flush()

    def show_stalled(self, stalled: list[str]) -> None:
        if stalled or self.stalled:
            self.stalled = stalled
            self._refresh()

    # -- live panel ---------------------------------------------------------------------------

    def start(self) -> None:
        if not self.live_wanted or self.reporter is None:
            return
        from rich.console import Console
        from rich.live import Live

        writer = self._writer()
        console = Console(file=writer._file, force_terminal=True, width=writer.fullwidth)
        self._live = Live(self._panel(), console=console, refresh_per_second=4, transient=True, redirect_stdout=False)
        self._proxy = LineBuffer(console, writer._file)
        writer._file = self._proxy
        self._live.start()

    def stop(self) -> None:
        if self._live is None:
            return
        self._live.stop()
        self._proxy.close()
        self._writer()._file = self._proxy.original
        self._live = None

    def _writer(self) -> Any:
        """pytest's own terminal writer. Kept private to this module on purpose: pytest has no
        public API that says whether the current line is open (a row of progress letters, under
        ``-q`` too) or that routes its output above a live display; without them the panel would
        garble pytest's lines, or the task lines would join a row of letters."""
        return self.reporter._tw

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._panel())

    def _panel(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        total, done = self.total, self.total_done
        rows = Table(show_edge=False, box=None, padding=(0, 1))
        for column in ("task", "episodes", "SR so far", "errors"):
            rows.add_column(column, justify="left" if column == "task" else "right")
        for task in [*self.running, *self.finished[-RECENT_ROWS:]]:
            completed = self.done[task] - self.errors[task]
            sr = pct(success_rate(self.successes[task], completed) if completed else None)
            state = "" if task in self.finished else " (running)"
            rows.add_row(task + state, f"{self.done[task]}/{self.scheduled[task]}", sr, str(self.errors[task] or ""))
        header = Table.grid(expand=True, padding=(0, 1))
        header.add_column(ratio=1)
        header.add_column(no_wrap=True)
        header.add_row(ProgressBar(total=max(total, 1), completed=done), self._overall())
        stalled = [Text(line, style="yellow") for line in self.stalled]
        return Panel(Group(header, rows, *stalled), title="vlaeval", border_style="blue")

    def _overall(self) -> str:
        """Episodes done, elapsed, and the ETA (a range while it rests on few episodes)."""
        total, done = self.total, self.total_done
        elapsed = self.clock() - self.started
        eta = self.eta()
        if not total:
            left = "starting"
        elif done == total:
            left = "done"
        elif eta is None:
            left = "ETA after the first completed episode"
        elif eta[1] == eta[2]:
            left = f"ETA {duration(eta[0])}"
        else:
            left = f"ETA {duration(eta[0])} ({duration(eta[1])}-{duration(eta[2])})"
        return f"{done}/{total} episodes, {duration(elapsed)}, {left}"

    def eta(self) -> tuple[float, float, float] | None:
        """Seconds left: estimate, low, high; None until an episode has completed."""
        left_work = self.left_work
        if not left_work:
            return 0.0, 0.0, 0.0
        if not self.completed:
            return None
        estimate = (self.clock() - self.work_started) * left_work / self.work_done
        spread = 1 / math.sqrt(self.completed)
        if spread <= RANGE_UNTIL:
            return estimate, estimate, estimate
        return estimate, estimate / (1 + spread), estimate * (1 + spread)


def live_wanted(mode: str, stream: IO[str] | None = None) -> bool:
    """``auto``: on a terminal only, so CI logs get the plain lines."""
    stream = stream or sys.stdout
    return mode == "on" or (mode == "auto" and stream.isatty())


class LineBuffer:
    """A file for pytest's terminal writer: whole lines go above the live panel, a partial line
    (a row of progress dots) waits for its end."""

    def __init__(self, console: Any, original: IO[str]) -> None:
        from rich.ansi import AnsiDecoder

        self.console = console
        self.original = original
        self.partial = ""
        self.decoder = AnsiDecoder()

    def write(self, text: str) -> int:
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            self.console.print(self.decoder.decode_line(line))
        return len(text)

    def flush(self) -> None:
        pass  # a partial line is printed when it is complete, or at close

    def close(self) -> None:
        if self.partial:
            self.original.write(self.partial)
            self.partial = ""
        self.original.flush()

    def isatty(self) -> bool:
        return self.original.isatty()

    def fileno(self) -> int:
        return self.original.fileno()


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
