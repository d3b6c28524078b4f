"""The controller's plugin in a real session: each episode's outcome from its record, the records in
the store, the canonical files and the chart, the headline and a line per finished task."""

from __future__ import annotations

import pytest
from helpers import episode_records, read_json, run_dir

SHORT = ["--benchmark=fake.yaml:short"]


def outcomes_by_id(result: pytest.RunResult) -> dict[str, str]:
    """Node id -> PASSED/FAILED/ERROR from a ``-rA`` short summary."""
    found = {}
    for line in result.outlines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            found[rest.split(" ")[0]] = word
    return found


def test_outcomes_records_and_canonical_json(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*SHORT, "-rA")
    outcomes = outcomes_by_id(result)
    assert len(outcomes) == 6 and set(outcomes.values()) <= {"PASSED", "FAILED"}
    directory = run_dir(fake)
    assert directory.name == "fake-short-random"
    records = episode_records(directory)
    for (task, seed), record in records.items():
        assert outcomes[f"fake-short::{task}::{seed}"] == ("PASSED" if record["success"] else "FAILED")
        if not record["success"]:
            assert (
                f"no success in {record['length']} steps, return {record['episode_return']:.3f}" in result.stdout.str()
            )

    alpha = read_json(directory / "Alpha-v0.json")
    reference_keys = {
        "env_id", "split", "memory_type", "start_seed", "n_episodes", "successes", "returns", "sr", "mean_return",
        "benchmark_commit", "control_mode", "obs_mode", "wrapper_chain", "action_chunk_size", "model",
        "episode_lengths", "episode_seeds",
    }  # fmt: skip
    assert reference_keys <= set(alpha)
    assert alpha["episode_seeds"] == [100, 101, 102] and alpha["split"] == "Short"
    assert alpha["successes"] == [records[("Alpha-v0", s)]["success"] for s in (100, 101, 102)]
    assert alpha["sr"] == sum(alpha["successes"]) / 3
    assert alpha["model"] == {"name": "random", "config": {"action_dim": 7, "distribution": "uniform[-1,1]"}}
    assert alpha["action_chunk_size"] == 1

    summary = read_json(directory / "summary.json")
    assert {"split", "sr_split", "sr_per_memory_type", "tasks", "per_task_sr", "per_task_mean_return"} <= set(summary)
    beta = read_json(directory / "Beta-v0.json")
    assert summary["sr_split"] == (alpha["sr"] + beta["sr"]) / 2  # mean of task SRs, not pooled
    assert summary["sr_per_memory_type"] == {"Object": alpha["sr"], "Spatial": beta["sr"]}
    assert summary["split"] == "Short" and summary["partial"] is False and summary["n_completed"] == 6
    assert "vlaeval: Fake-Bench short split, policy random" in result.stdout.str()
    assert (directory / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result.stdout.fnmatch_lines(
        [
            f"vlaeval: Alpha-v0 SR {100 * alpha['sr']:.1f}% (3/3, 0 errors) | 3/6 episodes, 0m0?s, ETA 0m0?s (0m0?s-0m0?s)",
            f"vlaeval: Beta-v0 SR {100 * beta['sr']:.1f}% (3/3, 0 errors) | 6/6 episodes, 0m0?s, done",
        ]
    )


DEEP = """
import numpy as np

class Deep:
    chunk_size = 1

    def __init__(self):
        layers = 1
        for _ in range(70):  # deeper than any file of the run may nest
            layers = [layers]
        self.config = {"layers": layers}

    def reset(self, episode):
        pass

    def act(self, obs):
        return np.zeros(7)
"""


def test_a_record_the_store_cannot_write_is_a_harness_error_and_the_run_goes_on(fake: pytest.Pytester) -> None:
    fake.makepyfile(deep=DEEP)
    result = fake.runpytest(*SHORT, "--policy=deep:Deep", "-rA", "-p", "no:cacheprovider")
    assert "INTERNALERROR" not in result.stdout.str()
    assert set(outcomes_by_id(result).values()) == {"ERROR"} and len(outcomes_by_id(result)) == 6
    result.assert_outcomes(errors=6)
    records = episode_records(run_dir(fake))
    assert len(records) == 6
    for record in records.values():
        assert (record["outcome"], record["error_kind"], record["model"]) == ("error", "harness", None)
        assert record["message"] == "the record of this episode cannot be stored: nested deeper than 64 levels"
    assert read_json(run_dir(fake) / "summary.json")["n_errors"] == 6
