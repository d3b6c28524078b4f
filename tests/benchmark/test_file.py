"""A benchmark file is untrusted input: read once, into typed values, or refused in one line that
names the field (``benchmark_file``), whatever the file holds."""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from helpers import assert_one_line_usage_error, record
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_vlaeval.benchmark.file import ExternalAsset, PackageFileAsset
from pytest_vlaeval.benchmark.model import ALL_SPLITS, load_benchmark, resolve_benchmark, select
from pytest_vlaeval.envs import assets
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.report.axes import grid_table, group_rates, other_numbers, summary_axes
from pytest_vlaeval.results.canonical import summary
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir

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


SHA = "a" * 64
MESH = f"{{kind: package_file, package: toy, path: data/mesh.glb, size: 3, sha256: {SHA}}}"


def with_asset(asset: str) -> str:
    """``BASE`` with one asset, ``mesh``, that its task lists."""
    return edited(("family: f1}", "family: f1, assets: [mesh]}")) + f"assets:\n  mesh: {asset}\n"


ALIAS_BOMB = "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else '1, 2, 3, 4, 5, 6, 7, 8, 9'}]\n" for i in range(9)
)
"""Nine levels of nine aliases: 9^9 (about 4e8) leaves once expanded, in under 1 KB."""

REFUSED = {
    # T1: not YAML, not UTF-8, the wrong shapes, typos
    "a name ending in a line break": (
        edited(("name: toy", 'name: "toy\\n"')),
        "Expected a name: a letter or digit, then letters, digits or _.+- - at `name`",
    ),
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
        "two axes have one field (letter case aside)",
    ),
    # L3: names the canonical files already use
    "axis field sr": (
        edited(("field: family", "field: sr"), ("family: f1", "sr: f1")),
        "axes[0].field would write over the key 'sr' of <ENV_ID>.json, one it always has",
    ),
    "axis field successes": (
        edited(("field: family", "field: successes"), ("family: f1", "successes: f1")),
        "axes[0].field would write over the key 'successes' of <ENV_ID>.json",
    ),
    "summary key sr_split": (
        edited(("summary: sr_per_family", "summary: sr_split")),
        "axes[0].summary would write over the key 'sr_split' of summary.json, one it always has",
    ),
    # D11: names that another field of the file already makes
    "an extra on an axis's intervals": (
        BASE + "episode_extras:\n  - {field: bar, reduce: mean, summary: sr_per_family_ci95}\n",
        "episode_extras[0].summary would write over the key 'sr_per_family_ci95' of summary.json, "
        "already made by axes[0].summary + '_ci95'; choose another",
    ),
    "the pooled key on an axis's intervals": (
        BASE + "pooled_success_key: sr_per_family_ci95\n",
        "pooled_success_key would write over the key 'sr_per_family_ci95' of summary.json, "
        "already made by axes[0].summary + '_ci95'",
    ),
    "an axis's summary on the mean of its groups": (
        edited(("summary: sr_per_family", "summary: sr_mean_of_family")) + "mean_of_groups: family\n",
        "mean_of_groups would write over the key 'sr_mean_of_family' of summary.json, already made by axes[0].summary",
    ),
    "the pooled key on the mean of groups": (
        BASE + "mean_of_groups: family\npooled_success_key: sr_mean_of_family\n",
        "mean_of_groups would write over the key 'sr_mean_of_family' of summary.json, "
        "already made by pooled_success_key",
    ),
    "an extra on the mean of groups": (
        BASE + "mean_of_groups: family\nepisode_extras:\n  - {field: sr_mean_of_family, reduce: sum}\n",
        "mean_of_groups would write over the key 'sr_mean_of_family' of summary.json, "
        "already made by episode_extras[0].field",
    ),
    "an extra on the pooled key": (
        BASE + "pooled_success_key: pc_success\nepisode_extras:\n  - {field: bar, reduce: sum, summary: pc_success}\n",
        "pooled_success_key would write over the key 'pc_success' of summary.json, "
        "already made by episode_extras[0].summary",
    ),
    "two extras on one key": (
        BASE + "episode_extras:\n  - {field: bar, reduce: sum, summary: x}\n  - {field: x, reduce: mean}\n",
        "episode_extras[1].field would write over the key 'x' of <ENV_ID>.json, already made by episode_extras[0].summary",
    ),
    "an extra on a result field": (
        BASE + "result_fields: [obs_mode]\nepisode_extras:\n  - {field: obs_mode, reduce: sum}\n",
        "episode_extras[0].field would write over the key 'obs_mode' of <ENV_ID>.json, already made by result_fields[0]",
    ),
    "a task without its group": (edited((", family: f1", "")), "task A-v0 needs a text 'family'"),
    # S4: aliases
    "alias bomb": (ALIAS_BOMB + BASE, "uses YAML aliases (&name / *name) for a list or mapping"),
    # S5: assets name no code, import nothing, write nowhere but inside their package
    "an asset of no known kind": (
        with_asset("{kind: script, run: x}"),
        "Invalid value 'script' - at `assets.mesh.kind`",
    ),
    "an asset without a kind": (
        with_asset("{package: toy}"),
        "Object missing required field `kind` - at `assets.mesh`",
    ),
    "an asset with a field of no kind": (
        with_asset(MESH.replace("}", ", check: 'toy:c'}")),
        "Object contains unknown field `check` - at `assets.mesh`",
    ),
    "an asset that is a list": (with_asset("[1]"), "Expected `object`, got `array` - at `assets.mesh`"),
    "a dotted package, whose parents finding it would import": (
        with_asset(MESH.replace("package: toy", "package: this.x")),
        "Expected a top-level package's name (no dots) - at `assets.mesh.package`",
    ),
    "a path climbing out of its package": (
        with_asset(MESH.replace("data/mesh.glb", "../site-packages/x.pth")),
        "Expected a relative path: letters, digits and _.+- in /-separated parts, each starting with a letter, "
        "digit or _ (no '..', no leading '/') - at `assets.mesh.path`",
    ),
    "an absolute path": (with_asset(MESH.replace("data/mesh.glb", "/etc/x.pth")), "at `assets.mesh.path`"),
    "a path through '.'": (with_asset(MESH.replace("data/mesh.glb", "data/./mesh.glb")), "at `assets.mesh.path`"),
    "a file URL": (
        with_asset(MESH.replace("}", ", url: 'file:///etc/passwd'}")),
        "Expected an https:// URL - at `assets.mesh.url`",
    ),
    "a plain http URL": (with_asset(MESH.replace("}", ", url: 'http://x.org/m'}")), "at `assets.mesh.url`"),
    "a digest that is not SHA-256": (
        with_asset(MESH.replace(SHA, "'00'")),
        "Expected 64 lowercase hex digits - at `assets.mesh.sha256`",
    ),
    "a check outside the env factory's package": (
        with_asset("{kind: external, check: 'shutil:rmtree'}"),
        "assets.mesh.check 'shutil:rmtree' is outside the package of env.factory ('toy'); "
        "a check must be a function of the env's own package",
    ),
    "a check of a package named like the factory's start": (
        with_asset("{kind: external, check: 'toys:check'}"),
        "assets.mesh.check 'toys:check' is outside the package of env.factory ('toy')",
    ),
    "a task needing an undeclared asset": (
        edited(("family: f1}", "family: f1, assets: [lamp]}")),
        "task A-v0 needs undeclared assets ['lamp']",
    ),
    # LeRobot's names of the observations: of keys the policy is given, as LeRobot's features
    "a LeRobot feature of an observation the policy is not given": (
        BASE + "lerobot: {env_type: pusht, features: {pixels: observation.image, pos: observation.state}}\n",
        "lerobot.features names 'pixels', but 'pixels' is not one of env.policy_obs_keys (pos)",
    ),
    "a LeRobot feature that is no observation": (
        BASE + "lerobot: {features: {pos: action}}\n",
        "Expected a LeRobot observation feature: observation.NAME",
    ),
    "a LeRobot feature key in LeRobot's own slashed form": (
        BASE + "lerobot: {features: {pos/x: observation.state}}\n",
        "Expected an observation key: parts of letters, digits or _, joined by '.'",
    ),
    # The install's finish step, controls, interval clusters, archives, long env ids
    "a finish step outside the env factory's package": (
        BASE + "install: {finish: shutil}\n",
        "install.finish 'shutil' is outside the package of env.factory ('toy'); it must be a module of the env's own package",
    ),
    "controls along no axis": (
        BASE + "controls: {field: suite, group: none, pair_by: family}\n",
        "controls.field 'suite' is not one of the axes ['split', 'family']",
    ),
    "controls paired by the split": (
        BASE + "controls: {field: family, group: f1, pair_by: split}\n",
        "controls.pair_by 'split' must name env ids as written",
    ),
    "a control group no task is in": (
        BASE + "controls: {field: family, group: f9, pair_by: family}\n",
        "no task's family is 'f9' (controls.group)",
    ),
    "interval clusters along no axis": (
        BASE + "interval_clusters: seed\n",
        "interval_clusters 'seed' is not one of the axes",
    ),
    "an archive asset with a URL": (
        with_asset(
            f"{{kind: package_archive, package: toy, path: assets, file: a.zip, member: x, size: 3, sha256: {SHA}, url: 'https://x.org/a.zip'}}"
        ),
        "Object contains unknown field `url` - at `assets.mesh`",
    ),
    "an env id longer than 200 characters": (
        edited(("env_id: A-v0", "env_id: " + "A" * 201)),
        "Expected `str` of length <= 200 - at `tasks[0].env_id`",
    ),
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


def test_lerobot_features_are_read_in_the_files_order(tmp_path: Path) -> None:
    """The order is the one a refusal lists what the benchmark gives in."""
    path = tmp_path / "bench.yaml"
    path.write_text(BASE + "lerobot: {features: {pos.b: observation.images.b, pos.a: observation.state}}\n")
    features = load_benchmark(path).lerobot.features
    assert list(features.items()) == [("pos.b", "observation.images.b"), ("pos.a", "observation.state")]


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


FULL = {
    "grid": {
        "rows": "base",
        "columns": "change",
        "row_groups": ["b1", "b2"],
        "column_groups": ["obj", "env"],
        "total": "t",
    },
    "episode_extras": [{"field": "bar", "reduce": "mean", "summary": "mean_bar"}],
    "pooled_success_key": "pc_success",
    "mean_of_groups": "change",
    "axes": [
        {"field": "split", "label": "suite", "title_case": True},
        {"field": "base", "summary": "sr_per_base"},
        {"field": "change", "summary": "sr_per_change"},
    ],
    "unavailable_splits": {"b1_env": "no scenes"},
    "result_fields": ["mode"],
    "tasks": [
        {"env_id": "B1-obj", "split": "b1_obj", "base": "b1", "change": "obj", "max_steps": 4},
        {"env_id": "B2-obj", "split": "b2_obj", "base": "b2", "change": "obj", "max_steps": 4},
    ],
    "protocol": {"start_seed": 0, "episodes": 2},
    "env": {"factory": "toy:make_env", "action_dim": 2, "policy_obs_keys": ["pos"], "mode": "m1"},
    "name": "toy",
}
"""A valid file that uses every part of the schema, the parts between which names can clash first
(an edit picks the first places most often): what the structured strategy edits."""
FULL_TEXT = yaml.safe_dump(FULL, sort_keys=False).encode()

NAMES = sorted(
    {"base", "change", "split", "mode", "bar", "b1", "B1", "b2", "obj", "env", "all", "b1_env", "sr", "n_errors"}
    | {"sr_split", "sr_per_base", "sr_per_base_ci95", "sr_per_change_ci95", "sr_mean_of_change", "sr_mean_of_base"}
    | {"pc_success", "mean_bar"}
)
"""Values that are names in ``FULL`` (its axes, groups, splits, keys) or keys a summary has."""
WORDS = sorted(
    {*NAMES, *FULL, *FULL["env"], *FULL["grid"], "field", "summary", "label", "reduce", "title_case", "env_id"}
    | {"sum", "mean", "ALE/x-v0", "../x"}
)
"""Keys and values that are each valid somewhere in a benchmark file, or name a key it makes."""
LEAVES = st.one_of(st.sampled_from(WORDS), st.integers(-1, 3), st.booleans(), st.none(), st.text(max_size=4))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(WORDS), inner, max_size=3),
    max_leaves=6,
)


def _edit(draw: Any, node: dict | list) -> None:
    """One edit somewhere below ``node``, mostly of a value's kind (a word for a word), so that most
    files stay well-formed and reach the checks between fields: a value replaced, or a key or item
    added or removed."""
    places = list(node) if isinstance(node, dict) else list(range(len(node)))
    action = draw(st.sampled_from(["replace", "replace", "add", "remove"])) if places else "add"
    if action == "add" and isinstance(node, list):
        node.append(copy.deepcopy(node[-1]) if node and draw(st.booleans()) else draw(VALUES))
    elif action == "add":
        node[draw(st.sampled_from(WORDS))] = draw(st.sampled_from(WORDS) | VALUES)
    else:
        place = draw(st.sampled_from(places))
        child = node[place]
        if isinstance(child, (dict, list)) and child and draw(st.integers(0, 7)):
            _edit(draw, child)
        elif action == "remove":
            del node[place]
        else:
            alike = {str: st.sampled_from(NAMES), int: st.integers(-1, 3), bool: st.booleans()}.get(type(child))
            node[place] = draw(VALUES if alike is None or not draw(st.integers(0, 4)) else alike)


@st.composite
def near_valid_files(draw: Any) -> bytes:
    """``FULL`` after a few edits: deeper than random bytes reach, into the checks between fields."""
    document = copy.deepcopy(FULL)
    for _ in range(draw(st.integers(0, 3))):
        _edit(draw, document)
    return yaml.safe_dump(document, sort_keys=False).encode()


@st.composite
def spliced_files(draw: Any) -> bytes:
    """``FULL``'s text with a stretch of it replaced by random bytes."""
    start = draw(st.integers(0, len(FULL_TEXT)))
    end = draw(st.integers(start, min(len(FULL_TEXT), start + 40)))
    return FULL_TEXT[:start] + draw(st.binary(max_size=40)) + FULL_TEXT[end:]


def _load_and_summarise(content: bytes) -> None:
    """What a session and merge do with a benchmark file: load it, or stop in one line naming the
    file; a file that loads gives a summary every report reads."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.yaml"
        path.write_bytes(content)
        try:
            benchmark = load_benchmark(path)
        except SpecError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
            return
        latest = LatestRecords(RunDir(Path(folder)))
        for task in benchmark.tasks:
            latest.add(record(task.env_id, benchmark.start_seed, "success"))
        body, _ = summary(select(benchmark, ALL_SPLITS, episodes=1), latest, interrupted=False)
        json.dumps(body, allow_nan=False)
        for axis in summary_axes(body):
            assert len(group_rates(axis, body)) == len(benchmark.groups(axis))
        grid = benchmark.reporting.grid
        if grid:  # every task is in a cell of the grid's total
            cells = body["grid"]["cells"]
            assert all(cells[task.group(grid.rows)][task.group(grid.columns)] == 1.0 for task in benchmark.tasks)
        assert grid_table(body) is not None or not grid
        assert other_numbers(body)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.binary(max_size=1000), spliced_files()))
def test_any_bytes_as_a_benchmark_file_load_or_are_one_line(content: bytes) -> None:
    _load_and_summarise(content)


@settings(max_examples=200, deadline=None)
@given(near_valid_files())
def test_a_near_valid_benchmark_file_loads_into_a_summary_or_is_one_line(content: bytes) -> None:
    _load_and_summarise(content)


def test_assets_are_read_into_typed_values(tmp_path: Path) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text(
        with_asset(MESH.replace("}", ", url: 'https://example.org/m.glb', license: CC BY 4.0}"))
        + "  pack: {kind: external, check: 'toy.checks:pack_problem', id: ycb}\n"
    )
    benchmark = load_benchmark(path)
    assert benchmark.assets == {
        "mesh": PackageFileAsset("toy", "data/mesh.glb", 3, SHA, "https://example.org/m.glb", "CC BY 4.0"),
        "pack": ExternalAsset("toy.checks:pack_problem", "ycb"),
    }
    assert benchmark.tasks[0].assets == ("mesh",)


ASSETS = {
    "mesh": {"kind": "package_file", "package": "toy", "path": "data/mesh.glb", "size": 3, "sha256": SHA},
    "pack": {"kind": "external", "check": "toy:pack_problem", "id": "ycb"},
}
"""A valid assets block of both kinds, for ``BASE``'s factory ``toy:make_env``."""
ASSET_KEYS = sorted({*ASSETS["mesh"], *ASSETS["pack"], "url", "license", "run"})
ASSET_VALUES = sorted(
    {"external", "package_file", "script", SHA, "00", "this.x", "this", "os", "pytest_vlaeval", "data/mesh.glb"}
    | {"../x.pth", "/etc/x.pth", "a/../b", "./x", "a\\b", "https://example.org/m.glb", "file:///etc/passwd"}
    | {"http://x.org/m", "https://", "https://a b", "toy:pack_problem", "toy.sub:check", "shutil:rmtree"}
    | {"toys:check", "toy", "toy:", ":check", "ycb"}
)
"""Values an asset's fields may hold, each valid somewhere or one step from a refused one."""


@st.composite
def assets_blocks(draw: Any) -> dict:
    """``ASSETS`` after a few edits: a field set (mostly one the asset has, mostly to an asset value)
    or dropped, an asset replaced by any value, or a copy of one added under a new name."""
    block: dict = copy.deepcopy(ASSETS)
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from([*block, "fresh"]))
        entry = block.setdefault(name, copy.deepcopy(ASSETS[draw(st.sampled_from(sorted(ASSETS)))]))
        action = draw(st.sampled_from(["set", "set", "set", "drop", "replace"]))
        if action == "replace" or not isinstance(entry, dict):
            block[name] = draw(VALUES)
        elif action == "drop" and entry:
            del entry[draw(st.sampled_from(sorted(entry)))]
        else:
            key = st.sampled_from(sorted(entry)) if entry and draw(st.integers(0, 3)) else st.sampled_from(ASSET_KEYS)
            value = st.sampled_from(ASSET_VALUES) if draw(st.integers(0, 4)) else VALUES
            entry[draw(key)] = draw(value)
    return block


@settings(max_examples=300, deadline=None)
@given(assets_blocks(), st.lists(st.sampled_from([*ASSETS, "fresh", "lamp"]), max_size=2, unique=True))
def test_any_assets_block_is_typed_values_or_one_line(block: dict, listed: list[str]) -> None:
    """Whatever the block, a load gives assets of the two kinds, each within the schema's promises
    (a top-level package, a relative path without '..', https, a check of the factory's package) or
    stops in one line naming the file; and finding what a package file needs imports nothing."""
    document = yaml.safe_load(BASE) | {"assets": block}
    document["tasks"][0]["assets"] = listed
    imported = set(sys.modules)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.yaml"
        path.write_text(yaml.safe_dump(document))
        try:
            benchmark = load_benchmark(path)
        except SpecError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
            return
    for name, asset in benchmark.assets.items():
        if isinstance(asset, ExternalAsset):
            assert asset.check.partition(":")[0].partition(".")[0] == "toy"
            continue
        assert isinstance(asset, PackageFileAsset) and asset.package.isidentifier()
        assert not PurePosixPath(asset.path).is_absolute() and not {"..", "."} & set(asset.path.split("/"))
        assert asset.url is None or asset.url.startswith("https://")
        problem = assets.problem(name, asset)
        assert problem is None or "\n" not in problem
    assert set(sys.modules) <= imported | {"toy"}, "nothing imported (and toy is no module here)"
