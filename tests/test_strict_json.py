"""The JSON every file of a run is read and written as: numbers that are finite however they are
spelled, nesting that no reader recurses into past its stack. What is not is one line naming the
file (merge, compare, a session, ``--vla-resume``, an episode list, a baseline), never a traceback;
and no writer writes what the readers refuse."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_one_line_usage_error, run_dir
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_vlaeval.benchmark.model import load_benchmark, select
from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.merge import selection_of
from pytest_vlaeval.report.comparison import ComparisonError, load_run
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.record import EpisodeRecord, parse_record, record_line
from pytest_vlaeval.results.rundir import RunDir
from pytest_vlaeval.results.store import RunStore, write_json_atomic
from pytest_vlaeval.results.subset import read_episode_list
from pytest_vlaeval.strict_json import MAX_DEPTH, dumps, loads

SHORT = ["--benchmark=fake.yaml:short", "--episodes=2", "-p", "no:cacheprovider"]
DEEP = "[" * 100_000
"""Nesting past any recursion limit: Python's parser raised RecursionError on it."""

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)
PROPERTY = settings(max_examples=60, deadline=None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1e999]", "the number 1e999 is beyond the range of a float"),
        ('{"r": -1e999}', "the number -1e999 is beyond the range of a float"),
        ("[NaN]", "NaN is not JSON"),
        ("-Infinity", "-Infinity is not JSON"),
        (DEEP, f"nested deeper than {MAX_DEPTH} levels"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        ('{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        ("1" * 5000, "Exceeds the limit (4300 digits)"),
    ],
)
def test_what_no_reader_takes_is_a_value_error_saying_why(text: str, expected: str) -> None:
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        loads(text)


def test_nesting_up_to_the_bound_and_brackets_in_text_are_read() -> None:
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert loads(json.dumps({"config": "[" * 1000, "values": [[1.5e308]] * 100})) == {
        "config": "[" * 1000,
        "values": [[1.5e308]] * 100,
    }


@pytest.mark.parametrize(
    "payload", [float("inf"), {"x": [float("nan")]}, -float("inf"), 10**5000], ids=["inf", "nan", "-inf", "5001 digits"]
)
def test_dumps_refuses_what_loads_would(payload: Any) -> None:
    with pytest.raises(ValueError):
        dumps(payload)


def test_dumps_refuses_nesting_past_the_bound() -> None:
    nested: list[Any] = []
    for _ in range(MAX_DEPTH):
        nested = [nested]
    with pytest.raises(ValueError, match=f"nested deeper than {MAX_DEPTH} levels"):
        dumps(nested)


@PROPERTY
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@example(DEEP.encode())
@example(b'{"r": 1e999}')
def test_any_bytes_are_a_value_or_a_value_error(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        loads(data)


@PROPERTY
@given(JSON_VALUES)
def test_any_finite_value_round_trips(value: Any) -> None:
    assert loads(dumps(value)) == value


# ----- records: the writer checks each line with the readers' own parse


def _record(**fields: Any) -> EpisodeRecord:
    base = dict(
        task="Alpha-v0", seed=100, outcome="failure", success=False, episode_return=0.5, length=3, message="m",
        wall_time=1.0, worker="main", time="2026-01-01T00:00:00+00:00", extras={"bar": 0.5},
    )  # fmt: skip
    return EpisodeRecord(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"episode_return": float("inf")}, "Out of range float values are not JSON compliant"),
        ({"extras": {"bar": 10**400}}, "extras['bar'] is an int of about 10**400"),
        ({"extras": {"bar": 7 * 10**4999}}, "Exceeds the limit"),
        ({"model": {"name": "p", "config": {"t": float("nan")}}}, "Out of range float values are not JSON compliant"),
    ],
    ids=["inf return", "400-digit extra", "5000-digit extra", "nan in the policy's config"],
)
def test_a_record_the_readers_would_refuse_is_never_written(fields: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected.replace("[", r"\[").replace("*", r"\*")):
        record_line(_record(**fields))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"episode_return": float("inf")}, "episode_return is inf; expected a finite number"),
        ({"wall_time": float("nan")}, "wall_time is nan; expected a finite number"),
        ({"extras": {"bar": 10**400}}, "extras['bar'] is an int of about 10**400"),
        ({"extras": {"bar": -float("inf")}}, "extras['bar'] is -inf; expected a finite number"),
    ],
)
def test_a_record_from_a_worker_is_checked_for_numbers_no_summary_can_use(
    fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValueError) as refused:
        EpisodeRecord.from_dict(_record(**fields).to_dict())
    assert expected in str(refused.value)


def test_a_log_line_is_read_back_as_written() -> None:
    record = _record(extras={"bar": 1e308, "n": 2**80}, episode_return=-1.7e308)
    assert parse_record(record_line(record)) == record


RECORD_FIELDS = tuple(_record().to_dict())
EXTREME = st.sampled_from([10**400, -(10**308), 1.7e308, 5e-324, "", "x" * 600]) | JSON_VALUES


CRAFTED_LINES = st.builds(
    lambda field, value: json.dumps({**_record().to_dict(), field: value}).encode(),
    st.sampled_from(RECORD_FIELDS),
    EXTREME,
)
"""A record with one field replaced by any JSON value, extreme numbers included."""


@PROPERTY
@given(line=st.binary(max_size=300) | CRAFTED_LINES)
@example(DEEP.encode())
@example(json.dumps({**_record().to_dict(), "episode_return": "@"}).replace('"@"', "1e999").encode())
@example(json.dumps({**_record().to_dict(), "extras": {"bar": 10**400}}).encode())
def test_any_bytes_as_a_log_line_are_a_record_or_one_line(line: bytes) -> None:
    """What ``--vla-resume``, merge and every session read: a record, or one line naming the log and
    the line (then a record it yields writes and reads back as it is)."""
    with tempfile.TemporaryDirectory() as directory:
        run = RunDir(Path(directory))
        run.episodes.mkdir()
        log = run.episodes / "received.jsonl"
        log.write_bytes(line + b"\n")
        try:
            records = LatestRecords.read(run)
        except SpecError as exc:
            assert "\n" not in str(exc) and f"{log} line " in str(exc), str(exc)
            return
        for record in records.values():
            assert parse_record(record_line(record)) == record


# ----- run files, read as merge, compare and a session read them


@pytest.fixture
def run(fake: pytest.Pytester) -> Path:
    fake.runpytest(*SHORT)
    return run_dir(fake)


def _replace_first_record(run: Path, text: str) -> Path:
    (log,) = (run / "episodes").glob("*.jsonl")
    _, *rest = log.read_text().splitlines()
    log.write_text("\n".join([text, *rest]) + "\n")
    return log


def _first_record(run: Path) -> dict[str, Any]:
    (log,) = (run / "episodes").glob("*.jsonl")
    return json.loads(log.read_text().splitlines()[0])


def _merge_refuses(run: Path, capsys: pytest.CaptureFixture[str], *expected: str) -> None:
    capsys.readouterr()  # what the session that made the run printed
    code = vlaeval(["merge", str(run), "--out", str(run.parent / "merged")])
    output = capsys.readouterr().out.strip()
    assert code == 2 and len(output.splitlines()) == 1, output
    assert all(part in output for part in expected), output
    assert not (run.parent / "merged" / "summary.json").exists()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1e999", "the number 1e999 is beyond the range of a float"), ("-1E400", "the number -1E400 is beyond")],
)
def test_a_received_return_beyond_the_float_range_is_refused_in_one_line(
    run: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    """A literal ``1e999`` is no ``Infinity`` token: Python read it as infinity, and merge wrote
    ``"mean_return": Infinity`` into canonical files that compare then refused."""
    record = _first_record(run)
    log = _replace_first_record(run, json.dumps({**record, "episode_return": "@"}).replace('"@"', value))
    _merge_refuses(run, capsys, f"{log.name} line 1 is not an episode record", expected)


def test_a_received_extra_beyond_the_float_range_is_refused_in_one_line(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An int of 400 digits is valid JSON, but no mean of it is a float (merge ended in OverflowError)."""
    record = _first_record(run)
    log = _replace_first_record(run, json.dumps({**record, "extras": {"bar": 10**400}}))
    _merge_refuses(
        run, capsys, f"{log.name} line 1 is not an episode record", "extras['bar'] is an int of about 10**400"
    )


@pytest.mark.parametrize("name", ["log line", "fingerprint.json", "policy.json", "baseline"])
def test_deep_nesting_in_what_merge_reads_is_one_line(run: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    extra = []
    if name == "log line":
        where = f"{_replace_first_record(run, DEEP).name} line 1"  # as merge copied it
    elif name == "baseline":
        baseline = run.parent / "baseline"
        baseline.mkdir()
        (baseline / "Alpha-v0.json").write_text(DEEP)
        extra, where = ["--baseline", str(baseline)], str(baseline / "Alpha-v0.json")
    else:
        (run / name).write_text(DEEP)
        where = str(run / name)
    capsys.readouterr()
    code = vlaeval(["merge", str(run), "--out", str(run.parent / "merged"), *extra])
    output = capsys.readouterr().out.strip()
    assert code == 2 and len(output.splitlines()) == 1, output
    assert where in output and f"nested deeper than {MAX_DEPTH} levels" in output, output


@pytest.mark.parametrize("name", ["summary.json", "task"])
def test_deep_nesting_in_what_compare_reads_is_one_line(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    runs = []
    for policy in ("random", "zero"):
        fake.runpytest(*SHORT, f"--policy={policy}")
        runs.append(next(p for p in (fake.path / "results").iterdir() if policy in p.name))
    damaged = runs[1] / ("summary.json" if name == "summary.json" else "Alpha-v0.json")
    damaged.write_text(DEEP)
    capsys.readouterr()
    code = vlaeval(["compare", *map(str, runs), "--out", str(fake.path / "compared")])
    output = "".join(capsys.readouterr()).strip()
    assert code == 2 and len(output.splitlines()) == 1, output
    assert str(damaged) in output and f"nested deeper than {MAX_DEPTH} levels" in output, output


@pytest.mark.parametrize("name", ["log line", "fingerprint.json", "policy.json", "episode list"])
def test_deep_nesting_in_what_a_session_reads_is_one_line(fake: pytest.Pytester, run: Path, name: str) -> None:
    """``--vla-resume`` on a run holding it (an INTERNALERROR), or ``--vla-episode-list`` naming it."""
    args = ["--vla-resume"]
    if name == "log line":
        where = f"{_replace_first_record(run, DEEP)} line 1"
    elif name == "episode list":
        (fake.path / "deep.json").write_text(DEEP)
        args, where = ["--vla-episode-list=deep.json"], "deep.json"
    else:
        (run / name).write_text(DEEP)
        where = str(run / name)
    result = fake.runpytest(*SHORT, *args)
    assert_one_line_usage_error(result, where)
    assert_one_line_usage_error(result, f"nested deeper than {MAX_DEPTH} levels")


ANY_FILE = st.binary(max_size=200) | JSON_VALUES.map(lambda value: dumps(value).encode())
"""Bytes, or JSON of any shape."""


def _one_line_naming(exc: Exception, path: Path) -> None:
    assert "\n" not in str(exc) and str(path) in str(exc), str(exc)


def test_any_bytes_as_a_run_file_are_a_result_or_one_line(run: Path) -> None:
    """Each file of a received run, as the command that reads it does: ``summary.json`` and a task's
    JSON as compare loads them, ``fingerprint.json`` as merge and a resumed session, ``policy.json``
    as a session, an episode list as ``--vla-episode-list``."""
    originals = {path: path.read_bytes() for path in run.glob("*.json")}
    selection = select(load_benchmark(run / "benchmark.yaml"), "short", episodes=2)
    store = RunStore(run)
    readers = {
        "summary.json": lambda: load_run(run),
        "Alpha-v0.json": lambda: load_run(run),
        "fingerprint.json": lambda: selection_of(run),
        "policy.json": store.holds_policy,
    }

    @PROPERTY
    @given(name=st.sampled_from(sorted(readers)), data=ANY_FILE)
    @example(name="summary.json", data=DEEP.encode())
    @example(name="Alpha-v0.json", data=DEEP.encode())
    @example(name="fingerprint.json", data=DEEP.encode())
    @example(name="policy.json", data=DEEP.encode())
    def check(name: str, data: bytes) -> None:
        for path, content in originals.items():
            path.write_bytes(content)
        (run / name).write_bytes(data)
        try:
            readers[name]()
        except (SpecError, ComparisonError) as exc:
            _one_line_naming(exc, run / name)

    @PROPERTY
    @given(data=ANY_FILE)
    @example(data=DEEP.encode())
    def check_episode_list(data: bytes) -> None:
        listed = run.parent / "listed.json"
        listed.write_bytes(data)
        try:
            read_episode_list(listed, selection)
        except SpecError as exc:
            _one_line_naming(exc, listed)

    check()
    check_episode_list()


def test_canonical_files_are_written_without_infinity(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        write_json_atomic(tmp_path / "summary.json", {"mean_return": float("inf")})
    assert not (tmp_path / "summary.json").exists()
