"""A ``lerobot:PATH`` checkpoint as a policy source: checked where the session starts, without
LeRobot (the files a LeRobot pretrained-model directory holds, and whether the benchmark gives what
its policy reads), and run in LeRobot's interpreter (``lerobot.policy``): beside the env in each
worker on a benchmark whose stack that interpreter holds, else served from it.

The directory is someone else's: its ``config.json`` is read as untrusted JSON, and only the
fields named here are looked at; its processor files are data too, checked before any interpreter
or server starts (``processor_files``). What the benchmark gives a LeRobot policy is its file's
``lerobot.features``: its observation keys under LeRobot's names (what ``preprocess_observation``
and the env's processors make of them, as LeRobot's env config's ``features_map`` says).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pytest_vlaeval.benchmark.model import Benchmark, builtin_benchmarks, load_benchmark
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.lerobot.policy import BATCHED_TYPES, lerobot_policy
from pytest_vlaeval.lerobot.processor_files import (
    LEROBOT_STEPS,
    PROCESSOR_FILES,
    check_processor_files,
    read_json_file,
)
from pytest_vlaeval.policy.contract import Policy
from pytest_vlaeval.policy.sources import BENCHMARK_ENV_OPTION, Given

CHECKPOINT_FILES = ("config.json", "model.safetensors", *PROCESSOR_FILES)
"""What ``save_pretrained`` of a LeRobot policy and of its two processor pipelines write."""

INFERENCE_MODES = {"batched": True, "unbatched": False}
"""``lerobot:PATH:MODE``: batched inference asked for or refused (``LeRobotCheckpoint.batched``)."""

PRETRAINED_MODEL = "pretrained_model"
"""The folder of a training run's checkpoint step (``checkpoints/005000``, or the ``checkpoints/last``
link to the latest) that holds the pretrained-model files, beside its ``training_state``."""


@dataclass(frozen=True)
class LeRobotCheckpoint:
    """``lerobot:PATH``: a LeRobot pretrained-model directory, served from LeRobot's interpreter
    with the env processors of ``env_type`` (the benchmark's LeRobot env)."""

    path: Path
    env_type: str | None = None
    option: str = field(default="--policy", compare=False)
    batched: bool | None = None
    """``lerobot:PATH:batched`` (True) or ``:unbatched`` (False): the chunks of the episodes that ask
    at once computed in one forward pass, or a row at a time; None: batched on a GPU only."""
    """The option it was given with, for the messages about it."""

    PREFIX: ClassVar[str] = "lerobot:"
    interpreter: ClassVar[str] = "lerobot"
    """The interpreter of its own it runs in (``vlaeval install lerobot``)."""
    holds_stacks: ClassVar[tuple[str, ...]] = ("pusht", "metaworld", "aloha", "lerobot")
    """The benchmark stacks LeRobot's interpreter holds (``install.stacks.LEROBOT_HOLDS``, and its
    own, lerobot-libero's): their workers run there, beside the policy."""

    @classmethod
    def parse(cls, text: str, given: Given) -> LeRobotCheckpoint:
        """``lerobot:PATH``, with the env type of the session's benchmark (or the one ``vlaeval
        serve`` was given). PATH is resolved (``checkpoints/last`` is a link); a training run's
        checkpoint step, which holds no ``config.json`` but a ``pretrained_model`` folder, names that
        folder."""
        path = text.removeprefix(cls.PREFIX)
        head, _, mode = path.rpartition(":")
        batched = INFERENCE_MODES.get(mode) if head else None
        path = head if batched is not None else path
        if not path:
            raise SpecError(
                f"{given.option} {text!r}: expected lerobot:PATH, PATH a LeRobot pretrained-model directory"
            )
        env_type = given.benchmark.lerobot.env_type if given.benchmark is not None else given.env_type
        resolved = Path(path).expanduser().resolve()
        if not (resolved / "config.json").exists() and (resolved / PRETRAINED_MODEL).is_dir():
            resolved = (resolved / PRETRAINED_MODEL).resolve()
        return cls(resolved, env_type, given.option, batched)

    @property
    def text(self) -> str:
        mode = "" if self.batched is None else ":batched" if self.batched else ":unbatched"
        return f"{self.PREFIX}{self.path}{mode}"

    @property
    def identity(self) -> str:
        return self.text

    @property
    def server_args(self) -> tuple[str, ...]:
        """What ``vlaeval serve --policy TEXT`` needs besides the text to build it: the env type."""
        return (BENCHMARK_ENV_OPTION, self.env_type) if self.env_type else ()

    def check(self, benchmark: Benchmark) -> None:
        """``SpecError`` in one line when the checkpoint cannot run on ``benchmark``: no LeRobot env
        for it, a missing or incomplete directory, or an input feature the benchmark does not give."""
        if benchmark.lerobot.env_type is None:
            raise SpecError(
                f"{self.option} {self.text!r}: {benchmark.title} names no LeRobot env (lerobot.env_type in its benchmark file), "
                f"so what lerobot-eval would feed the policy is unknown; the built-in benchmarks that do: {', '.join(_with_lerobot_env())}"
            )
        if not self.path.is_dir():
            raise SpecError(f"{self.option} {self.text!r}: no such directory (a LeRobot pretrained-model directory)")
        missing = [name for name in CHECKPOINT_FILES if not (self.path / name).is_file()]
        if missing:
            run = " (a training run's output: its checkpoint is lerobot:DIR/checkpoints/last)"
            raise SpecError(
                f"{self.option} {self.text!r} is not a complete LeRobot pretrained-model directory: it lacks "
                f"{', '.join(missing)} (the policy's and its pre/post-processors' save_pretrained write them)"
                f"{run if (self.path / 'checkpoints').is_dir() else ''}"
            )
        config = self._config()
        try:
            check_processor_files(self.path, LEROBOT_STEPS)
        except SpecError as exc:
            raise SpecError(f"{self.option} {self.text!r}: {exc}") from None
        wanted = self._input_features(config)
        given = list(benchmark.lerobot.features.values())
        lacking = [name for name in wanted if name not in given]
        if lacking:
            raise SpecError(
                f"{self.option} {self.text!r} reads {', '.join(lacking)}, which {benchmark.title} does not give "
                f"(it gives {', '.join(given) or 'none: its benchmark file has no lerobot.features'})"
            )
        if self.batched and config["type"] not in BATCHED_TYPES:
            raise SpecError(
                f"{self.option} {self.text!r}: batched inference serves {' and '.join(BATCHED_TYPES)} checkpoints, "
                f"not {config['type']!r}; leave out ':batched'"
            )
        action = _feature_shape(config.get("output_features"), "action")
        if action is not None and action != [benchmark.env.action_dim]:
            raise SpecError(
                f"{self.option} {self.text!r} returns actions of shape {tuple(action)}, where {benchmark.title} takes "
                f"({benchmark.env.action_dim},)"
            )

    def factory(self, action_dim: int, benchmark: str) -> Callable[[], Policy]:
        """A copy of the checkpoint, loaded once a process, per instance; only in LeRobot's
        interpreter, where the session's workers (beside the env) or its server (``vlaeval serve``)
        build it."""
        if self.env_type is None:
            raise SpecError(
                f"{self.option} {self.text!r}: no LeRobot env type for its observations (the benchmark file's "
                f"lerobot.env_type; vlaeval serve {BENCHMARK_ENV_OPTION})"
            )
        path, env_type, batched = str(self.path), self.env_type, self.batched
        return lambda: lerobot_policy(path, env_type, batched)

    def _config(self) -> dict[str, Any]:
        """``config.json``, read as untrusted JSON: bounded in size and depth, a policy ``type`` in it."""
        path = self.path / "config.json"
        try:
            config = read_json_file(path)
        except (OSError, ValueError) as exc:
            raise SpecError(f"{self.option} {self.text!r}: cannot read {path.name}: {exc}") from None
        if not isinstance(config, dict) or not isinstance(config.get("type"), str):
            raise SpecError(
                f"{self.option} {self.text!r}: {path.name} is not a LeRobot policy config (no policy 'type')"
            )
        return config

    def _input_features(self, config: dict[str, Any]) -> list[str]:
        """The names of ``config.json``'s ``input_features``."""
        features = config.get("input_features")
        if not isinstance(features, dict):
            raise SpecError(f"{self.option} {self.text!r}: config.json has no 'input_features' mapping")
        return list(features)


def _with_lerobot_env() -> list[str]:
    """The built-in benchmarks a LeRobot checkpoint can run on (read only on this error's path)."""
    return [name for name, path in sorted(builtin_benchmarks().items()) if load_benchmark(path).lerobot.env_type]


def _feature_shape(features: Any, name: str) -> list[int] | None:
    """A feature's declared shape, where the config states one plainly; else None (not checked)."""
    feature = features.get(name) if isinstance(features, dict) else None
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape):
        return shape
    return None
