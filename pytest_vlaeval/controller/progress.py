"""Where a run is, on the controller: a line per finished task (SR, progress, ETA by expected
steps) everywhere, and on a terminal a rich live panel (overall bar, per-task rows).

The live panel never garbles pytest's output: while it is shown, pytest's terminal writer goes
through a line buffer that prints whole lines above the panel.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import IO, Any

from pytest_vlaeval.results.record import ERROR, SUCCESS
from pytest_vlaeval.results.schema import TaskResult
from pytest_vlaeval.results.stats import success_rate

RECENT_ROWS = 8
# Costs in env steps for the ETA (measured on MIKASA: a step ~0.13 s, a reconfiguring reset
# ~0.4 s, an env build ~5 s); a worker builds each task's env about once.
RESET_STEPS = 3
BUILD_STEPS = 38


class Progress:
    def __init__(self, reporter: Any, steps: dict[str, int], live: bool) -> None:
        self.reporter = reporter
        self.steps = steps
        self.live_wanted = live
        self.started = time.monotonic()
        self.scheduled: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.finished: list[str] = []
        self.stalled: list[str] = []
        """Episodes running far longer than they should (see ``controller/watch.py``)."""
        self._live: Any = None
        self._proxy: LineBuffer | None = None

    # -- what the controller tells --------------------------------------------------------

    def schedule(self, task: str) -> None:
        self.scheduled[task] += 1

    def settled(self, task: str, outcome: str) -> None:
        self.done[task] += 1
        self.successes[task] += outcome == SUCCESS
        self.errors[task] += outcome == ERROR
        self._refresh()

    def task_finished(self, task: str, result: TaskResult | None) -> None:
        self.finished.append(task)
        if self.reporter is None:
            return
        verdict = (
            f"SR {100 * result['sr']:.1f}% ({result['n_episodes']}/{result['n_expected']}, {result['n_errors']} errors)"
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

        total, done = sum(self.scheduled.values()), sum(self.done.values())
        rows = Table(show_edge=False, box=None, padding=(0, 1))
        for column in ("task", "episodes", "SR so far", "errors"):
            rows.add_column(column, justify="left" if column == "task" else "right")
        running = [t for t in self.scheduled if 0 < self.done[t] < self.scheduled[t]]
        for task in running + self.finished[-RECENT_ROWS:]:
            completed = self.done[task] - self.errors[task]
            sr = f"{100 * success_rate(self.successes[task], completed):.1f}%" if completed else "-"
            state = "" if task in self.finished else " (running)"
            rows.add_row(task + state, f"{self.done[task]}/{self.scheduled[task]}", sr, str(self.errors[task] or ""))
        header = Table.grid(expand=True, padding=(0, 1))
        header.add_column(ratio=1)
        header.add_column(no_wrap=True)
        header.add_row(ProgressBar(total=max(total, 1), completed=done), self._overall())
        stalled = [Text(line, style="yellow") for line in self.stalled]
        return Panel(Group(header, rows, *stalled), title="vlaeval", border_style="blue")

    def _overall(self) -> str:
        """Episodes done, elapsed, and an ETA from the work done so far, counted in env steps."""
        total, done = sum(self.scheduled.values()), sum(self.done.values())
        done_work = sum(self._work(t, self.done[t], started=False) for t in self.done)
        left_work = sum(self._work(t, n - self.done[t], started=self.done[t] > 0) for t, n in self.scheduled.items())
        elapsed = time.monotonic() - self.started
        eta = f"ETA {duration(elapsed * left_work / done_work)}" if left_work and done_work else "done"
        return f"{done}/{total} episodes, {duration(elapsed)}, {eta}"

    def _work(self, task: str, episodes: int, *, started: bool) -> float:
        """Cost of ``episodes`` of ``task`` in step units, with a reset each and one env build."""
        if not episodes:
            return 0.0
        return episodes * (self.steps[task] + RESET_STEPS) + (0 if started else BUILD_STEPS)


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
