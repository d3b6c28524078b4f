"""``pytest_vlaeval.evaluate(...)``: an evaluation from Python, e.g. inside a training loop.

Each call runs one real pytest session in a child process (so no state of the session, its
xdist workers or the simulator stays behind in the caller) over the same machinery as the
command line: workers, the run store and the canonical files. It returns the run's
``summary.json`` as a ``Summary``.

A policy given as a spec string (``module:attr``, a built-in, a server address) is passed on as
``--policy``. A policy given as a Python object (the model being trained) lives only in the
calling process, so it is served from there: a policy server on a thread of the caller, on a
free loopback port with a fresh token, which the child's workers reach as ``ws://``. A class or
zero-argument factory gets an instance per concurrent episode; an object with ``act_batch`` is
batched across episodes; any other object holds one episode's memory, so its episodes run one
at a time, on one worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pytest_vlaeval import schema
from pytest_vlaeval.policy.loading import LocalPolicy
from pytest_vlaeval.report.axes import group_rates, summary_axes
from pytest_vlaeval.results.rundir import RunDir

SERVED_EPISODE_WAIT_S = 24 * 3600.0
"""How long an episode may wait for a policy object that serves one episode at a time."""

NOTHING_SELECTED = 5
"""pytest's exit status when no test ran: a resume or rerun of a run that has nothing left to run."""


class EvaluationError(Exception):
    """The evaluation could not run; the message is the session's own one-line error."""


@dataclass(frozen=True)
class Summary:
    """The run's ``summary.json``, with its headline fields typed (the whole file in ``raw``)."""

    run_dir: Path
    sr_split: float | None
    sr_split_ci95: list[float] | None
    per_task_sr: dict[str, float]
    sr_per_axis: dict[str, dict[str, float]]
    """The group SRs along each of the benchmark's axes, by the axis's task field
    (``sr_per_axis["memory_type"]["Object"]``)."""
    n_expected: int
    n_completed: int
    n_errors: int
    n_missing: int
    errored_episodes: list[schema.ErroredEpisode]
    partial: bool
    exit_code: int
    """pytest's: 0 when every episode succeeded (and a gate, if asked for, passed), else 1."""
    raw: schema.RunSummary = field(repr=False)

    @classmethod
    def from_run(cls, run_dir: Path, exit_code: int) -> Summary:
        body: schema.RunSummary = json.loads(RunDir(run_dir).summary.read_text(encoding="utf-8"))
        return cls(
            run_dir=run_dir,
            sr_split=body["sr_split"],
            sr_split_ci95=body["sr_split_ci95"],
            per_task_sr=body["per_task_sr"],
            sr_per_axis={axis.field: {g: sr for g, sr, _ in group_rates(axis, body)} for axis in summary_axes(body)},
            n_expected=body["n_expected"],
            n_completed=body["n_completed"],
            n_errors=body["n_errors"],
            n_missing=body["n_missing"],
            errored_episodes=body["errored_episodes"],
            partial=body["partial"],
            exit_code=exit_code,
            raw=body,
        )

    @classmethod
    def of_complete_run(cls, run_dir: Path) -> Summary:
        """A run a resume found complete: its status is the one its own sessions would give,
        0 when every expected episode was completed and succeeded, else 1."""
        summary = cls.from_run(run_dir, 0)
        whole = summary.n_missing == 0 and summary.n_errors == 0 and summary.sr_split == 1.0
        return dataclasses.replace(summary, exit_code=0 if whole else 1)


def evaluate(
    policy: Any,
    benchmark: str = "short",
    tasks: list[str] | None = None,
    episodes: int | None = None,
    workers: int | None = None,
    results: str | os.PathLike[str] = "results",
    run_name: str | None = None,
    **options: Any,
) -> Summary:
    """Evaluate ``policy`` (a spec string or a policy object, class or factory) on ``benchmark``.

    ``options`` are the command line's ``--vla-*`` options by name (``start_seed=0``,
    ``timeout=600``, ``retries=1``, ``render="cpu"``...). ``run_name`` names the run directory
    under ``results`` (default: the policy's name and the time, so each call is a fresh run).
    Raises ``EvaluationError`` when the session cannot run (bad input, broken machine), and
    ``KeyboardInterrupt`` on Ctrl-C once the session has stored what it finished (complete the
    run with the same ``run_name`` and ``resume=True``). For a policy you do not trust, give
    ``workers=1`` or more: without workers it runs in the session's own process, where one that
    calls ``os._exit`` ends the session with no summary.
    """
    if workers and workers > 1 and _one_episode_at_a_time(policy):
        warnings.warn(
            f"{_label(policy)} holds one episode's memory (it has no act_batch), so its episodes run one at a time "
            f"on one worker, not {workers}; pass its class or a factory, or give it act_batch, to run them in parallel",
            stacklevel=2,
        )
        workers = None
    args = ["--benchmark", benchmark, "--vla-live", "off"]
    if tasks:
        args += ["--vla-tasks", ",".join(tasks)]
    if episodes is not None:
        args += ["--episodes", str(episodes)]
    if workers:
        args += ["-n", str(workers)]
    for name, value in options.items():
        flag = "--vla-" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value not in (None, False):
            args += [flag, str(value)]
    results_root = Path(results).resolve()
    name = run_name or f"{_label(policy).replace(':', '.')}-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"
    args += ["--vla-results", str(results_root), "--vla-run-name", name]
    # The session is a fresh pytest run: it must not think it is a worker of a caller's own xdist run.
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    with _served(policy, benchmark, env) as spec:
        exit_code, output = _run_session([*args, "--policy", spec], env)
    run_dir = results_root / name
    summary_written = RunDir(run_dir).summary.is_file()
    if exit_code == NOTHING_SELECTED and summary_written and (options.get("resume") or options.get("rerun")):
        return Summary.of_complete_run(run_dir)
    if exit_code not in (0, 1) or not summary_written:
        raise EvaluationError(_one_line(output, exit_code))
    return Summary.from_run(run_dir, exit_code)


@contextlib.contextmanager
def _served(policy: Any, benchmark: str, env: dict[str, str]) -> Any:
    """The ``--policy`` spec for ``policy``: itself for a string, else the address it is served at."""
    if isinstance(policy, str):
        yield policy
        return
    from pytest_vlaeval.benchmark.model import resolve_benchmark
    from pytest_vlaeval.errors import SpecError
    from pytest_vlaeval.serving.server.policy_server import ServerConfig
    from pytest_vlaeval.serving.server.thread import ServerThread
    from pytest_vlaeval.serving.url import TOKEN_ENV

    try:
        action_dim = resolve_benchmark(benchmark)[0].env.action_dim
    except SpecError as exc:
        raise EvaluationError(str(exc)) from None
    one_at_a_time = _one_episode_at_a_time(policy)
    env[TOKEN_ENV] = secrets.token_urlsafe(24)
    config = ServerConfig(
        host="127.0.0.1",
        port=0,
        action_dim=action_dim,
        token=env[TOKEN_ENV],
        max_episodes=1 if one_at_a_time else ServerConfig.max_episodes,
        admission_timeout_s=SERVED_EPISODE_WAIT_S if one_at_a_time else ServerConfig.admission_timeout_s,
    )
    reference = _reference(policy)
    server = ServerThread(reference, config, policy if _is_factory(policy) else lambda: policy)
    try:
        url = server.__enter__()
    except Exception as exc:
        raise EvaluationError(f"cannot serve the policy object: {exc}") from exc
    try:
        assert server.server.engine is not None  # loaded by __enter__
        yield f"{url}?{urlencode({'identity': _identity(reference.text, server.server.engine.model)})}"
    finally:
        server.__exit__(None, None, None)


def _identity(label: str, model: dict[str, Any]) -> str:
    """The run's policy: its class (or factory) and what it says of itself, never the port it is served on,
    so a later call with the same ``run_name`` resumes or reruns the same run."""
    if model == {"name": label, "config": {}}:
        return label
    return f"{label} {json.dumps(model, sort_keys=True, separators=(',', ':'))}"


def _is_factory(policy: Any) -> bool:
    """A class or zero-argument factory (the server makes an instance per episode), not a policy object."""
    return isinstance(policy, type) or (callable(policy) and not hasattr(policy, "act"))


def _one_episode_at_a_time(policy: Any) -> bool:
    return not isinstance(policy, str) and not _is_factory(policy) and not callable(getattr(policy, "act_batch", None))


def _label(policy: Any) -> str:
    return policy if isinstance(policy, str) else _reference(policy).text


def _reference(policy: Any) -> LocalPolicy:
    """Where a policy object's class (or its factory) lives: how the run and its records name it."""
    named = policy if _is_factory(policy) else type(policy)
    return LocalPolicy(named.__module__, named.__qualname__)


def _run_session(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the session to its end; on Ctrl-C, pass one SIGINT on to it and wait until it has
    stored its interrupted summary, then raise ``KeyboardInterrupt``.

    The session runs in a process group of its own, so a terminal's Ctrl-C reaches it once, from
    here, whether it was typed or sent to this process alone; a second Ctrl-C is passed on too,
    as the command line would get it."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    with tempfile.TemporaryFile() as output:
        child = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        interrupted = False
        while True:
            try:
                child.wait()
                break
            except KeyboardInterrupt:
                interrupted = True
                child.send_signal(signal.SIGINT)
        if interrupted:
            raise KeyboardInterrupt
        output.seek(0)
        return child.returncode, output.read().decode(errors="replace")


def _one_line(output: str, exit_code: int) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    refused = [line.partition(": error: ")[2] for line in lines if ": error: " in line]
    if errors and errors[0].startswith("usage: ") and refused:  # pytest's parser refused an option's value
        return refused[0]
    if errors:
        return errors[0]
    return f"the evaluation session ended with exit code {exit_code}: {lines[-1] if lines else 'no output'}"
