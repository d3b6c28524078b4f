"""A ``lerobot:PATH`` checkpoint, checked where the session starts, without LeRobot: the files a
LeRobot pretrained-model directory holds, and whether the benchmark gives what its policy reads.

The directory is someone else's: its ``config.json`` is read as untrusted JSON, and only the
fields named here are looked at. What a benchmark's observation keys become for a LeRobot policy
is LeRobot's ``preprocess_observation`` naming (``pixels`` -> ``observation.image``, ``agent_pos``
-> ``observation.state``, ``environment_state`` -> ``observation.environment_state``, LIBERO's
``robot_state`` -> ``observation.state`` (its env processor's), and a
``pixels`` dict of the cameras ``lerobot.cameras`` names -> ``observation.images.<camera>``); a key
it does not know is counted as not given.
"""

from __future__ import annotations

from typing import Any

from pytest_vlaeval import strict_json
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.policy.loading import LeRobotCheckpoint
from pytest_vlaeval.spec import Benchmark, builtin_benchmarks, load_benchmark

CHECKPOINT_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")
"""What ``save_pretrained`` of a LeRobot policy and of its two processor pipelines write."""

MAX_CONFIG_BYTES = 1 << 20

_RENAMED = {
    "pixels": "observation.image",
    "agent_pos": "observation.state",
    "environment_state": "observation.environment_state",
    "robot_state": "observation.state",  # LeRobot's LIBERO env processor flattens it into the state
}


def check_checkpoint(spec: LeRobotCheckpoint, benchmark: Benchmark) -> None:
    """``SpecError`` in one line when the checkpoint cannot run on ``benchmark``: no LeRobot env for
    it, a missing or incomplete directory, or an input feature the benchmark does not give."""
    if benchmark.lerobot.env_type is None:
        raise SpecError(
            f"{spec.option} {spec.text!r}: {benchmark.title} names no LeRobot env (lerobot.env_type in its benchmark file), "
            f"so what lerobot-eval would feed the policy is unknown; the built-in benchmarks that do: {', '.join(_with_lerobot_env())}"
        )
    if not spec.path.is_dir():
        raise SpecError(f"{spec.option} {spec.text!r}: no such directory (a LeRobot pretrained-model directory)")
    missing = [name for name in CHECKPOINT_FILES if not (spec.path / name).is_file()]
    if missing:
        raise SpecError(
            f"{spec.option} {spec.text!r} is not a complete LeRobot pretrained-model directory: it lacks "
            f"{', '.join(missing)} (the policy's and its pre/post-processors' save_pretrained write them)"
        )
    config = _config(spec)
    wanted = _input_features(spec, config)
    given = _given_features(benchmark)
    lacking = [name for name in wanted if name not in given]
    if lacking:
        raise SpecError(
            f"{spec.option} {spec.text!r} reads {', '.join(lacking)}, which {benchmark.title} does not give "
            f"(it gives {', '.join(given)})"
        )
    action = _feature_shape(config.get("output_features"), "action")
    if action is not None and action != [benchmark.env.action_dim]:
        raise SpecError(
            f"{spec.option} {spec.text!r} returns actions of shape {tuple(action)}, where {benchmark.title} takes "
            f"({benchmark.env.action_dim},)"
        )


def _with_lerobot_env() -> list[str]:
    """The built-in benchmarks a LeRobot checkpoint can run on (read only on this error's path)."""
    return [name for name, path in sorted(builtin_benchmarks().items()) if load_benchmark(path).lerobot.env_type]


def _given_features(benchmark: Benchmark) -> list[str]:
    """LeRobot's names of what the benchmark's policies see (``preprocess_observation``'s renaming)."""
    cameras = benchmark.lerobot.cameras
    given = []
    for key in benchmark.env.policy_obs_keys:
        if key == "pixels" and cameras:
            given += [f"observation.images.{camera}" for camera in cameras]
        elif key in _RENAMED:
            given.append(_RENAMED[key])
    return given


def _config(spec: LeRobotCheckpoint) -> dict[str, Any]:
    """``config.json``, read as untrusted JSON: bounded in size and depth, a policy ``type`` in it."""
    path = spec.path / "config.json"
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
        config: Any = strict_json.loads(raw.decode("utf-8")) if len(raw) <= MAX_CONFIG_BYTES else None
    except (OSError, ValueError) as exc:
        raise SpecError(f"{spec.option} {spec.text!r}: cannot read {path.name}: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("type"), str):
        raise SpecError(f"{spec.option} {spec.text!r}: {path.name} is not a LeRobot policy config (no policy 'type')")
    return config


def _input_features(spec: LeRobotCheckpoint, config: dict[str, Any]) -> list[str]:
    """The names of ``config.json``'s ``input_features``."""
    features = config.get("input_features")
    if not isinstance(features, dict):
        raise SpecError(f"{spec.option} {spec.text!r}: config.json has no 'input_features' mapping")
    return list(features)


def _feature_shape(features: Any, name: str) -> list[int] | None:
    """A feature's declared shape, where the config states one plainly; else None (not checked)."""
    feature = features.get(name) if isinstance(features, dict) else None
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in shape):
        return shape
    return None
