"""A gate's baseline: a directory of per-task ``<ENV_ID>.json`` files, read and checked once, when
the session starts, so that a baseline the gate cannot use stops the session with one line
naming the file and the field before any episode runs (rather than a traceback, or a verdict,
after the whole evaluation).

Only the selected tasks' files are read; other files (``summary.json``, another split's tasks)
are none of the gate's business. The gate pairs episodes by seed, so a task's file must list
``episode_seeds`` beside ``successes``, and the baseline must share at least one seed with this
run on every task it has. A lerobot-eval output directory (or its ``eval_info.json``) is a
baseline too, its tasks named and its seeds known as ``lerobot.eval_info`` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vlaeval import strict_json
from pytest_vlaeval.benchmark.model import Benchmark
from pytest_vlaeval.choices import RANDOM_BREAKS
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.gate.methods import Method, drop_method
from pytest_vlaeval.gate.stats import Outcomes
from pytest_vlaeval.lerobot.eval_info import eval_info_location, read_eval_info


@dataclass(frozen=True)
class Baseline:
    directory: Path
    outcomes: dict[str, Outcomes]
    """Selected tasks with at least one completed episode there: seed -> success."""
    missing: tuple[str, ...] = ()
    """Selected tasks without a file in the baseline."""
    all_errors: tuple[str, ...] = ()
    """Selected tasks whose file lists no completed episode."""

    @property
    def not_compared(self) -> str:
        """The selected tasks the gate cannot compare, for its verdict line ('' when none)."""
        parts = []
        if self.missing:
            parts.append(f"not in the baseline: {', '.join(self.missing)}")
        if self.all_errors:
            parts.append(f"no completed episode in the baseline: {', '.join(self.all_errors)}")
        return "; ".join(parts)

    def srs(self) -> list[float]:
        """Each compared task's baseline SR (over its completed episodes)."""
        return [sum(o.values()) / len(o) for o in self.outcomes.values()]

    def seed_means(self) -> list[float]:
        """The mean over the compared tasks at each seed complete on all of them (how much the
        seeds move every task together: ``seed_model.seed_correlation``)."""
        common = set.intersection(*(set(o) for o in self.outcomes.values()))
        return [sum(o[s] for o in self.outcomes.values()) / len(self.outcomes) for s in sorted(common)]

    def paired_seeds(self, seeds: Sequence[int]) -> list[int]:
        """Those of ``seeds`` the baseline has on every compared task: the only ones the gate can pair."""
        return sorted(set(seeds).intersection(*self.outcomes.values()))

    def method(self, seeds: int, max_drop: float, assume: str = RANDOM_BREAKS) -> Method:
        """The gate's method against this baseline at a budget of ``seeds`` (``methods.drop_method``)."""
        return drop_method(self.srs(), self.seed_means(), seeds, max_drop, assume)


def load_baseline(directory: Path, env_ids: Sequence[str], seeds: Sequence[int], *, benchmark: Benchmark) -> Baseline:
    """The baseline for the selected tasks and this run's seeds; ``SpecError`` when the gate cannot use it.
    ``benchmark`` names the tasks of a lerobot-eval ``eval_info.json``."""
    where = f"--vla-baseline {directory}"
    location = eval_info_location(directory)
    if location is not None:
        given = {task.env_id: task.outcomes for task in read_eval_info(location, benchmark, "--vla-baseline")}
        present, read = list(given), given.get
    else:
        present, read = _per_task_files(directory, where)
    outcomes, missing, all_errors = {}, [], []
    for env_id in env_ids:
        task = read(env_id)
        if task is None:
            missing.append(env_id)
        elif task:
            outcomes[env_id] = task
        else:
            all_errors.append(env_id)
    if not outcomes:
        has = f"it has {_names(present)}" if present else "it has no per-task <ENV_ID>.json file"
        raise SpecError(
            f"{where}: no selected task has a completed episode there ({has}; this run needs {_names(env_ids)})"
        )
    baseline = Baseline(directory, outcomes, tuple(missing), tuple(all_errors))
    if not baseline.paired_seeds(seeds):
        theirs = sorted(set().union(*(set(o) for o in outcomes.values())))
        raise SpecError(
            f"{where}: no seed of this run is in the baseline for every compared task, so nothing can be paired "
            f"(it has seeds {_span(theirs)}, this run needs {_span(sorted(set(seeds)))}; see --vla-start-seed and "
            "--episodes)"
        )
    return baseline


def _per_task_files(directory: Path, where: str) -> tuple[list[str], Callable[[str], dict[int, bool] | None]]:
    """The tasks a directory has a file of, and the reader of one task's (None: no file)."""
    if not directory.is_dir():
        raise SpecError(f"{where}: no such directory")

    def read(env_id: str) -> dict[int, bool] | None:
        file = directory / f"{env_id}.json"
        return _task_outcomes(file, env_id) if file.is_file() else None

    return sorted(p.stem for p in directory.glob("*.json") if p.name != "summary.json"), read


def _task_outcomes(file: Path, env_id: str) -> dict[int, bool]:
    """seed -> success of one per-task file, every field the gate reads checked."""
    try:
        data = strict_json.loads(file.read_text(encoding="utf-8-sig"))  # a byte-order mark is harmless
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"--vla-baseline {file}: cannot read it ({exc})") from None
    except ValueError as exc:  # not JSON, a number beyond the float range, or nested too deep
        raise SpecError(f"--vla-baseline {file}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SpecError(f"--vla-baseline {file}: expected a JSON object, got {type(data).__name__}")
    if data.get("env_id") != env_id:
        raise SpecError(f"--vla-baseline {file}: env_id is {data.get('env_id')!r}, expected {env_id!r} (its file name)")
    successes = _field(file, data, "successes", lambda v: isinstance(v, bool), "true/false")
    if "episode_seeds" not in data:
        raise SpecError(f"--vla-baseline {file}: no episode_seeds field; the gate pairs episodes by seed")
    seeds = _field(
        file, data, "episode_seeds", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "seeds"
    )
    if len(seeds) != len(successes):
        raise SpecError(f"--vla-baseline {file}: {len(seeds)} episode_seeds for {len(successes)} successes")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"--vla-baseline {file}: episode_seeds lists a seed twice")
    sr = data.get("sr", 0.0)
    if isinstance(sr, bool) or not isinstance(sr, int | float) or not 0 <= sr <= 1:
        raise SpecError(f"--vla-baseline {file}: sr is {json.dumps(sr)}, expected a success rate in [0, 1]")
    return dict(zip(seeds, successes, strict=True))


def _field(file: Path, data: dict[str, Any], name: str, valid: Any, what: str) -> list[Any]:
    values = data.get(name)
    if not isinstance(values, list) or not all(valid(v) for v in values):
        raise SpecError(f"--vla-baseline {file}: {name} must be a list of {what}, got {json.dumps(values)[:60]}")
    return values


def _names(names: Sequence[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _span(seeds: Sequence[int]) -> str:
    """Seeds as a range when they are one, else the first few and the count."""
    if not seeds:
        return "none"
    if seeds[-1] - seeds[0] + 1 == len(seeds):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(map(str, seeds[:3])) + f", ... ({len(seeds)} seeds)"
