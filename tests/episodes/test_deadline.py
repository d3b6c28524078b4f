"""The per-episode deadline (``--vla-timeout``): a policy that never returns, swallows the
timeout or blocks its signal ends as a timeout error, serially and under ``-n 2``."""

from __future__ import annotations

import pytest
from helpers import episode_records, run_dir

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


HANGS = """
import signal
import time
import numpy as np

def never_returns():
    time.sleep(3600)

class Swallows:
    chunk_size = 1
    def reset(self, episode):
        pass
    def act(self, obs):
        try:
            time.sleep(3)
        except BaseException:
            pass  # swallows the timeout and goes on as if nothing happened
        return np.zeros(7)

class Deaf(Swallows):
    def act(self, obs):
        # Like native code: no Python signal handler runs until it returns.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        return np.zeros(7)
"""


@pytest.mark.parametrize(
    ("policy", "workers"), [("never_returns", []), ("never_returns", ["-n", "2"]), ("Swallows", [])]
)
def test_hangs_in_a_policy_end_as_timeout_errors(fake: pytest.Pytester, policy: str, workers: list[str]) -> None:
    fake.makepyfile(hangs=HANGS)
    result = fake.runpytest_subprocess(
        *SHORT,
        f"--policy=hangs:{policy}",
        "--vla-tasks=Alpha-v0",
        "--episodes=2",
        "--vla-timeout=1",
        *workers,
        timeout=90,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    records = episode_records(run_dir(fake))
    assert len(records) == 2 and {r["outcome"] for r in records.values()} == {"error"}
    assert all("--vla-timeout" in r["message"] and r["error_kind"] == "timeout" for r in records.values()), records


def test_a_serial_run_says_when_the_timeout_cannot_interrupt(fake: pytest.Pytester) -> None:
    fake.makepyfile(hangs=HANGS)
    result = fake.runpytest_subprocess(
        *SHORT, "--policy=hangs:Deaf", "--vla-tasks=Alpha-v0", "--episodes=1", "--vla-timeout=1", timeout=90
    )
    result.stderr.fnmatch_lines(["*Alpha-v0 seed 100 is stuck past 2s where --vla-timeout cannot interrupt it*"])
    (record,) = episode_records(run_dir(fake)).values()
    assert record["error_kind"] == "timeout"
