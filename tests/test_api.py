"""``pytest_vlaeval.evaluate``: evaluation from Python, shaped like a training loop."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from helpers import episode_records

import pytest_vlaeval
from pytest_vlaeval.api import EvaluationError, Summary
from pytest_vlaeval.results.rundir import RunDir


class Trainee:
    """A 'model being trained': its first action component is a weight the loop changes.
    It answers a batch of episodes at once, as a model on a GPU would."""

    chunk_size = 1

    def __init__(self) -> None:
        self.weight = 0.0
        self.rows = 0

    def reset(self, episode) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        return np.full(7, self.weight, dtype=np.float32)

    def act_batch(self, episodes: list, observations: list[dict]) -> np.ndarray:
        self.rows += len(episodes)
        return np.full((len(episodes), 1, 7), self.weight, dtype=np.float32)


class Stateful(Trainee):
    act_batch = None  # one episode's memory: served one episode at a time


class Mending(Stateful):
    """Fails Beta's episodes until the loop mends it; says nothing of itself beyond its class."""

    broken = True

    def act(self, obs: dict) -> np.ndarray:
        if self.broken and obs["instruction"] == "push beta":
            raise RuntimeError("head not trained yet")
        return super().act(obs)


def test_a_training_loop_evaluates_its_model_object_after_each_epoch(fake: pytest.Pytester) -> None:
    threads_before = set(threading.enumerate())
    model = Trainee()
    summaries: list[Summary] = []
    for epoch, weight in enumerate([0.0, 1.0]):  # the fake env succeeds when action[0] beats 0.5-0.9
        model.weight = weight  # "training"
        summaries.append(
            pytest_vlaeval.evaluate(
                model, benchmark="fake.yaml:short", episodes=2, workers=2, results="evals", run_name=f"epoch{epoch}"
            )
        )
    untrained, trained = summaries
    assert (untrained.sr_split, trained.sr_split) == (0.0, 1.0)
    assert (untrained.exit_code, trained.exit_code) == (1, 0)
    assert trained.per_task_sr == {"Alpha-v0": 1.0, "Beta-v0": 1.0}
    assert (trained.n_expected, trained.n_completed, trained.n_errors, trained.partial) == (4, 4, 0, False)
    assert model.rows == sum(r["length"] for s in summaries for r in episode_records(s.run_dir).values())
    for epoch, summary in enumerate(summaries):
        assert summary.run_dir == fake.path / "evals" / f"epoch{epoch}"
        assert summary.raw == json.loads((summary.run_dir / "summary.json").read_text())
        records = episode_records(summary.run_dir)
        assert {r["worker"] for r in records.values()} == {"gw0", "gw1"}
        assert {r["model"]["name"] for r in records.values()} == {"test_api:Trainee"}
    # Threads of earlier tests may end meanwhile: what matters is that evaluate() left none of its own.
    assert set(threading.enumerate()) <= threads_before, "evaluate() left a thread running"


def test_a_policy_object_without_act_batch_runs_on_one_worker(fake: pytest.Pytester) -> None:
    with pytest.warns(UserWarning, match="test_api:Stateful holds one episode's memory .* on one worker, not 2"):
        summary = pytest_vlaeval.evaluate(Stateful(), "fake.yaml:short", episodes=2, workers=2, results="evals")
    assert summary.n_completed == 4
    assert {r["worker"] for r in episode_records(summary.run_dir).values()} == {"main"}


def test_a_policy_object_run_resumes_and_reruns_under_its_own_identity(fake: pytest.Pytester) -> None:
    model = Mending()
    model.weight = 1.0
    run = {"benchmark": "fake.yaml:short", "episodes": 2, "results": "evals", "run_name": "mending"}
    half = pytest_vlaeval.evaluate(model, shard="1/2", **run)
    assert half.partial and half.n_completed + half.n_errors == 2
    whole = pytest_vlaeval.evaluate(model, resume=True, **run)  # served on another port than the first session
    assert (whole.n_missing, whole.n_completed, whole.n_errors) == (0, 2, 2)
    model.broken = False
    mended = pytest_vlaeval.evaluate(model, rerun="errors", **run)
    assert (mended.n_completed, mended.n_errors, mended.sr_split) == (4, 0, 1.0)
    assert json.loads(RunDir(mended.run_dir).fingerprint.read_text())["policy"] == "test_api:Mending"


def test_a_spec_string_and_a_served_class_give_the_same_results(fake: pytest.Pytester) -> None:
    from spy_policies import EpisodeMemory

    by_spec = pytest_vlaeval.evaluate("spy_policies:EpisodeMemory", "fake.yaml:short", results="evals")
    served = pytest_vlaeval.evaluate(EpisodeMemory, "fake.yaml:short", workers=2, results="evals", start_seed=100)
    assert by_spec.run_dir != served.run_dir and by_spec.run_dir.parent == fake.path / "evals"

    def comparable(summary: Summary) -> dict:
        return {
            k: (r["outcome"], r["episode_return"], r["length"]) for k, r in episode_records(summary.run_dir).items()
        }

    assert comparable(served) == comparable(by_spec)
    assert served.per_task_sr == by_spec.per_task_sr and 0 < by_spec.sr_split < 1


def test_bad_input_raises_the_sessions_own_one_line_error(fake: pytest.Pytester) -> None:
    cli = fake.runpytest_subprocess("--benchmark=fake.yaml:short", "--vla-tasks=Nope-v0", "-p", "no:cacheprovider")
    (line,) = [line.removeprefix("ERROR: ") for line in cli.errlines if line.startswith("ERROR: ")]
    with pytest.raises(EvaluationError) as caught:
        pytest_vlaeval.evaluate("zero", "fake.yaml:short", tasks=["Nope-v0"])
    assert str(caught.value) == line
    with pytest.raises(EvaluationError, match=r"no-such\.yaml"):
        pytest_vlaeval.evaluate(Trainee(), "no-such.yaml")
    with pytest.raises(
        EvaluationError, match=r"cannot serve the policy object: policy\.factory raised ZeroDivisionError"
    ):
        pytest_vlaeval.evaluate(lambda: 1 / 0, "fake.yaml:short")
    with pytest.raises(EvaluationError, match=r"argument --vla-retries: must be in \[0, inf\), got -1"):
        pytest_vlaeval.evaluate("zero", "fake.yaml:short", retries=-1)
    assert not (fake.path / "results").exists() or not any((fake.path / "results").iterdir())


def test_resuming_a_complete_run_returns_its_summary(fake: pytest.Pytester) -> None:
    first = pytest_vlaeval.evaluate("zero", "fake.yaml:short", episodes=2, results="evals", run_name="done")
    resumed = pytest_vlaeval.evaluate(
        "zero", "fake.yaml:short", episodes=2, results="evals", run_name="done", resume=True
    )
    assert (resumed.n_completed, resumed.partial, resumed.exit_code) == (4, False, first.exit_code)
    assert resumed.per_task_sr == first.per_task_sr and first.exit_code == 1  # zero actions never succeed
