"""What more than one test module uses: where the suite's own files are, records to store, policies
to run, and helpers to read what a run wrote (its records, its HTML pages)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from libero_reference import Deterministic

from pytest_vlaeval.benchmark.model import Selection, resolve_benchmark
from pytest_vlaeval.envs import libero
from pytest_vlaeval.episodes.lone import LoneEpisodes
from pytest_vlaeval.episodes.loop import EpisodeResult, run_episode
from pytest_vlaeval.episodes.worker import Worker
from pytest_vlaeval.policy.loading import parse_policy
from pytest_vlaeval.results.record import EpisodeRecord

TESTS = Path(__file__).parent
"""The suite's root folder: the fake benchmark and the shared test modules live here."""
ROOT = TESTS.parent
"""The repository."""


def run_dir(pytester: pytest.Pytester) -> Path:
    (directory,) = [p for p in (pytester.path / "results").iterdir() if p.is_dir()]
    return directory


def lone_runner(selection: Selection, policy: str, video: tuple[str, Path] = ("none", Path("videos"))) -> LoneEpisodes:
    """Episodes run alone in this process, as a worker runs them by default."""
    return LoneEpisodes(Worker(selection, parse_policy(policy), "auto"), video=video)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def episode_records(directory: Path) -> dict[tuple[str, int], dict]:
    """The latest record of each episode in a run's store."""
    records = {}
    for log in sorted((directory / "episodes").glob("*.jsonl")):
        for line in log.read_text().splitlines():
            record = json.loads(line)
            records[(record["task"], record["seed"])] = record
    return records


@contextlib.contextmanager
def environ_restored(*names: str) -> Iterator[None]:
    """Put the variables ``names`` back as they were, set or not. For code that sets them with
    ``os.environ.setdefault``: monkeypatch cannot undo that where its ``delenv`` found the variable
    unset (it records nothing then), and the value would reach every later test and its subprocesses."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def assert_one_line_usage_error(result: pytest.RunResult, expected: str) -> None:
    """The session stopped before any episode with exactly one ``ERROR:`` line containing ``expected``
    (an option's value refused as it is parsed: pytest's usage line, then one ``error:`` line)."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    if len(errors) == 1 and errors[0].startswith("ERROR: usage: "):
        errors = [line for line in result.errlines if ": error: " in line]
    assert len(errors) == 1 and expected in errors[0], result.errlines


CONFIGURED = """
import os
import numpy as np

class Configured:
    chunk_size = 1
    config = {"weights": os.environ.get("WEIGHTS")}
    def reset(self, episode):
        self.seed = episode.seed
    def act(self, obs):
        if str(self.seed) == os.environ.get("FAIL_SEED"):
            raise RuntimeError("fails this seed")
        return np.zeros(7)
"""


def usage_error(result: pytest.RunResult) -> str:
    (line,) = [line for line in result.errlines if line.startswith("ERROR:")]
    return line


def record(task: str, seed: int, outcome: str, time: str = "2026-01-01T00:00:00", **extra) -> EpisodeRecord:
    success = {"success": True, "failure": False}.get(outcome)
    return EpisodeRecord(
        task=task, seed=seed, outcome=outcome, success=success, episode_return=None if success is None else 1.0,
        length=None if success is None else 5, message="", wall_time=0.1, worker="main", time=time, **extra,
    )  # fmt: skip


class Page(HTMLParser):
    """What a test reads of a page: task rows, video sources, fetched URLs, ids."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: dict[str, list[dict[str, str | None]]] = {}
        self.table: str | None = None
        self.sources: list[str] = []
        self.urls: list[str] = []
        self.ids: set[str] = set()
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "table":
            self.table = found.get("id")
        if tag == "tr" and "data-name" in found and self.table:
            self.rows.setdefault(self.table, []).append(found)
        if tag == "video":
            self.sources.append(str(found["src"]))
        for name in ("src", "href"):
            if found.get(name) and not str(found[name]).startswith("#"):
                self.urls.append(str(found[name]))


def read_page(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


CHECKPOINTS = """
import numpy as np


class Checkpoint:
    chunk_size = 1
    reach = 0.0

    def reset(self, episode):
        pass

    def act(self, obs):
        return np.full(7, self.reach, dtype=np.float32)


class Early(Checkpoint):
    reach = 0.0


class Middle(Checkpoint):
    reach = 0.65  # the fake env's bar is 0.5 + 0.1 * (seed % 5): seeds 100 and 101 succeed


class Late(Checkpoint):
    reach = 1.0
"""


def checkpoint_runs(fake: pytest.Pytester, *names: str, extra: tuple[str, ...] = ()) -> list[Path]:
    """One run of the fake benchmark's short split per ``CHECKPOINTS`` class named, in order."""
    fake.makepyfile(checkpoints=CHECKPOINTS)
    paths = []
    for name in names:
        before = set((fake.path / "results").glob("*")) if (fake.path / "results").exists() else set()
        fake.runpytest("--benchmark=fake.yaml:short", f"--policy=checkpoints:{name}", *extra)
        (new,) = set((fake.path / "results").glob("*")) - before
        paths.append(new)
    return paths


def perfect_baseline(run: Path, directory: Path, tasks: tuple[str, ...] = ("Alpha-v0", "Beta-v0")) -> Path:
    """A baseline in ``directory``: ``run``'s task files with every episode a success."""
    import json

    directory.mkdir()
    for env_id in tasks:
        data = read_json(run / f"{env_id}.json")
        data["successes"] = [True] * len(data["successes"])
        data["sr"] = 1.0
        (directory / f"{env_id}.json").write_text(json.dumps(data))
    return directory


FREEZES = """
import os
import signal

from fake_env_base import *  # noqa: F403  (the fake benchmark's env, frozen at its first step here)
from fake_env_base import FakeEnv, make_env as base_make_env


def freeze(action):
    while True:  # stopped again if anything sends it SIGCONT: it must stay frozen
        os.kill(os.getpid(), signal.SIGSTOP)


def make_env(task, benchmark, render_request):
    env = base_make_env(task, benchmark, render_request)
    env.step = freeze
    return env
"""
"""A remote host's ``fake_env.py`` (the fake benchmark's env saved beside it as ``fake_env_base.py``)
whose worker stops itself (SIGSTOP) at its first step: a frozen worker on another host."""


def make_interpreter(home: Path) -> Path:
    """A second virtual env at ``home`` over this env's packages (its own prefix and
    ``pyvenv.cfg``, its ``lib`` linked to this env's): a distinct interpreter as Python and xdist
    see it, made in milliseconds. Returns its python."""
    this_env = Path(sys.prefix)
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python").symlink_to(Path(sys._base_executable).resolve())
    (home / "pyvenv.cfg").write_text((this_env / "pyvenv.cfg").read_text())
    (home / "lib").symlink_to(this_env / "lib")
    return home / "bin" / "python"


def make_interpreter_with_own_copy(home: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """A second virtual env at ``home`` holding its own copy of this package (laid out as a wheel
    installs it, with its metadata at this version: ``package_copy(home)`` is its folder, to
    change), every other entry of this env's site-packages linked in but those whose name starts
    with one in ``leave_out``. Returns its python."""
    import importlib.metadata
    import shutil
    import sysconfig

    from pytest_vlaeval.version import __version__

    this_env = Path(sys.prefix)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = home / ours.relative_to(this_env)
    theirs.mkdir(parents=True)
    (home / "bin").mkdir()
    (home / "bin" / "python").symlink_to(Path(sys._base_executable).resolve())
    (home / "pyvenv.cfg").write_text((this_env / "pyvenv.cfg").read_text())
    for entry in ours.iterdir():  # this env's editable finder would import the clone, not the copy
        if not entry.name.startswith(("__editable__", "pytest_vlaeval", *leave_out)):
            (theirs / entry.name).symlink_to(entry)
    metadata = theirs / f"pytest_vlaeval-{__version__}.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pytest-vlaeval\nVersion: {__version__}\n")
    entry_points = importlib.metadata.distribution("pytest-vlaeval").read_text("entry_points.txt")
    (metadata / "entry_points.txt").write_text(entry_points or "")
    caches = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "pytest_vlaeval", theirs / "pytest_vlaeval", ignore=caches)
    shutil.copytree(ROOT / "benchmarks", theirs / "pytest_vlaeval" / "benchmarks", ignore=caches)
    return home / "bin" / "python"


def package_copy(home: Path) -> Path:
    """The folder of the package copy in an interpreter made by ``make_interpreter_with_own_copy``."""
    return next(home.glob("lib/python3*/site-packages/pytest_vlaeval"))


def assert_generated(name: str, script: str, *args: str) -> Path:
    """``benchmarks/<name>.yaml`` is what ``scripts/<script> ARGS`` writes (a generated file is never
    edited by hand); returns its path."""
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr[-3000:]
    path = ROOT / "benchmarks" / f"{name}.yaml"
    assert made.stdout == path.read_text(), f"{path} is not what scripts/{script} writes: run it again"
    return path


def capped_benchmark(name: str, steps: int, directory: Path) -> Path:
    """A copy of built-in ``benchmarks/<name>.yaml`` in ``directory`` with every step budget cut
    to ``steps`` (a CI-sized episode; everything else canonical)."""
    import yaml

    data = yaml.safe_load((ROOT / "benchmarks" / f"{name}.yaml").read_text())
    for task in data["tasks"]:
        task["max_steps"] = steps
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_digesting_session(directory: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``python -m pytest ARGS`` in its own process in ``directory``, as a user starts it, its run under
    ``results/`` and its policy (one of the reference modules') writing each episode's digest to
    ``digests/``: started, not waited for (read it with ``communicate``). ``env``: its environment."""
    from episode_digest import DIGEST_DIR

    (directory / "digests").mkdir(parents=True)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(directory)]
    return subprocess.Popen(
        [*command, "--vla-results=results", *args],
        cwd=directory,
        env={**env, DIGEST_DIR: str(directory / "digests")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def assert_failures_equal_reference(directory: Path, records: dict, reference: dict, steps: int) -> None:
    """Each episode of a session in ``directory`` (its digesting policy wrote ``digests/``) is its
    reference episode, by (task, seed): the digest (every view and action), a failure of ``steps``
    steps, the return, the maximum reward, and the MuJoCo GL backend the tests chose."""
    for key, expected in reference.items():
        digest = read_json(directory / "digests" / f"{key[0]}-{key[1]}.json")
        assert digest == {name: expected[name] for name in digest}, key
        record = records[key]
        assert record["outcome"] == "failure" and record["length"] == expected["length"] == steps
        assert record["episode_return"] == expected["episode_return"]
        assert record["extras"] == {"max_reward": expected["max_reward"]}
        assert record["render_backend"].startswith(os.environ.get("MUJOCO_GL", "egl") + ": ")


REVERSED_ORDER = """
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items):
    yield
    items.reverse()  # after the plugin has put them in benchmark order
"""
"""A ``conftest.py`` that runs a session's episodes in reverse benchmark order."""


@contextlib.contextmanager
def ended_on_exit(*procs: subprocess.Popen[str]) -> Iterator[None]:
    """Processes running beside a test (sessions, a reference loop), killed if the test leaves
    before they end."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def digesting_session(directory: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path, dict]:
    """A real pytest session in its own process in ``directory``, its policy (one of the reference
    modules') writing each episode's digest: the process, the run's folder and the digests."""
    from episode_digest import DIGEST_DIR, read_digests

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "digests").mkdir()
    env = {**os.environ, "PYTHONPATH": str(TESTS), DIGEST_DIR: str(directory / "digests")}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-vv", "--rootdir", str(directory)]
    proc = subprocess.run([*command, *args], cwd=directory, env=env, capture_output=True, text=True, timeout=900)
    (run_dir,) = (directory / "results").iterdir()
    return proc, run_dir, read_digests(directory / "digests")


def peak_bytes(call: Callable[[], object]) -> int:
    """The most memory Python allocated while ``call`` ran, beyond what was allocated before."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def together(first: Callable[[], Any], *rest: Callable[[], Any]) -> list[Any]:
    """Independent calls at the same time, their results in order: ``first`` on this thread (it may
    step a simulator in this process), each of ``rest`` on a thread of its own (each waits on a
    process: a session, a script). The suite runs one test at a time; this keeps the second core busy."""
    with ThreadPoolExecutor(len(rest) or 1) as pool:
        futures = [pool.submit(call) for call in rest]
        return [first(), *(future.result() for future in futures)]


@dataclass(frozen=True)
class OneEnvEpisode:
    """An episode of ``libero_episodes_on_one_env``: what the policy saw and did (its digest), the
    loop's result, and what the env did to reach the episode's start."""

    seed: int
    digest: dict
    result: EpisodeResult
    replayed_resets: int
    reseeded: bool


def libero_episodes_on_one_env(
    benchmark: str, env_id: str, steps: int, seeds: Sequence[int]
) -> tuple[list[OneEnvEpisode], Deterministic]:
    """Episodes ``seeds`` of one LIBERO (or LIBERO-PRO) task, in that order, on one env, each capped
    at ``steps`` and driven by ``libero_reference.Deterministic`` (episode index = seed): the
    out-of-order episodes the parity tests compare with the reference. Returns them in the order
    run, and the policy (what it was shown)."""
    spec, _ = resolve_benchmark(benchmark)
    task = replace(spec.task(env_id), max_steps=steps)
    env = libero.make_env(task, spec, "auto")
    policy = Deterministic()
    episodes: list[OneEnvEpisode] = []
    try:
        for seed in seeds:
            result = run_episode(
                env,
                policy,
                task=task.env_id,
                seed=seed,
                episode_index=seed,
                action_dim=spec.env.action_dim,
                policy_obs_keys=spec.env.policy_obs_keys,
            )
            episodes.append(OneEnvEpisode(seed, policy.digest.result(), result, env.replayed_resets, env.reseeded))
    finally:
        env.close()
    return episodes, policy
