"""A benchmark file, read once into typed values, or refused with one line naming the field.

A benchmark file may come from anyone (a received run keeps the one it was made with, and
``vlaeval merge`` and ``compare`` read it without importing any code), so nothing in it is trusted:

- YAML aliases are refused (a file of a few KB with nested aliases expands to billions of nodes),
  and the C loader reads it when PyYAML has one;
- the layout is a schema (``msgspec``): types, ranges and unknown keys, at every level;
- names become files, HTML attributes, node ids and result keys, so they follow identifier rules:
  an env id may be namespaced (``ALE/Pong-v5``) but never climbs out of a directory or holds the
  node id separator ``::``; axis fields and summary keys are identifiers (HTML lowercases attribute
  names, so two may not differ by case alone), and never a key the canonical files already use;
- env ids are unique, step limits positive, seeds non-negative.

An env's own options (``obs_mode``, ``control_mode``...) are the benchmark's business, so ``env``
stays open to keys of its own; a key that is one edit away from a known one (``fatcory``) is a typo,
and refused.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.results.schema import Summary, TaskResult

IDENTIFIER = r"^[A-Za-z][A-Za-z0-9_]*$"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
ENV_ID = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*(/[A-Za-z0-9][A-Za-z0-9_.+-]*)*$"
"""Letters, digits and ``_.+-``, in ``/``-separated parts that each start with a letter or digit:
no ``..`` part, no leading ``/``, no ``::``."""
REFERENCE = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
MODULE = r"^[A-Za-z_][A-Za-z0-9_.]*$"

Identifier = Annotated[str, msgspec.Meta(pattern=IDENTIFIER, max_length=64)]
Name = Annotated[str, msgspec.Meta(pattern=NAME, max_length=64)]
EnvId = Annotated[str, msgspec.Meta(pattern=ENV_ID, max_length=128)]
Reference = Annotated[str, msgspec.Meta(pattern=REFERENCE, max_length=200)]
Module = Annotated[str, msgspec.Meta(pattern=MODULE, max_length=200)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
Seed = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]

RESERVED_TASK_KEYS = frozenset(TaskResult.__required_keys__ | TaskResult.__optional_keys__)
"""Keys of ``<ENV_ID>.json`` that an axis field (a task's group goes under its field) may not take."""
RESERVED_SUMMARY_KEYS = frozenset(Summary.__required_keys__ | Summary.__optional_keys__)
"""Keys of ``summary.json`` that an axis's summary key (and its ``_ci95``) may not take."""


class EnvFile(msgspec.Struct, forbid_unknown_fields=False, frozen=True):
    """``env``: what the harness reads of it; the env's own options are the rest of its keys."""

    factory: Reference
    action_dim: PositiveInt
    policy_obs_keys: Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(min_length=1)]
    preflight: Module | None = None
    packages: list[Annotated[str, msgspec.Meta(pattern=NAME)]] = []
    reset_options: dict[str, Any] = {}
    reference_reset_options: dict[str, Any] | None = None
    vector_backends: list[str] = []
    interpreter: Name | None = None


class ProtocolFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    start_seed: Seed = 0
    episodes: PositiveInt = 1


class AxisFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    field: Identifier
    label: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    summary: Identifier | None = None
    title_case: bool = False


class TaskFile(msgspec.Struct, forbid_unknown_fields=False, frozen=True):
    """A task's own fields; its groups along the benchmark's axes are the other keys, strings."""

    env_id: EnvId
    split: Name
    max_steps: PositiveInt
    instruction: str = ""
    assets: list[Identifier] = []


class ExtraFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One of the adapter's own per-episode fields, and how a task and a run summarise it."""

    field: Identifier
    reduce: Literal["sum", "mean"]
    summary: Identifier | None = None


class GridFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Two axes as a table of cells, and the benchmark's headline number over those cells."""

    rows: Identifier
    columns: Identifier
    row_groups: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]], msgspec.Meta(min_length=1)]
    column_groups: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]], msgspec.Meta(min_length=1)
    ]
    total: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]


class BenchmarkFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: Name
    env: dict[str, Any]
    tasks: Annotated[list[dict[str, Any]], msgspec.Meta(min_length=1)]
    title: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    version: str = ""
    benchmark_commit: str | None = None
    protocol: ProtocolFile = ProtocolFile()
    axes: list[AxisFile] = []
    assets: dict[Identifier, dict[str, Any]] = {}
    result_fields: list[Identifier] = []
    """Env options written, as given, into every ``<ENV_ID>.json`` (a reference schema's fields)."""
    episode_extras: list[ExtraFile] = []
    pooled_success_key: Identifier | None = None
    """A ``summary.json`` key for 100 x the success rate pooled over episodes (LeRobot's ``pc_success``)."""
    unavailable_splits: dict[Name, Annotated[str, msgspec.Meta(min_length=1, max_length=300)]] = {}
    """Splits the benchmark defines but this install cannot run, each with its one-line reason."""
    grid: GridFile | None = None
    mean_of_groups: Identifier | None = None
    """An axis whose groups' SRs ``summary.json`` also averages, unweighted (a paper's "average")."""


ENV_KEYS = tuple(EnvFile.__struct_fields__)

PATTERNS = {
    ENV_ID: "an env id: letters, digits and _.+- in /-separated parts, each starting with a letter or digit "
    "(no '..', no leading '/', no '::')",
    IDENTIFIER: "an identifier: a letter, then letters, digits or _",
    NAME: "a name: a letter or digit, then letters, digits or _.+-",
    REFERENCE: "module:attr",
    MODULE: "a module name",
}
"""What each pattern means, for the one line a refused value gets."""


def read_yaml(path: Path) -> Any:
    """The file's YAML, without aliases, or ``SpecError`` in one line."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise SpecError(f"benchmark file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"benchmark file {path} is not UTF-8 text (byte {exc.start})") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"benchmark file {path} is not valid YAML{where}: {problem}") from None
    _refuse_shared(data, path)
    return data


def _refuse_shared(data: Any, path: Path) -> None:
    """A YAML alias makes one list or mapping appear twice: refused before anything walks the tree
    as if it were copies (which is how a few KB expand to billions of nodes)."""
    seen: set[int] = set()
    pending = [data]
    while pending:
        node = pending.pop()
        if not isinstance(node, (dict, list)):
            continue
        if id(node) in seen:
            raise SpecError(
                f"benchmark file {path} uses YAML aliases (&name / *name) for a list or mapping; write it out instead"
            )
        seen.add(id(node))
        pending.extend(node.values() if isinstance(node, dict) else node)


def parse(data: Any, path: Path) -> tuple[BenchmarkFile, EnvFile, dict[str, Any], list[TaskFile]]:
    """The file's typed values: the whole, its env (and the env's own options), its tasks."""
    document = _convert(data, BenchmarkFile, path, "")
    options = {key: value for key, value in document.env.items() if key not in ENV_KEYS}
    for key in options:
        near = difflib.get_close_matches(key, ENV_KEYS, n=1, cutoff=0.8)
        if near:
            raise SpecError(f"benchmark file {path}: env has an unknown key {key!r}; did you mean {near[0]!r}?")
    env = _convert(document.env, EnvFile, path, "env")
    tasks = [_convert(entry, TaskFile, path, f"tasks[{i}]") for i, entry in enumerate(document.tasks)]
    _check_names(document, tasks, path)
    _check_reporting(document, options, tasks, path)
    return document, env, options, tasks


def _convert(value: Any, kind: type, path: Path, where: str) -> Any:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        message = str(exc).replace("`$", f"`{where}", 1).replace(" - at `.", " - at `").replace(" - at ``", "")
        if where and " - at `" not in message:
            message += f" - at `{where}`"
        for pattern, meaning in PATTERNS.items():
            message = message.replace(f"`str` matching regex '{pattern}'", meaning)
        raise SpecError(f"benchmark file {path} is malformed: {message}") from None


def _check_names(document: BenchmarkFile, tasks: list[TaskFile], path: Path) -> None:
    """Unique env ids; axis fields and summary keys that no canonical key already uses."""
    ids = [task.env_id for task in tasks]
    repeated = sorted({env_id for env_id in ids if ids.count(env_id) > 1}) if len(set(ids)) < len(ids) else []
    if repeated:
        raise SpecError(f"benchmark file {path}: env ids must be unique; repeated: {', '.join(repeated)}")
    lowered = [axis.field.lower() for axis in document.axes]
    if len(set(lowered)) < len(lowered):
        raise SpecError(
            f"benchmark file {path}: two axis fields differ by case alone: {[a.field for a in document.axes]}"
        )
    for axis in document.axes:
        if axis.field != "split" and axis.field in RESERVED_TASK_KEYS:
            raise SpecError(
                f"benchmark file {path}: axis field {axis.field!r} is a key of every <ENV_ID>.json; choose another"
            )
        if axis.summary and axis.field != "split":
            taken = {axis.summary, f"{axis.summary}_ci95"} & RESERVED_SUMMARY_KEYS
            if taken:
                raise SpecError(
                    f"benchmark file {path}: axis summary key {axis.summary!r} is a key of summary.json "
                    f"({', '.join(sorted(taken))}); choose another"
                )


def _check_reporting(document: BenchmarkFile, options: dict[str, Any], tasks: list[TaskFile], path: Path) -> None:
    """Result fields that name env options; extras, pooled and axis keys that take no canonical key
    and no other's; unavailable splits that are not also splits with tasks."""
    fields = {axis.field for axis in document.axes}
    for name in document.result_fields:
        if name not in options:
            raise SpecError(f"benchmark file {path}: result field {name!r} is not an option of env")
        if name in RESERVED_TASK_KEYS | fields:
            raise SpecError(f"benchmark file {path}: result field {name!r} is a key <ENV_ID>.json already has")
    taken = {axis.summary for axis in document.axes if axis.summary} | fields
    for extra in document.episode_extras:
        key = extra.summary or extra.field
        clash = ({key} & (RESERVED_TASK_KEYS | RESERVED_SUMMARY_KEYS | taken)) or ({key} & set(document.result_fields))
        if clash:
            raise SpecError(f"benchmark file {path}: episode extra {extra.field!r} would write over the key {key!r}")
        taken.add(key)
    pooled = document.pooled_success_key
    if pooled and pooled in RESERVED_SUMMARY_KEYS | taken:
        raise SpecError(f"benchmark file {path}: pooled_success_key {pooled!r} is a key summary.json already has")
    splits = {task.split.lower() for task in tasks}
    runnable = sorted(splits & {name.lower() for name in document.unavailable_splits})
    if runnable:
        raise SpecError(f"benchmark file {path}: splits {runnable} are both unavailable and given tasks")
