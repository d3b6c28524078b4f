"""A benchmark file is untrusted input: read once, into typed values, or refused in one line that
names the field (``spec_file``), whatever the file holds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import assert_one_line_usage_error

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.spec import load_benchmark, resolve_benchmark

BASE = """\
name: toy
env: {factory: "toy:make_env", action_dim: 2, policy_obs_keys: [pos], obs_mode: state}
protocol: {start_seed: 0, episodes: 3}
axes:
  - {field: family, label: family, summary: sr_per_family}
tasks:
  - {env_id: A-v0, split: short, max_steps: 5, family: f1}
"""
TASK = "  - {env_id: A-v0, split: short, max_steps: 5, family: f1}\n"
ENV_ID_RULE = "Expected an env id: letters, digits and _.+- in /-separated parts"


def edited(*pairs: tuple[str, str]) -> str:
    text = BASE
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    return text


ALIAS_BOMB = "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else '1, 2, 3, 4, 5, 6, 7, 8, 9'}]\n" for i in range(9)
)
"""Nine levels of nine aliases: 9^9 (about 4e8) leaves once expanded, in under 1 KB."""

REFUSED = {
    # T1: not YAML, not UTF-8, the wrong shapes, typos
    "syntax": (BASE + "  - {env_id: [\n", "is not valid YAML at line 9, column 1"),
    "not utf-8": (b"name: \xff\xfe\n", "is not UTF-8 text"),
    "tasks a mapping": (
        edited((TASK, ""), ("tasks:\n", "tasks: {a: 1}\n")),
        "Expected `array`, got `object` - at `tasks`",
    ),
    "tasks a string": (edited((TASK, ""), ("tasks:\n", "tasks: everything\n")), "Expected `array`, got `str`"),
    "protocol a scalar": (
        edited(("protocol: {start_seed: 0, episodes: 3}", "protocol: 3")),
        "Expected `object`, got `int` - at `protocol`",
    ),
    "env.fatcory": (edited(("factory:", "fatcory:")), "env has an unknown key 'fatcory'; did you mean 'factory'?"),
    "protocol.episode": (edited(("episodes: 3", "episode: 3")), "unknown field `episode` - at `protocol`"),
    "unknown top-level key": (BASE + "taks: []\n", "unknown field `taks`"),
    "max_steps 2.9": (
        edited(("max_steps: 5", "max_steps: 2.9")),
        "Expected `int`, got `float` - at `tasks[0].max_steps`",
    ),
    "env_id a list": (edited(("env_id: A-v0", "env_id: [x]")), "Expected `str`, got `array` - at `tasks[0].env_id`"),
    "policy_obs_keys a string": (
        edited(("policy_obs_keys: [pos]", "policy_obs_keys: rgb")),
        "Expected `array`, got `str` - at `env.policy_obs_keys`",
    ),
    "action_dim 0": (edited(("action_dim: 2", "action_dim: 0")), "Expected `int` >= 1 - at `env.action_dim`"),
    "factory not module:attr": (edited(('"toy:make_env"', "toy")), "Expected module:attr - at `env.factory`"),
    # L2: values that lose episodes
    "duplicate env ids": (BASE + TASK, "env ids must be unique; repeated: A-v0"),
    "max_steps 0": (edited(("max_steps: 5", "max_steps: 0")), "Expected `int` >= 1 - at `tasks[0].max_steps`"),
    "negative start seed": (
        edited(("start_seed: 0", "start_seed: -1")),
        "Expected `int` >= 0 - at `protocol.start_seed`",
    ),
    "env id with ::": (edited(("env_id: A-v0", "env_id: 'A::v0'")), ENV_ID_RULE),
    # S3: env ids become file names
    "env id climbing out": (edited(("env_id: A-v0", "env_id: ../../x-v0")), ENV_ID_RULE),
    "absolute env id": (edited(("env_id: A-v0", "env_id: /tmp/x-v0")), ENV_ID_RULE),
    # S1: axis fields become HTML attributes
    "markup in an axis field": (
        edited(
            ("field: family", "field: 'grp><script>alert(1)</script><x y'"),
            ("family: f1", "'grp><script>alert(1)</script><x y': f1"),
        ),
        "Expected an identifier: a letter, then letters, digits or _ - at `axes[0].field`",
    ),
    "axis fields differing by case": (
        edited(
            ("axes:\n", "axes:\n  - {field: Family, summary: sr_per_family2}\n"),
            ("family: f1", "family: f1, Family: f2"),
        ),
        "two axis fields differ by case alone",
    ),
    # L3: names the canonical files already use
    "axis field sr": (
        edited(("field: family", "field: sr"), ("family: f1", "sr: f1")),
        "axis field 'sr' is a key of every <ENV_ID>.json",
    ),
    "axis field successes": (
        edited(("field: family", "field: successes"), ("family: f1", "successes: f1")),
        "axis field 'successes' is a key",
    ),
    "summary key sr_split": (
        edited(("summary: sr_per_family", "summary: sr_split")),
        "axis summary key 'sr_split' is a key of summary.json",
    ),
    "a task without its group": (edited((", family: f1", "")), "task A-v0 needs a text 'family'"),
    # S4: aliases
    "alias bomb": (ALIAS_BOMB + BASE, "uses YAML aliases (&name / *name) for a list or mapping"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_bad_benchmark_file_is_one_line_naming_what_is_wrong(case: str, tmp_path: Path) -> None:
    text, expected = REFUSED[case]
    path = tmp_path / "bench.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SpecError) as caught:
        load_benchmark(path)
    message = str(caught.value)
    assert expected in message and "\n" not in message and str(path) in message, message


def test_what_a_benchmark_file_may_hold(tmp_path: Path) -> None:
    """Namespaced env ids, a camelCase axis field, env options of the benchmark's own."""
    path = tmp_path / "bench.yaml"
    path.write_text(
        edited(
            ("env_id: A-v0", "env_id: ALE/Alpha-v0"),
            ("field: family", "field: taskFamily"),
            ("family: f1", "taskFamily: f1"),
        )
    )
    benchmark = load_benchmark(path)
    assert [t.env_id for t in benchmark.tasks] == ["ALE/Alpha-v0"]
    assert benchmark.axes[1].field == "taskFamily" and benchmark.env.options == {"obs_mode": "state"}
    assert benchmark.start_seed == 0 and benchmark.episodes == 3 and benchmark.env.action_dim == 2


def test_a_file_is_read_once_while_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text(BASE)
    first = load_benchmark(path)
    assert load_benchmark(path) is first
    path.write_text(BASE.replace("episodes: 3", "episodes: 4"))
    assert load_benchmark(path).episodes == 4


def test_the_c_loader_reads_it_where_pyyaml_has_one() -> None:
    assert yaml.__with_libyaml__, "this machine's PyYAML has libyaml: the suite checks the fast path"


def test_a_session_with_a_bad_benchmark_file_stops_in_one_line(fake: pytest.Pytester) -> None:
    fake.makefile(".yaml", bomb=ALIAS_BOMB + (fake.path / "fake.yaml").read_text())
    result = fake.runpytest("--benchmark=bomb.yaml")
    assert_one_line_usage_error(result, "uses YAML aliases")
    assert not (fake.path / "results").exists()
    assert resolve_benchmark(str(fake.path / "fake.yaml"))[0].name == "fake"
