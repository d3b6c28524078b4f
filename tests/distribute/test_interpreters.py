"""A benchmark whose workers run in an interpreter of its own (``install.own_interpreter``), on the fake
benchmark: real sessions from this interpreter, real xdist workers started in the other.

The other interpreter here is a second virtual env over this one's packages (its own prefix, its
own ``pyvenv.cfg``, its ``lib`` linked to this env's): a distinct interpreter as Python and xdist
see it, made in milliseconds. ``tests/envs/test_metaworld.py`` runs the real one, Meta-World's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from helpers import (
    TESTS,
    assert_one_line_usage_error,
    episode_records,
    make_interpreter,
    make_interpreter_with_own_copy,
    package_copy,
    read_json,
    run_dir,
)

from pytest_vlaeval.install.interpreters import INTERPRETER_DIR_ENV
from pytest_vlaeval.version import __version__, package_digest

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
def fake_yaml(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake benchmark, declaring interpreter ``fakesim``, looked for under a folder of its own:
    the interpreter's folder, which the test makes."""
    root = pytester.path / "other-interpreters"
    monkeypatch.setenv(INTERPRETER_DIR_ENV, str(root))
    data = yaml.safe_load((TESTS / "fake.yaml").read_text())
    data["install"] = {"stack": "fakesim", "own_interpreter": True, "record": ["numpy"]}
    path = pytester.path / "fake.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    pytester.makepyfile(where_policy=RECORDS_PREFIX, refusing_policy=REFUSES_THE_OTHER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(pytester.path)]))
    return root / "fakesim"


@pytest.fixture
def other(fake_yaml: Path) -> Path:
    """``fakesim``: a second virtual env over this one's packages."""
    make_interpreter(fake_yaml)
    return fake_yaml


@pytest.fixture
def quoted(fake_yaml: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``fakesim``'s folder, under a root whose name a shell must have quoted (not made)."""
    root = pytester.path / "user's interpreters"
    monkeypatch.setenv(INTERPRETER_DIR_ENV, str(root))
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
    fingerprint = read_json(run_dir(pytester) / "fingerprint.json")
    assert fingerprint["packages"]["numpy"] is not None  # read from the benchmark's interpreter's own site-packages
    assert fingerprint["packages"]["pytest-vlaeval"] == __version__
    assert fingerprint["package_digest"] == package_digest()  # the code that ran, in both interpreters


def test_a_missing_interpreter_of_the_users_is_one_line_saying_how_to_make_it(
    pytester: pytest.Pytester, quoted: Path
) -> None:
    """``vlaeval install`` makes only the built-in benchmarks' interpreters: it is not advised for
    ``fakesim``."""
    result = pytester.runpytest_subprocess("--benchmark=fake.yaml:short", "--policy=zero", "-p", "no:cacheprovider")
    venv = shlex.join([sys.executable, "-m", "venv", str(quoted)])
    assert_one_line_usage_error(
        result,
        f"Fake-Bench runs in an interpreter of its own, and there is none at {quoted}: make a virtual env "
        f"there (`{venv}`) holding pytest, pytest-xdist and pytest-vlaeval at this session's versions",
    )
    assert "vlaeval install" not in result.stderr.str()
    assert not (pytester.path / "results").exists()


@pytest.mark.parametrize("copy", ["edited", "older"])
def test_an_interpreter_holding_another_copy_of_this_package_is_refused_before_any_episode(
    pytester: pytest.Pytester, quoted: Path, copy: str
) -> None:
    """Its workers would run that copy's code: an older release's (its version), or this version's
    with one file changed (the digest of its files); one line with the command that puts this
    copy there, quoted for the shell."""
    python = make_interpreter_with_own_copy(quoted)
    package = package_copy(quoted)
    if copy == "edited":
        with (package / "results" / "record.py").open("a") as module:
            module.write("# changed\n")
        held = f"pytest-vlaeval {__version__} with other files (digest "
    else:
        (package / "version.py").write_text('__version__ = "0.1.0"\n')
        held = f"pytest-vlaeval 0.1.0, not this session's {__version__}"
    result = pytester.runpytest_subprocess("--benchmark=fake.yaml:short", "--policy=zero", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, f"Fake-Bench's interpreter ({python}) holds {held}")
    line = result.stderr.str()
    assert "so its workers would run other code than this session: " in line
    pip = f"`{shlex.quote(str(python))} -m pip install --disable-pip-version-check --no-deps --force-reinstall "
    assert pip in line
    assert not (pytester.path / "results").exists()


def test_a_plugin_missing_from_the_users_interpreter_is_one_line_with_the_pip_command(
    pytester: pytest.Pytester, quoted: Path
) -> None:
    """Not ``vlaeval install fakesim``, which refuses that name: pip in that interpreter, quoted."""
    python = make_interpreter_with_own_copy(quoted, leave_out=("pytest_timeout",))
    pin = f"pytest-timeout=={importlib.metadata.version('pytest-timeout')}"
    result = pytester.runpytest_subprocess("--benchmark=fake.yaml:short", "--policy=zero", "-p", "no:cacheprovider")
    assert_one_line_usage_error(
        result,
        f"this session's pytest plugins {pin} are not in Fake-Bench's interpreter ({python}), where its workers "
        f"run: `{shlex.quote(str(python))} -m pip install --disable-pip-version-check {pin}` installs them, "
        "or leave them out with -p no:NAME",
    )


def test_an_interpreter_that_is_not_python_is_one_line(pytester: pytest.Pytester, other: Path) -> None:
    (other / "bin" / "python").unlink()
    (other / "bin" / "python").symlink_to("/bin/sh")
    result = pytester.runpytest_subprocess("--benchmark=fake.yaml:short", "--policy=zero", "-p", "no:cacheprovider")
    assert_one_line_usage_error(
        result, f"{other / 'bin' / 'python'} did not say which pytest-vlaeval it holds (is it a Python interpreter?): "
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


@pytest.mark.parametrize("policy", ["zero", "where_policy:WherePolicy"])
def test_the_session_starts_the_benchmarks_interpreter_once_before_its_worker(
    pytester: pytest.Pytester, other: Path, policy: str
) -> None:
    """Its package check, its ``sys.path`` (the workers' path) and whether a ``module:attr`` policy
    imports there come from one start: every start costs an interpreter's imports, Meta-World's
    seconds. Its python here logs each start."""
    python = other / "bin" / "python"
    real = python.resolve()
    starts = pytester.path / "starts.txt"
    python.unlink()
    python.write_text(
        f'#!/bin/bash\necho "$1" >> {shlex.quote(str(starts))}\nexec -a "$0" {shlex.quote(str(real))} "$@"\n'
    )
    python.chmod(0o755)
    result = pytester.runpytest_subprocess(
        "--benchmark=fake.yaml:short", f"--policy={policy}", "-p", "no:cacheprovider"
    )
    assert result.ret == 1, result.stdout.str()  # the zero action fails every episode; none errors
    assert starts.read_text().split() == ["-c", "-u"]  # the check, then the one worker (xdist's -u)
    assert {r["outcome"] for r in episode_records(run_dir(pytester)).values()} == {"failure"}
