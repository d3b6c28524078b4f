"""A benchmark whose workers run in an interpreter of its own (``env.interpreter``), on the fake
benchmark: real sessions from this interpreter, real xdist workers started in the other.

The other interpreter here is a second virtual env over this one's packages (its own prefix, its
own ``pyvenv.cfg``, its ``lib`` linked to this env's): a distinct interpreter as Python and xdist
see it, made in milliseconds. ``tests/envs/test_metaworld.py`` runs the real one, Meta-World's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from helpers import TESTS, assert_one_line_usage_error, episode_records, make_interpreter, read_json, run_dir

from pytest_vlaeval.install.interpreters import INTERPRETER_DIR_ENV

RECORDS_PREFIX = """
import json, os, sys

import numpy as np


class WherePolicy:
    '''Writes the interpreter it runs in (sys.prefix) beside each episode it plays.'''

    chunk_size = 1

    def reset(self, episode):
        with open(f"where-{episode.task}-{episode.seed}.json", "w") as out:
            json.dump({"prefix": sys.prefix, "pid": os.getpid(), "numpy": np.__file__}, out)

    def act(self, obs):
        return np.zeros(7, np.float32)
"""

REFUSES_THE_OTHER = """
import sys

if "other-interpreters" in sys.prefix:
    raise ImportError("this policy needs the caller's CUDA build")


class Policy:
    chunk_size = 1

    def reset(self, episode):
        pass

    def act(self, obs):
        import numpy as np

        return np.zeros(7, np.float32)
"""


@pytest.fixture
def other(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake benchmark, declaring interpreter ``fakesim``, which exists under a folder of its own."""
    root = pytester.path / "other-interpreters"
    make_interpreter(root / "fakesim")
    monkeypatch.setenv(INTERPRETER_DIR_ENV, str(root))
    data = yaml.safe_load((TESTS / "fake.yaml").read_text())
    data["env"]["interpreter"] = "fakesim"
    data["env"]["packages"] = ["numpy"]
    path = pytester.path / "fake.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    pytester.makepyfile(where_policy=RECORDS_PREFIX, refusing_policy=REFUSES_THE_OTHER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(pytester.path)]))
    return root / "fakesim"


def where(pytester: pytest.Pytester) -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in pytester.path.glob("where-*.json")}


@pytest.mark.parametrize("workers", [["-n", "2"], []])
def test_workers_run_in_the_benchmarks_interpreter(pytester: pytest.Pytester, other: Path, workers: list[str]) -> None:
    """With -n 2, both workers; without -n, one worker: every episode runs in the benchmark's
    interpreter, while the controller (this interpreter) writes the run."""
    result = pytester.runpytest_subprocess(
        "--benchmark=fake.yaml:short", "--policy=where_policy:WherePolicy", "-p", "no:cacheprovider", *workers
    )
    assert result.ret == 1, result.stdout.str()  # the zero action fails every episode; none errors
    seen = where(pytester)
    assert len(seen) == 6 and {w["prefix"] for w in seen.values()} == {str(other)}, seen
    # Its own packages, not the controller's (xdist hands local workers the controller's sys.path).
    assert all(w["numpy"].startswith(f"{other}{os.sep}") for w in seen.values()), seen
    assert len({w["pid"] for w in seen.values()}) == (2 if workers else 1)
    records = episode_records(run_dir(pytester))
    assert {r["outcome"] for r in records.values()} == {"failure"}
    assert {r["worker"] for r in records.values()} == ({"gw0", "gw1"} if workers else {"gw0"})
    packages = read_json(run_dir(pytester) / "fingerprint.json")["packages"]
    assert packages["numpy"] is not None  # read from the benchmark's interpreter's own site-packages


def test_a_missing_interpreter_is_one_line_naming_the_install(pytester: pytest.Pytester, other: Path) -> None:
    (other / "bin" / "python").unlink()
    result = pytester.runpytest_subprocess("--benchmark=fake.yaml:short", "--policy=zero", "-p", "no:cacheprovider")
    assert_one_line_usage_error(
        result,
        f"Fake-Bench runs in an interpreter of its own, and there is none at {other}: run `vlaeval install fakesim`",
    )
    assert not (pytester.path / "results").exists()


def test_a_policy_that_cannot_import_there_is_one_line_naming_vla_serve(pytester: pytest.Pytester, other: Path) -> None:
    """Before any episode; and the same policy served from this interpreter runs."""
    result = pytester.runpytest_subprocess(
        "--benchmark=fake.yaml:short", "--policy=refusing_policy:Policy", "-p", "no:cacheprovider"
    )
    assert_one_line_usage_error(
        result,
        "--policy 'refusing_policy:Policy' does not import in Fake-Bench's interpreter "
        f"({other / 'bin' / 'python'}): ImportError: this policy needs the caller's CUDA build; run it in this "
        "environment and serve it to the workers with --vla-serve=refusing_policy:Policy",
    )
    served = pytester.runpytest_subprocess(
        "--benchmark=fake.yaml:short", "--vla-serve=refusing_policy:Policy", "-n", "2", "-p", "no:cacheprovider"
    )
    records = episode_records(run_dir(pytester))
    assert served.ret == 1 and len(records) == 6, served.stdout.str()
    assert {r["outcome"] for r in records.values()} == {"failure"}
