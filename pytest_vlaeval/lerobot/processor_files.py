"""A LeRobot checkpoint's processor files (``policy_preprocessor.json``, ``policy_postprocessor.json``),
read as data before LeRobot reads them.

LeRobot's loader builds each step of such a file from its entry: a ``registry_name`` is looked up
in its ``ProcessorStepRegistry``; without one, the ``class`` path is imported and called with the
entry's ``config`` as keyword arguments (``{"class": "subprocess.Popen", "config": {"args": [...]}}``
runs a command, and a path under ``lerobot.`` still reaches whatever its modules import, such as
``lerobot.processor.pipeline.hf_hub_download``); a ``state_file`` is read from beside the file,
wherever its path leads. The checkpoint directory is someone else's, so a step is accepted only as
a name in LeRobot's registry, a ``class`` beside it only under ``lerobot.``, and a state file only
as a regular file inside the directory. Anything else is one line naming the file and the step.

The session checks the files against ``LEROBOT_STEPS``, LeRobot's registry written down here, so
pytest's interpreter never imports LeRobot; the policy server checks them again in LeRobot's
interpreter, against its live registry, just before LeRobot loads them.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from pytest_vlaeval import strict_json
from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.printable import terminal_safe

PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")
"""What the pre- and post-processor pipelines' ``save_pretrained`` write (LeRobot's default names)."""

MAX_JSON_BYTES = 1 << 20
"""The largest checkpoint JSON file read (LeRobot's own are a few KB)."""

LEROBOT_VERSION = "0.6.1"
"""The LeRobot whose registry ``LEROBOT_STEPS`` is: the one ``vlaeval install lerobot`` pins."""

LEROBOT_STEPS = frozenset(
    {
        "absolute_actions_processor",
        "action_tokenizer_processor",
        "add_teleop_action_as_complementary_data",
        "add_teleop_action_as_info",
        "device_processor",
        "eo1_conversation_template_processor",
        "eo1_qwen_processor",
        "evo1_action_processor",
        "evo1_pad_action_processor",
        "evo1_pad_state_processor",
        "fastwam_action_toggle_processor",
        "gripper_penalty_processor",
        "groot_action_unpack_unnormalize_v2",
        "groot_n1_7_action_decode_v1",
        "groot_n1_7_pack_inputs_v1",
        "groot_n1_7_vlm_encode_v1",
        "gym_hil_adapter_processor",
        "image_crop_resize_processor",
        "intervention_action_processor",
        "isaaclab_arena_processor",
        "libero_processor",
        "map_delta_action_to_robot_action",
        "map_tensor_to_delta_action_dict",
        "molmoact2_action_frame_transform",
        "molmoact2_clamp_action",
        "molmoact2_clamp_normalized",
        "molmoact2_masked_normalizer",
        "molmoact2_masked_unnormalizer",
        "molmoact2_pack_inputs",
        "molmoact2_state_frame_transform",
        "normalizer_processor",
        "numpy2torch_action_processor",
        "observation_processor",
        "pi05_prepare_state_tokenizer_processor_step",
        "pi0_fast_prepare_state_tokenizer_processor_step",
        "pi0_new_line_processor",
        "policy_action_to_robot_action_processor",
        "relative_actions_processor",
        "rename_observations_processor",
        "reward_classifier_processor",
        "robot_action_to_policy_action_processor",
        "smolvla_new_line_processor",
        "time_limit_processor",
        "to_batch_processor",
        "to_batch_processor_action",
        "to_batch_processor_complementary_data",
        "to_batch_processor_observation",
        "tokenizer_processor",
        "torch2numpy_action_processor",
        "unnormalizer_processor",
        "vla_jepa_binarize_gripper",
        "vla_jepa_clip_actions",
        "vla_jepa_pre_snap_gripper",
        "wall_x_task_processor",
        "xvla_add_domain_id",
        "xvla_image_scale",
        "xvla_image_to_float",
        "xvla_imagenet_normalize",
        "xvla_rotation_6d_to_axis_angle",
    }
)
"""LeRobot 0.6.1's ``ProcessorStepRegistry`` as ``make_pre_post_processors`` finds it (its module
imports ``lerobot.policies``, whose policies register their steps): what a step may name.
``tests/lerobot/test_lerobot_checkpoint_files.py`` checks it equals the installed LeRobot's."""

LEROBOT_CLASSES = "lerobot."


class _Pipeline(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A processor file as ``DataProcessorPipeline.save_pretrained`` writes it; each step is read
    on its own (``_Step``), so that a refusal can name it."""

    steps: list[dict[str, Any]]
    name: str = ""


class _Step(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A step's entry: the keys LeRobot's loader reads, and nothing else."""

    registry_name: str | None = None
    class_path: str | None = msgspec.field(default=None, name="class")
    config: dict[str, Any] = {}
    state_file: str | msgspec.UnsetType = msgspec.UNSET
    """Absent, or a file name: LeRobot reads any value that is present as a path."""


def check_processor_files(directory: Path, registry: Collection[str]) -> None:
    """``SpecError`` in one line naming the file (and the step) when a processor file of the
    checkpoint ``directory`` is not plain data for LeRobot's loader: not a pipeline of step
    objects, a step whose ``registry_name`` is not in ``registry``, a ``class`` outside LeRobot,
    or a ``state_file`` that is not a file inside ``directory``."""
    root = directory.resolve()
    for name in PROCESSOR_FILES:
        pipeline = _pipeline(root, name)
        for index, entry in enumerate(pipeline.steps):
            _check_step(root, f"{name} step {index} ({_step_name(entry)})", entry, registry)


def read_json_file(path: Path) -> Any:
    """The JSON value of a checkpoint file, read as untrusted: a regular file of at most
    ``MAX_JSON_BYTES``, finite numbers, bounded nesting; ``ValueError`` or ``OSError`` saying why not."""
    return strict_json.loads(strict_json.read_regular(path, MAX_JSON_BYTES))


def _pipeline(root: Path, name: str) -> _Pipeline:
    path = root / name
    if not _inside(root, path):
        raise SpecError(f"{name} leads outside the checkpoint directory through a link; {_COPY_ADVICE}")
    try:
        data = read_json_file(path)
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {name}: {_safe(str(exc))}") from None
    try:
        return msgspec.convert(data, _Pipeline)
    except msgspec.ValidationError as exc:
        raise SpecError(
            f"{name} is not a LeRobot processor pipeline (an object with a 'steps' list of step objects): {_safe(str(exc))}"
        ) from None


def _check_step(root: Path, where: str, entry: dict[str, Any], registry: Collection[str]) -> None:
    try:
        step = msgspec.convert(entry, _Step)
    except msgspec.ValidationError as exc:
        raise SpecError(
            f"{where}: not a LeRobot processor step (registry_name, class, config, state_file): {_safe(str(exc))}"
        ) from None
    if step.class_path is not None and not step.class_path.startswith(LEROBOT_CLASSES):
        raise SpecError(
            f"{where}: class {_shown(step.class_path)} is not LeRobot's; a checkpoint names no code, "
            f"its steps come from LeRobot's processor registry"
        )
    if step.registry_name is None:
        raise SpecError(
            f"{where}: no registry_name; LeRobot would import its class path and call it, and a checkpoint "
            f"names no code: its steps come from LeRobot's processor registry"
        )
    if step.registry_name not in registry:
        raise SpecError(
            f"{where}: {_shown(step.registry_name)} is not a step of LeRobot {LEROBOT_VERSION}'s processor registry"
        )
    if step.state_file is not msgspec.UNSET:
        _check_state_file(root, where, step.state_file)


def _check_state_file(root: Path, where: str, state_file: str) -> None:
    """A state file is a regular file inside the checkpoint directory, named by a relative path
    without ``..``, its links followed; LeRobot would read it wherever the path leads."""
    shown = _shown(state_file)
    relative = PurePosixPath(state_file)
    if not state_file or "\0" in state_file or relative.is_absolute() or ".." in relative.parts:
        raise SpecError(f"{where}: state_file {shown} is not a file name inside the checkpoint directory")
    path = root / relative
    if not _inside(root, path):
        raise SpecError(
            f"{where}: state_file {shown} leads outside the checkpoint directory through a link; {_COPY_ADVICE}"
        )
    if not _regular_file(path):
        raise SpecError(f"{where}: state_file {shown} is not a file in the checkpoint directory")


_COPY_ADVICE = "copy the checkpoint with its links followed (cp -rL) to use it"
"""A snapshot in the hub cache links its files into the cache's blobs; a copy holds them itself."""


def _inside(root: Path, path: Path) -> bool:
    """Whether ``path``, its links followed, stays in ``root`` (itself resolved)."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a loop of links, a name too long
        return False


def _regular_file(path: Path) -> bool:
    """``is_file``, false where the name cannot even be looked up (too long)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _step_name(entry: Any) -> str:
    """What a step calls itself, for a message: its registry name, else its class path."""
    if isinstance(entry, dict):
        for key in ("registry_name", "class"):
            if isinstance(entry.get(key), str):
                return _shown(entry[key])
    return "unnamed"


def _shown(text: str) -> str:
    """A value from the file, quoted, cut short, safe for a terminal."""
    return terminal_safe(repr(_cut(text)))


def _safe(message: str) -> str:
    """A parser's message (which may quote the file), cut short, safe for a terminal."""
    return terminal_safe(_cut(message))


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."
