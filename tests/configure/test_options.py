"""The options read once into a ``RunContext`` (``configure/options.py``): bad input stops the
session in one line before anything runs, the run directory's name included."""

from __future__ import annotations

import pytest
from helpers import CONFIGURED, assert_one_line_usage_error, run_dir, usage_error

SHORT = ["--benchmark=fake.yaml:short", "-p", "no:cacheprovider"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--benchmark=shortt"], "unknown benchmark 'shortt'; valid: short, medium, long, all, "),
        (
            ["--benchmark=fake.yaml:medium"],
            "unknown split 'medium' for benchmark 'fake'; valid: short, long, extra, crash, flaky, all",
        ),
        (
            ["--benchmark=fake.yaml:short", "--vla-tasks=Alpha-v0,Gama-v0"],
            "unknown task 'Gama-v0' in split 'short' of 'fake'; valid: Alpha-v0, Beta-v0",
        ),
        (["--benchmark=nope.yaml"], "benchmark file 'nope.yaml' not found"),
        (
            ["--benchmark=fake.yaml", "--policy=no_such_module:make"],
            "--policy 'no_such_module:make': module 'no_such_module' is not importable",
        ),
        (["--benchmark=fake.yaml", "--policy=randm"], "--policy 'randm': expected module:attr or one of random, zero"),
        (["--benchmark=fake.yaml", "--episodes=0"], "--episodes must be at least 1, got 0"),
    ],
)
def test_bad_input_is_one_clear_line(fake: pytest.Pytester, args: list[str], expected: str) -> None:
    result = fake.runpytest(*args)
    assert_one_line_usage_error(result, expected)


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--vla-timeout=-5", "argument --vla-timeout: must be in (0, inf), got -5"),
        ("--vla-timeout=0", "argument --vla-timeout: must be in (0, inf), got 0"),
        ("--vla-timeout=nan", "argument --vla-timeout: must be in (0, inf), got nan"),
        ("--vla-timeout=inf", "argument --vla-timeout: must be in (0, inf), got inf"),
        ("--vla-retries=-1", "argument --vla-retries: must be in [0, inf), got -1"),
        ("--vla-max-drop=1.5", "argument --vla-max-drop: must be in [0, 1], got 1.5"),
        ("--vla-gate-alpha=1", "argument --vla-gate-alpha: must be in (0, 1), got 1"),
        ("--vla-gate-alpha=0", "argument --vla-gate-alpha: must be in (0, 1), got 0"),
        ("--episodes=0", "--episodes must be at least 1, got 0"),
        ("--vla-start-seed=-1", "argument --vla-start-seed: must be in [0, inf), got -1"),
        ("--vla-shard=3/2", "--vla-shard '3/2': expected I/N with 1 <= I <= N"),
    ],
)
def test_numeric_options_out_of_range_stop_in_one_line_before_anything_runs(
    fake: pytest.Pytester, option: str, expected: str
) -> None:
    result = fake.runpytest(*SHORT, option)
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--policy=", "argument --policy: is empty: name a policy, e.g. --policy=random"),
        ("--policy= ", "argument --policy: is empty: name a policy, e.g. --policy=random"),
        (
            "--vla-serve=",
            "argument --vla-serve: is empty: name the policy to serve, e.g. --vla-serve=my_pkg.policies:make_policy",
        ),
    ],
)
def test_an_empty_policy_is_refused_as_parsed_not_read_as_the_default(
    fake: pytest.Pytester, option: str, expected: str
) -> None:
    """``--policy=`` (a variable that expanded to nothing) once ran the default ``random`` policy."""
    result = fake.runpytest(*SHORT, option)
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()


def test_a_policy_attribute_typo_stops_before_any_worker_starts(fake: pytest.Pytester) -> None:
    fake.makepyfile(policies=CONFIGURED)
    result = fake.runpytest(*SHORT, "--policy=policies:Configurd", "-n", "2")
    assert_one_line_usage_error(result, "module 'policies' (")
    assert "defines no 'Configurd'" in usage_error(result)
    assert not (fake.path / "results").exists()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "a" * 300,
            "--vla-run-name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... is 300 bytes long, and a directory's name",
        ),
        ("é" * 128, "is 256 bytes long, and a directory's name takes at most 255: choose a shorter one"),
        ("red\x1b[31m", "--vla-run-name 'red\\x1b[31m' holds '\\x1b', which a terminal acts on instead of showing"),
        ("rtl\u202eevil", "holds '\\u202e', which a terminal acts on"),
        ("two\nlines", "holds '\\n', which a terminal acts on"),
        ("a/b", "--vla-run-name 'a/b': expected a directory name, not a path"),
    ],
)
def test_a_run_name_no_folder_or_terminal_takes_as_given_is_one_line(
    fake: pytest.Pytester, name: str, expected: str
) -> None:
    """300 characters were an INTERNALERROR (the file system's "File name too long"), and an ESC
    in the name reached the terminal in the ``results:`` line."""
    result = fake.runpytest(*SHORT, f"--vla-run-name={name}")
    assert_one_line_usage_error(result, expected)
    assert not (fake.path / "results").exists()


def test_a_run_name_of_the_longest_a_folder_takes_runs(fake: pytest.Pytester) -> None:
    """Nothing is named after the run beside its folder, so the whole of a folder's name is the run's."""
    name = "é" * 127 + "a"  # 255 bytes
    result = fake.runpytest(*SHORT, f"--vla-run-name={name}", "--episodes=1")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    assert run_dir(fake).name == name and (run_dir(fake) / "summary.json").is_file()


def test_a_derived_run_name_too_long_for_a_folder_is_shortened_the_same_way_each_time(fake: pytest.Pytester) -> None:
    """A long module path made the run directory's name (benchmark-split-policy) past what a folder
    takes: an INTERNALERROR. It keeps its start and ends in a digest of the whole, so the next
    session with the same arguments finds the run."""
    module = "policies_" + "m" * 230
    fake.makepyfile(**{module: CONFIGURED})
    args = [*SHORT, f"--policy={module}:Configured", "--episodes=1"]
    first = fake.runpytest(*args)
    assert first.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), first.stdout.str()
    name = run_dir(fake).name
    assert len(name.encode()) == 255 and name.startswith("fake-short-policies_mmm"), name
    again = fake.runpytest(*args, "--vla-resume")
    assert again.ret == pytest.ExitCode.NO_TESTS_COLLECTED, again.stdout.str()
    assert run_dir(fake).name == name
