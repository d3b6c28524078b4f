"""A benchmark file, read once into typed values, or refused with one line naming the field.

A benchmark file may come from anyone (a received run keeps the one it was made with, and
``vlaeval merge`` and ``compare`` read it without importing any code), so nothing in it is trusted:

- YAML aliases are refused (a file of a few KB with nested aliases expands to billions of nodes),
  and the C loader reads it when PyYAML has one;
- the layout is a schema (``msgspec``): types, ranges and unknown keys, at every level;
- names become files, HTML attributes, node ids and result keys, so they follow identifier rules:
  an env id may be namespaced (``ALE/Pong-v5``) but never climbs out of a directory or holds the
  node id separator ``::``; axis fields and summary keys are identifiers (HTML lowercases attribute
  names, so two may not differ by case alone);
- every key the file names in the canonical files (``keys_made``: axis fields and summary keys,
  their intervals, extras, the pooled and mean keys) is a key no other part of the file, and no
  fixed key of those files, already makes: each is made once, or the file is refused;
- env ids are unique, step limits positive, seeds non-negative;
- the ``install`` section's pins are PEP 508 requirements and its Python range is ordered;
- ``assets`` are of three kinds, each with its own fields: a ``package_file`` names a top-level package
  (looked up without importing anything), a relative path that stays inside it and an https URL; a
  ``package_archive`` the same package and path, and the archive's file name and folder; an
  ``external`` asset's ``check`` is a function of the env factory's own package, and only a session,
  which runs that factory, calls it (``envs.assets``);
- ``install.finish``, the other code the file names, is a module of the env factory's own package.

An env's own options (``obs_mode``, ``control_mode``...) are the benchmark's business, so ``env``
stays open to keys of its own; a key that is one edit away from a known one (``fatcory``) is a typo,
and refused.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml
from packaging.requirements import InvalidRequirement, Requirement

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.schema import RunSummary, TaskResult

IDENTIFIER = r"^[A-Za-z][A-Za-z0-9_]*\Z"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*\Z"
ENV_ID = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*(/[A-Za-z0-9][A-Za-z0-9_.+-]*)*\Z"
"""Letters, digits and ``_.+-``, in ``/``-separated parts that each start with a letter or digit:
no ``..`` part, no leading ``/``, no ``::``."""
REFERENCE = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*\Z"
MODULE = r"^[A-Za-z_][A-Za-z0-9_.]*\Z"
OBS_KEY = r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*\Z"
"""An observation key, a nested one's parts joined by ``.`` (``pixels.top``: ``obs["pixels"]["top"]``)."""
LEROBOT_FEATURE = r"^observation(\.[A-Za-z0-9_]+)+\Z"

Identifier = Annotated[str, msgspec.Meta(pattern=IDENTIFIER, max_length=64)]
Name = Annotated[str, msgspec.Meta(pattern=NAME, max_length=64)]
EnvId = Annotated[str, msgspec.Meta(pattern=ENV_ID, max_length=200)]
"""At most 200 characters: LIBERO-Plus names a variant by its base task and perturbation (up to 147);
``<ENV_ID>.json`` stays within a file name's 255 bytes."""
Reference = Annotated[str, msgspec.Meta(pattern=REFERENCE, max_length=200)]
Module = Annotated[str, msgspec.Meta(pattern=MODULE, max_length=200)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
Seed = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]

TASK_FILE = "<ENV_ID>.json"
SUMMARY_FILE = "summary.json"
FIXED_KEYS = {
    TASK_FILE: frozenset(TaskResult.__required_keys__ | TaskResult.__optional_keys__),
    SUMMARY_FILE: frozenset(RunSummary.__required_keys__ | RunSummary.__optional_keys__),
}
"""The keys each canonical file has whatever the benchmark (the split's are among them), which no
key the benchmark file names may take."""


class EnvFile(msgspec.Struct, forbid_unknown_fields=False, frozen=True):
    """``env``: what the harness reads of it; the env's own options are the rest of its keys."""

    factory: Reference
    action_dim: PositiveInt
    policy_obs_keys: Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(min_length=1)]
    preflight: Module | None = None
    reset_options: dict[str, Any] = {}
    reference_reset_options: dict[str, Any] | None = None
    vector_backends: list[str] = []
    filterwarnings: list[Annotated[str, msgspec.Meta(min_length=1, max_length=300)]] = []
    """pytest ``filterwarnings`` lines for what the simulator stack warns on every env (the policy's
    own warnings still show)."""


MOVED_ENV_KEYS = {
    "packages": "install.record",
    "interpreter": "install.own_interpreter: true (the interpreter is named install.stack, else the benchmark)",
    "lerobot_env": "lerobot.env_type (a top-level lerobot section)",
}
"""Keys the ``install`` section now says; an old file naming them is refused, not read as env options."""

PythonVersion = Annotated[str, msgspec.Meta(pattern=r"^3\.[0-9]{1,2}\Z")]


class StepFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One ``pip install`` of the stack; it reruns when one of its requirements is unmet."""

    why: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
    requirements: list[Annotated[str, msgspec.Meta(min_length=1, max_length=200)]] = []
    """PEP 508 requirements, installed and checked as written."""
    requirements_file: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]+\.txt\Z")] | None = None
    """A hash-checked requirements file shipped with the installer (installed with --require-hashes)."""
    no_deps: bool = False
    keep_installed: bool = False
    """Any installed version satisfies it (torch: keep the build the machine chose)."""


class InstallFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``install``: the benchmark's simulator stack, which ``vlaeval install NAME`` puts in place and
    checks. A section without ``steps`` installs nothing: it names the stack the benchmark runs on
    (``stack: libero``, a stack another file pins, or an environment a user made)."""

    stack: Name | None = None
    """The stack's name (and its interpreter's, if it has its own); the benchmark's name by default."""
    python: tuple[PythonVersion, PythonVersion] | None = None
    """The Python versions the stack's wheels exist for: [first, last], inclusive."""
    steps: list[StepFile] = []
    imports: list[Module] = []
    """Modules the adapter imports; each must import after the install."""
    system_packages: list[Name] = []
    """Debian packages for ``--system-deps``."""
    system_packages_unless_gpu: bool = False
    """The system packages are a software renderer a machine with an NVIDIA GPU does not need."""
    minimum_system_versions: dict[Name, PositiveInt] = {}
    """Debian packages whose installed major version must be at least this."""
    own_interpreter: bool = False
    """The benchmark's workers run in an interpreter of its own (its pins clash with other stacks')."""
    record: list[Name] = []
    """Distributions whose versions every run's fingerprint records."""
    finish: Module | None = None
    """A module of the env factory's package that ``vlaeval install`` runs (``python -m``) in the
    interpreter after the packages, at every install, and with ``--check`` when it checks: what pip
    cannot do (links, config files); it changes nothing already right."""

    @property
    def python_range(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        if self.python is None:
            return None
        first, last = (tuple(int(part) for part in version.split(".")) for version in self.python)
        return (first[0], first[1]), (last[0], last[1])


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


class ControlsFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``controls``: the benchmark's unperturbed arm. The tasks whose group along the axis ``field``
    is ``group`` are controls: out of the run's own numbers, selected only by name or beside the
    tasks they control (``--vla-control-arm``), and paired with those: each task's group along the
    axis ``pair_by`` is the env id of its control (a control's is its own)."""

    field: Identifier
    group: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    pair_by: Identifier


class LeRobotFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``lerobot``: the benchmark as LeRobot knows it. ``env_type``: LeRobot's ``--env.type``, whose
    env processors a ``lerobot:PATH`` policy's observations pass through (none: LeRobot has no such
    env here); ``features``: the names such a policy reads them by. The rest names each task in
    LeRobot's ``eval_info.json`` as ``(task_group, task_id)``: its group along the axis
    ``task_group`` (renamed by ``group_names``) and its index among that group's tasks, in the
    file's order."""

    env_type: Name | None = None
    task_group: Identifier = "split"
    group_names: dict[Annotated[str, msgspec.Meta(min_length=1, max_length=64)], Name] = {}
    single_task_prefixes: list[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.+-]*\Z", max_length=64)]] = []
    """Where LeRobot also names a one-task run by the task (``--env.task=push-v3``: task_group
    ``push-v3``, task_id 0): the prefixes that name may carry before the env id (``''``, ``metaworld-``)."""
    features: Annotated[
        dict[
            Annotated[str, msgspec.Meta(pattern=OBS_KEY, max_length=128)],
            Annotated[str, msgspec.Meta(pattern=LEROBOT_FEATURE, max_length=128)],
        ],
        msgspec.Meta(max_length=64),
    ] = {}
    """What a LeRobot policy reads of each observation key (``pixels.top: observation.images.top``),
    as LeRobot's env config's ``features_map`` names it, after its env processors (LIBERO's
    ``robot_state: observation.state``); each key's first part is one of ``env.policy_obs_keys``."""


PACKAGE = r"^[A-Za-z_][A-Za-z0-9_]*\Z"
ASSET_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*\Z"
"""Letters, digits and ``_.+-``, in ``/``-separated parts that each start with a letter, digit or
``_``: relative, and no ``.`` or ``..`` part."""
HTTPS_URL = r"^https://[!-~]+\Z"
SHA256 = r"^[0-9a-f]{64}\Z"
License = Annotated[str, msgspec.Meta(max_length=300)]


class PackageFileAsset(msgspec.Struct, tag_field="kind", tag="package_file", forbid_unknown_fields=True, frozen=True):
    """A file that belongs inside an installed package but is not in its wheel (MIKASA's lamp mesh):
    ``vlaeval install-assets`` puts it at ``path`` under the folder of the top-level package
    ``package``, from ``$VLAEVAL_ASSET_DIR`` or ``url``, when its size and SHA-256 match."""

    package: Annotated[str, msgspec.Meta(pattern=PACKAGE, max_length=100)]
    """A top-level package's name: found without importing anything (a dotted name imports its parents)."""
    path: Annotated[str, msgspec.Meta(pattern=ASSET_PATH, max_length=255)]
    size: Annotated[int, msgspec.Meta(ge=1, le=1 << 36)]
    sha256: Annotated[str, msgspec.Meta(pattern=SHA256)]
    url: Annotated[str, msgspec.Meta(pattern=HTTPS_URL, max_length=2000)] | None = None
    """Where to download it: https only (a local copy comes through ``$VLAEVAL_ASSET_DIR``)."""
    license: License = ""


class ExternalAsset(msgspec.Struct, tag_field="kind", tag="external", forbid_unknown_fields=True, frozen=True):
    """Data another tool fetches (MIKASA: ManiSkill's YCB pack), only checked: by ``check``, a function
    of the env factory's own package, called with the asset's name and this, which returns None or one
    actionable line. Only a session, which runs the factory anyway, calls it (``envs.assets``)."""

    check: Reference
    id: Name | None = None
    """The data's name as the tool that fetches it knows it (``ycb``)."""
    license: License = ""


FILE_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z"


class PackageArchiveAsset(
    msgspec.Struct, tag_field="kind", tag="package_archive", forbid_unknown_fields=True, frozen=True
):
    """A folder that belongs inside an installed package but is shipped apart, as one zip archive
    (LIBERO-Plus's ``assets.zip``): ``vlaeval install-assets`` takes the archive ``file`` from
    ``$VLAEVAL_ASSET_DIR`` (or ``--from DIR``), never from the network (``source`` says where to get
    it), checks its size and SHA-256, and puts the archive's folder ``member`` at ``path`` under the
    folder of the top-level package ``package``."""

    package: Annotated[str, msgspec.Meta(pattern=PACKAGE, max_length=100)]
    path: Annotated[str, msgspec.Meta(pattern=ASSET_PATH, max_length=255)]
    """The folder the archive's ``member`` becomes, relative to the package's folder."""
    file: Annotated[str, msgspec.Meta(pattern=FILE_NAME, max_length=255)]
    """The archive's file name, as it is looked for in the folder of local copies."""
    member: Annotated[str, msgspec.Meta(pattern=ASSET_PATH, max_length=1000)]
    """The folder inside the archive that is taken (its entries' common prefix)."""
    size: Annotated[int, msgspec.Meta(ge=1, le=1 << 44)]
    sha256: Annotated[str, msgspec.Meta(pattern=SHA256)]
    source: Annotated[str, msgspec.Meta(max_length=300)] = ""
    """Where a copy comes from, in words (a dataset and its revision): said when it is missing."""
    license: License = ""


Asset = PackageFileAsset | ExternalAsset | PackageArchiveAsset


class BenchmarkFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: Name
    env: dict[str, Any]
    tasks: Annotated[list[dict[str, Any]], msgspec.Meta(min_length=1)]
    title: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    version: str = ""
    benchmark_commit: str | None = None
    protocol: ProtocolFile = ProtocolFile()
    axes: list[AxisFile] = []
    assets: dict[Identifier, Any] = {}
    """Each read into an ``Asset`` by ``parse``, so that a refusal names the asset."""
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
    lerobot: LeRobotFile = LeRobotFile()
    """LeRobot's env type, its names of the observations and of the tasks (its task groups are the
    splits unless it says)."""
    controls: ControlsFile | None = None
    interval_clusters: Identifier | None = None
    """An axis whose groups are the independent units of every group SR's interval (LIBERO-Plus: the
    base task, whose variants share its scene and init states); the seeds when absent."""
    install: InstallFile = InstallFile()


ENV_KEYS = tuple(EnvFile.__struct_fields__)

PATTERNS = {
    ENV_ID: "an env id: letters, digits and _.+- in /-separated parts, each starting with a letter or digit "
    "(no '..', no leading '/', no '::')",
    IDENTIFIER: "an identifier: a letter, then letters, digits or _",
    NAME: "a name: a letter or digit, then letters, digits or _.+-",
    REFERENCE: "module:attr",
    MODULE: "a module name",
    OBS_KEY: "an observation key: parts of letters, digits or _, joined by '.'",
    LEROBOT_FEATURE: "a LeRobot observation feature: observation.NAME, parts of letters, digits or _ joined by '.'",
    PACKAGE: "a top-level package's name (no dots)",
    ASSET_PATH: "a relative path: letters, digits and _.+- in /-separated parts, each starting with a letter, "
    "digit or _ (no '..', no leading '/')",
    HTTPS_URL: "an https:// URL",
    FILE_NAME: "a file name: letters, digits and _.+-, starting with a letter, digit or _",
    SHA256: "64 lowercase hex digits",
}
"""What each pattern means, for the one line a refused value gets."""


def intervals_key(summary_key: str) -> str:
    """The ``summary.json`` key of the 95% intervals of the group SRs under ``summary_key``."""
    return f"{summary_key}_ci95"


def mean_of_groups_key(field: str) -> str:
    """The ``summary.json`` key of the unweighted mean of the group SRs along the axis ``field``."""
    return f"sr_mean_of_{field}"


def keys_made(document: BenchmarkFile) -> dict[str, list[tuple[str, str]]]:
    """Every key the benchmark file names in each canonical file, as ``(the file's field that makes
    it, key)`` in the order the writer makes them; the files' fixed keys (``FIXED_KEYS``, the split's
    among them) are not listed. The canonical writer makes exactly these (``results.canonical``)."""
    axes = [(f"axes[{i}]", axis) for i, axis in enumerate(document.axes) if axis.field != "split"]
    extras = [
        (f"episode_extras[{i}].{'summary' if extra.summary else 'field'}", extra.summary or extra.field)
        for i, extra in enumerate(document.episode_extras)
    ]
    summaries = [(f"{where}.summary", axis.summary) for where, axis in axes if axis.summary]
    pooled = document.pooled_success_key
    mean = document.mean_of_groups
    return {
        TASK_FILE: [
            *((f"{where}.field", axis.field) for where, axis in axes),
            *((f"result_fields[{i}]", name) for i, name in enumerate(document.result_fields)),
            *extras,
        ],
        SUMMARY_FILE: [
            *summaries,
            *((f"{where} + '_ci95'", intervals_key(key)) for where, key in summaries),
            *extras,
            *([("pooled_success_key", pooled)] if pooled else []),
            *([("mean_of_groups", mean_of_groups_key(mean))] if mean else []),
        ],
    }


CACHED_BYTES = 1 << 20
"""A benchmark file this large or larger (LIBERO-Plus's: 10,070 tasks, 3.6 MB) has its data kept in a
cache after its first read: PyYAML builds 4 to 6 s of Python objects from it, in the controller and in
every worker; the cache reads back in milliseconds."""


def read_yaml(path: Path) -> Any:
    """The file's YAML, without aliases, or ``SpecError`` in one line."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")
    except OSError as exc:
        raise SpecError(f"benchmark file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"benchmark file {path} is not UTF-8 text (byte {exc.start})") from None
    cache = _DataCache(raw) if len(raw) >= CACHED_BYTES else None
    if cache is not None and (cached := cache.read()) is not None:
        return cached
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"benchmark file {path} is not valid YAML{where}: {problem}") from None
    _refuse_shared(data, path)
    if cache is not None:
        cache.write(data)
    return data


class _DataCache:
    """A large benchmark file's data (what the YAML loader made of it, plain lists, mappings and
    scalars) kept as msgpack under the file's SHA-256, in a folder of this user's own in the temporary
    directory (made private, and used only while it is: another user could otherwise plant data for a
    file's digest). Data msgpack does not give back as it was (a date) is not kept. What it gives
    back is checked as the file's own data is, so the cache saves time and changes nothing."""

    def __init__(self, raw: bytes) -> None:
        folder = Path(tempfile.gettempdir()) / f"pytest-vlaeval-benchmarks-{os.getuid()}"
        self.folder = folder
        self.file = folder / f"{hashlib.sha256(raw).hexdigest()}.msgpack"

    def _private(self) -> bool:
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            status = self.folder.lstat()
        except OSError:
            return False
        return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid() and not status.st_mode & 0o077

    def read(self) -> Any:
        if not self._private():
            return None
        try:
            return msgspec.msgpack.decode(self.file.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None

    def write(self, data: Any) -> None:
        if not self._private():
            return
        try:
            packed = msgspec.msgpack.encode(data)
            if msgspec.msgpack.decode(packed) != data:
                return
            partial = self.file.with_name(f".{self.file.name}.{os.getpid()}")
            partial.write_bytes(packed)
            os.replace(partial, self.file)
        except (OSError, TypeError, msgspec.EncodeError):
            return


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


def parse(data: Any, path: Path) -> tuple[BenchmarkFile, EnvFile, dict[str, Any], list[TaskFile], dict[str, Asset]]:
    """The file's typed values: the whole, its env (and the env's own options), its tasks, its assets."""
    document = _convert(data, BenchmarkFile, path, "")
    options = {key: value for key, value in document.env.items() if key not in ENV_KEYS}
    for key in options.keys() & MOVED_ENV_KEYS.keys():
        raise SpecError(f"benchmark file {path}: env.{key} is now {MOVED_ENV_KEYS[key]}; move it there")
    for key in options:
        near = difflib.get_close_matches(key, ENV_KEYS, n=1, cutoff=0.8)
        if near:
            raise SpecError(f"benchmark file {path}: env has an unknown key {key!r}; did you mean {near[0]!r}?")
    env = _convert(document.env, EnvFile, path, "env")
    tasks = [_convert(entry, TaskFile, path, f"tasks[{i}]") for i, entry in enumerate(document.tasks)]
    assets = {name: _convert(entry, Asset, path, f"assets.{name}") for name, entry in document.assets.items()}
    _check_names(document, tasks, path)
    _check_keys(document, path)
    _check_reporting(document, options, tasks, path)
    _check_install(document.install, path)
    _check_asset_checks(assets, env, path)
    _check_finish(document.install, env, path)
    _check_lerobot_features(document.lerobot, env, path)
    return document, env, options, tasks, assets


def _convert(value: Any, kind: type, path: Path, where: str) -> Any:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        message = str(exc).replace("`$", f"`{where}", 1).replace(" - at `.", " - at `").replace(" - at ``", "")
        if where and " - at `" not in message:
            message += f" - at `{where}`"
        for pattern, meaning in PATTERNS.items():
            message = message.replace(f"`str` matching regex {pattern!r}", meaning)
        raise SpecError(f"benchmark file {path} is malformed: {message}") from None


def _check_names(document: BenchmarkFile, tasks: list[TaskFile], path: Path) -> None:
    """Unique env ids and axis fields (letter case aside: HTML lowercases attribute names)."""
    ids = [task.env_id for task in tasks]
    repeated = sorted({env_id for env_id in ids if ids.count(env_id) > 1}) if len(set(ids)) < len(ids) else []
    if repeated:
        raise SpecError(f"benchmark file {path}: env ids must be unique; repeated: {', '.join(repeated)}")
    lowered = [axis.field.lower() for axis in document.axes]
    if len(set(lowered)) < len(lowered):
        raise SpecError(
            f"benchmark file {path}: two axes have one field (letter case aside): {[a.field for a in document.axes]}"
        )


def _check_keys(document: BenchmarkFile, path: Path) -> None:
    """Each key of a canonical file is made once: a key the file names that its fixed keys or
    another field of the file already make would overwrite that value (``keys_made``)."""
    for file, made in keys_made(document).items():
        makers: dict[str, str | None] = dict.fromkeys(FIXED_KEYS[file])
        for where, key in made:
            if key in makers:
                first = makers[key]
                already = f"already made by {first}" if first else "one it always has"
                raise SpecError(
                    f"benchmark file {path}: {where} would write over the key {key!r} of {file}, {already}; "
                    "choose another"
                )
            makers[key] = where


def _check_reporting(document: BenchmarkFile, options: dict[str, Any], tasks: list[TaskFile], path: Path) -> None:
    """Result fields that name env options; unavailable splits that are not also splits with tasks."""
    for name in document.result_fields:
        if name not in options:
            raise SpecError(f"benchmark file {path}: result field {name!r} is not an option of env")
    splits = {task.split.lower() for task in tasks}
    runnable = sorted(splits & {name.lower() for name in document.unavailable_splits})
    if runnable:
        raise SpecError(f"benchmark file {path}: splits {runnable} are both unavailable and given tasks")


def _check_install(install: InstallFile, path: Path) -> None:
    """Pins are PEP 508 requirements, and a stack that pins has a Python range, in order."""
    pins = [line for step in install.steps for line in step.requirements]
    for line in pins:
        try:
            Requirement(line)
        except InvalidRequirement as exc:
            why = str(exc).splitlines()[0]
            raise SpecError(
                f"benchmark file {path}: install pin {line!r} is not a PEP 508 requirement ({why})"
            ) from None
    if not install.steps:
        return
    python = install.python_range
    if python is None:
        raise SpecError(f"benchmark file {path}: install.steps need install.python, the [first, last] Python versions")
    if python[0] > python[1]:
        raise SpecError(f"benchmark file {path}: install.python {list(install.python or ())} is not [first, last]")


def _check_asset_checks(assets: dict[str, Asset], env: EnvFile, path: Path) -> None:
    """An external asset's ``check`` is code the file names: only a function of the package that
    ``env.factory`` (the one place a benchmark file names code) comes from."""
    factory_package = top_package(env.factory)
    for name, asset in assets.items():
        if isinstance(asset, ExternalAsset) and top_package(asset.check) != factory_package:
            raise SpecError(
                f"benchmark file {path}: assets.{name}.check {asset.check!r} is outside the package of env.factory "
                f"({factory_package!r}); a check must be a function of the env's own package"
            )


def _check_finish(install: InstallFile, env: EnvFile, path: Path) -> None:
    """``install.finish`` is code the file names: only a module of the env factory's package."""
    factory_package = top_package(env.factory)
    if install.finish and install.finish.partition(".")[0] != factory_package:
        raise SpecError(
            f"benchmark file {path}: install.finish {install.finish!r} is outside the package of env.factory "
            f"({factory_package!r}); it must be a module of the env's own package"
        )


def _check_lerobot_features(lerobot: LeRobotFile, env: EnvFile, path: Path) -> None:
    """Each ``lerobot.features`` key is an observation the policy is given."""
    for key in lerobot.features:
        top = key.partition(".")[0]
        if top not in env.policy_obs_keys:
            raise SpecError(
                f"benchmark file {path}: lerobot.features names {key!r}, but {top!r} is not one of "
                f"env.policy_obs_keys ({', '.join(env.policy_obs_keys)})"
            )


def top_package(reference: str) -> str:
    """The top-level package of ``module:attr`` (``pytest_vlaeval`` of ``pytest_vlaeval.envs.mikasa:make_env``)."""
    return reference.partition(":")[0].partition(".")[0]
