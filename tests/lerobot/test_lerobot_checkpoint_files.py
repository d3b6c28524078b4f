"""A LeRobot checkpoint's processor files are data: every step a name in LeRobot's processor
registry (a ``class`` beside it only under ``lerobot.``), every state file a file inside the
checkpoint directory, or the session stops in one line naming the file and the step, before any
interpreter or server starts; the policy server checks them again in LeRobot's interpreter.

LeRobot's loader imports a step's ``class`` and calls it with the step's ``config``: the crafted
checkpoints here are LeRobot's own (``lerobot_checkpoints``, built in its interpreter) with one
entry changed, so without these checks LeRobot would run what they name. Those tests need
``vlaeval install lerobot``; they fail, never skip, without it. The property tests read generated
files without LeRobot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_one_line_usage_error
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lerobot_reference import lerobot_python, pusht_act_checkpoint  # noqa: F401
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.install.stacks import stacks
from pytest_vlaeval.lerobot.processor_files import (
    LEROBOT_STEPS,
    LEROBOT_VERSION,
    MAX_JSON_BYTES,
    PROCESSOR_FILES,
    check_processor_files,
    read_json_file,
)
from pytest_vlaeval.strict_json import dumps

PREPROCESSOR, POSTPROCESSOR = PROCESSOR_FILES
POSTPROCESSOR_STATE = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
"""The unnormaliser's statistics in the ACT checkpoint LeRobot writes for Push-T."""

ESC = "\x1b"


def crafted(source: Path, directory: Path, change: Callable[[Path], None]) -> Path:
    """A copy of the checkpoint ``source`` (its files hard-linked, the processor files rewritten)
    at ``directory``, then ``change(directory)``."""
    shutil.copytree(source, directory, copy_function=os.link, ignore=shutil.ignore_patterns(*PROCESSOR_FILES))
    for name in PROCESSOR_FILES:
        shutil.copyfile(source / name, directory / name)
    change(directory)
    return directory


def edit(name: str, change: Callable[[list[dict[str, Any]]], None]) -> Callable[[Path], None]:
    """A change to the steps of the processor file ``name``."""

    def edited(directory: Path) -> None:
        pipeline = json.loads((directory / name).read_text())
        change(pipeline["steps"])
        (directory / name).write_text(json.dumps(pipeline))

    return edited


def set_state_file(path: str | Callable[[Path], str]) -> Callable[[Path], None]:
    """The post-processor's unnormaliser reads its state from ``path`` (a text, or made from the
    checkpoint directory), where a file of the right contents lies."""

    def changed(directory: Path) -> None:
        state_file = path(directory) if callable(path) else path
        target = directory / state_file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(directory / POSTPROCESSOR_STATE, target)
        edit(POSTPROCESSOR, lambda steps: steps[0].update(state_file=state_file))(directory)

    return changed


def linked_out(directory: Path) -> None:
    """The unnormaliser's state file is a link to a copy outside the checkpoint."""
    outside = directory.parent / "outside.safetensors"
    shutil.copyfile(directory / POSTPROCESSOR_STATE, outside)
    (directory / POSTPROCESSOR_STATE).unlink()
    (directory / POSTPROCESSOR_STATE).symlink_to(outside)


REFUSED = {
    "an unregistered step": (
        edit(PREPROCESSOR, lambda steps: steps[1].update(registry_name="my_step")),
        f"{PREPROCESSOR} step 1 ('my_step'): 'my_step' is not a step of LeRobot {LEROBOT_VERSION}'s processor registry",
    ),
    "a class path under lerobot": (
        edit(POSTPROCESSOR, lambda steps: steps.append({"class": "lerobot.processor.pipeline.hf_hub_download"})),
        f"{POSTPROCESSOR} step 2 ('lerobot.processor.pipeline.hf_hub_download'): no registry_name;",
    ),
    "a foreign class beside a registry name": (
        edit(PREPROCESSOR, lambda steps: steps[2].update({"class": "os.system"})),
        f"{PREPROCESSOR} step 2 ('device_processor'): class 'os.system' is not LeRobot's",
    ),
    "a missing state file": (
        lambda directory: (directory / POSTPROCESSOR_STATE).unlink(),
        f"{POSTPROCESSOR} step 0 ('unnormalizer_processor'): state_file '{POSTPROCESSOR_STATE}' is not a file in the checkpoint directory",
    ),
    "a state file up the tree": (
        set_state_file("../up.safetensors"),
        f"{POSTPROCESSOR} step 0 ('unnormalizer_processor'): state_file '../up.safetensors' is not a file name inside the checkpoint directory",
    ),
    "an absolute state file": (
        set_state_file(lambda directory: str(directory.parent / "absolute.safetensors")),
        "step 0 ('unnormalizer_processor'): state_file '/",
    ),
    "a state file linked out": (
        linked_out,
        f"{POSTPROCESSOR} step 0 ('unnormalizer_processor'): state_file '{POSTPROCESSOR_STATE}' leads outside the checkpoint directory through a link",
    ),
    "a processor file that is no pipeline": (
        lambda directory: (directory / PREPROCESSOR).write_text(json.dumps({"steps": {"class": "subprocess.Popen"}})),
        f"{PREPROCESSOR} is not a LeRobot processor pipeline (an object with a 'steps' list of step objects)",
    ),
}


@pytest.mark.lerobot
def test_a_step_naming_a_command_is_refused_before_anything_runs(
    pytester: pytest.Pytester,
    pusht_act_checkpoint: Path,  # noqa: F811
) -> None:
    """``{"class": "subprocess.Popen", "config": {"args": [...]}}``, which LeRobot's loader would
    call: the session stops in one line, no server starts, and the command never runs."""
    marker = pytester.path / "MARKER"
    popen = {"class": "subprocess.Popen", "config": {"args": ["sh", "-c", f"touch {marker}"]}}
    path = crafted(pusht_act_checkpoint, pytester.path / "c", edit(PREPROCESSOR, lambda steps: steps.insert(0, popen)))
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(
        result, f"{PREPROCESSOR} step 0 ('subprocess.Popen'): class 'subprocess.Popen' is not LeRobot's"
    )
    assert not marker.exists()
    assert not (pytester.path / "results").exists()  # no run claimed, no server log


@pytest.mark.lerobot
@pytest.mark.parametrize(("change", "expected"), REFUSED.values(), ids=REFUSED.keys())
def test_a_crafted_lerobot_checkpoint_is_one_line_before_any_episode(
    pytester: pytest.Pytester,
    pusht_act_checkpoint: Path,  # noqa: F811
    change: Callable[[Path], None],
    expected: str,
) -> None:
    path = crafted(pusht_act_checkpoint, pytester.path / "c", change)
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, f"--policy 'lerobot:{path}': ")
    assert_one_line_usage_error(result, expected)


@pytest.mark.lerobot
def test_the_policy_server_checks_the_files_again_in_lerobots_interpreter(
    tmp_path: Path,
    pusht_act_checkpoint: Path,  # noqa: F811
) -> None:
    """``vlaeval serve --policy lerobot:DIR`` checks no checkpoint before it loads one: LeRobot's
    interpreter checks the files against its live registry, and the command never runs."""
    marker = tmp_path / "MARKER"
    popen = {"class": "subprocess.Popen", "config": {"args": ["sh", "-c", f"touch {marker}"]}}
    path = crafted(pusht_act_checkpoint, tmp_path / "c", edit(PREPROCESSOR, lambda steps: steps.insert(0, popen)))
    command = [str(lerobot_python()), "-m", "pytest_vlaeval", "serve", "--policy", f"lerobot:{path}"]
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run(
        [*command, "--env-type", "pusht", "--port", "0"],
        cwd=tmp_path,
        env={**environ, "HF_HUB_OFFLINE": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    expected = f"{PREPROCESSOR} step 0 ('subprocess.Popen'): class 'subprocess.Popen' is not LeRobot's"
    (line,) = [line for line in proc.stderr.splitlines() if "cannot load policy" in line]
    assert expected in line, proc.stderr
    assert not marker.exists()


@pytest.mark.lerobot
def test_the_registry_written_down_is_the_installed_lerobots() -> None:
    """``LEROBOT_STEPS`` is LeRobot's registry as ``make_pre_post_processors`` finds it: asked of
    LeRobot itself, in its interpreter, at the version the install pins."""
    ask = (
        "import importlib.metadata, json\n"
        "import lerobot.policies.factory\n"
        "from lerobot.processor import ProcessorStepRegistry\n"
        "print(json.dumps([importlib.metadata.version('lerobot'), sorted(ProcessorStepRegistry.list())]))\n"
    )
    proc = subprocess.run([str(lerobot_python()), "-c", ask], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    version, registry = json.loads(proc.stdout.splitlines()[-1])
    assert version == LEROBOT_VERSION
    assert sorted(LEROBOT_STEPS) == registry


def test_the_registry_is_written_down_for_the_lerobot_the_install_pins() -> None:
    (pin,) = stacks()["lerobot"].pins("lerobot")
    assert Requirement(pin).specifier == SpecifierSet(f"=={LEROBOT_VERSION}")


@pytest.mark.lerobot
def test_lerobots_own_processor_files_are_accepted(pusht_act_checkpoint: Path) -> None:  # noqa: F811
    check_processor_files(pusht_act_checkpoint, LEROBOT_STEPS)


# Processor files as LeRobot 0.6.1 writes them for an ACT policy (its features cut short).
PIPELINES = {
    PREPROCESSOR: {
        "name": "policy_preprocessor",
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
            {
                "registry_name": "normalizer_processor",
                "config": {"eps": 1e-08, "features": {}, "norm_map": {"STATE": "MEAN_STD"}},
                "state_file": "policy_preprocessor_step_3_normalizer_processor.safetensors",
            },
        ],
    },
    POSTPROCESSOR: {
        "name": "policy_postprocessor",
        "steps": [
            {
                "registry_name": "unnormalizer_processor",
                "config": {"eps": 1e-08, "features": {}, "norm_map": {"ACTION": "MEAN_STD"}},
                "state_file": POSTPROCESSOR_STATE,
            },
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    },
}
STATE_FILES = [
    step["state_file"] for pipeline in PIPELINES.values() for step in pipeline["steps"] if "state_file" in step
]
LINK_OUT = "linked_out.safetensors"


def processor_files(directory: Path) -> Path:
    """A checkpoint directory holding what the processor check reads: both files as LeRobot
    writes them, their state files, and a state file that is a link out of it."""
    directory.mkdir()
    for name, pipeline in PIPELINES.items():
        (directory / name).write_text(json.dumps(pipeline))
    for state_file in STATE_FILES:
        (directory / state_file).write_bytes(b"state")
    (directory.parent / "outside.safetensors").write_bytes(b"state")
    (directory / LINK_OUT).symlink_to(directory.parent / "outside.safetensors")
    return directory


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("[]", f"{PREPROCESSOR} is not a LeRobot processor pipeline"),
        ('{"name": "p"}', "Object missing required field `steps`"),
        ('{"steps": [1]}', "Expected `object`, got `int` - at `$.steps[0]`"),
        ('{"steps": [], "run": "x"}', "Object contains unknown field `run`"),
        ("[" * 100_000, f"cannot read {PREPROCESSOR}: nested deeper than 64 levels"),
        ('{"steps": [NaN]}', f"cannot read {PREPROCESSOR}: NaN is not JSON"),
        (" " * MAX_JSON_BYTES + "{}", f"cannot read {PREPROCESSOR}: larger than 1 MiB"),
        (
            '{"steps": [{"registry_name": "device_processor", "config": [1]}]}',
            f"{PREPROCESSOR} step 0 ('device_processor'): not a LeRobot processor step (registry_name, class, config, "
            "state_file): Expected `object`, got `array` - at `$.config`",
        ),
        (
            '{"steps": [{"registry_name": "device_processor", "code": "x"}]}',
            "step 0 ('device_processor'): not a LeRobot processor step",
        ),
        ('{"steps": [{"config": {}}]}', f"{PREPROCESSOR} step 0 (unnamed): no registry_name"),
        (
            json.dumps({"steps": [{"registry_name": f"{ESC}]0;owned\a"}]}),
            "step 0 ('\\x1b]0;owned\\x07'): '\\x1b]0;owned\\x07' is not a step of LeRobot",
        ),
        (json.dumps({"steps": [{"registry_name": "x" * 10_000}]}), "step 0 ('" + "x" * 120 + "...')"),
    ],
    ids=[
        "a list",
        "no steps",
        "a step that is no object",
        "an unknown key",
        "deep",
        "NaN",
        "over 1 MiB",
        "config not an object",
        "an unknown step key",
        "unnamed",
        "control characters",
        "a long name",
    ],
)
def test_a_processor_file_that_is_no_pipeline_of_lerobot_steps_is_one_line(
    tmp_path: Path, content: str, expected: str
) -> None:
    directory = processor_files(tmp_path / "c")
    (directory / PREPROCESSOR).write_text(content)
    with pytest.raises(SpecError) as refused:
        check_processor_files(directory, LEROBOT_STEPS)
    message = str(refused.value)
    assert "\n" not in message and ESC not in message and len(message) < 500, message
    assert expected in message, message


def test_a_processor_file_linked_out_of_the_checkpoint_is_refused(tmp_path: Path) -> None:
    directory = processor_files(tmp_path / "c")
    outside = tmp_path / "elsewhere.json"
    (directory / POSTPROCESSOR).rename(outside)
    (directory / POSTPROCESSOR).symlink_to(outside)
    with pytest.raises(SpecError, match=f"^{POSTPROCESSOR} leads outside the checkpoint directory through a link"):
        check_processor_files(directory, LEROBOT_STEPS)


STEP_KEYS = ["registry_name", "class", "config", "state_file", "code"]
NAMES = st.sampled_from(sorted(LEROBOT_STEPS)) | st.text(max_size=12)
CLASSES = st.sampled_from(["lerobot.processor.NormalizerProcessorStep", "subprocess.Popen", "lerobot", ""]) | st.text(
    max_size=12
)
STATE_PATHS = st.sampled_from(
    [*STATE_FILES, LINK_OUT, "../outside.safetensors", "/etc/passwd", "", ".", "a\0b", "x" * 300, "missing.safetensors"]
) | st.text(max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
VALUES = {
    "registry_name": NAMES,
    "class": CLASSES,
    "config": JSON_VALUES,
    "state_file": STATE_PATHS,
    "code": JSON_VALUES,
}


@st.composite
def steps(draw: st.DrawFn) -> Any:
    """A step entry near LeRobot's: some of its keys (and an unknown one), each a likely value or
    any JSON; sometimes not an object at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON_VALUES)
    keys = draw(st.lists(st.sampled_from(STEP_KEYS), unique=True, max_size=4))
    return {key: draw(VALUES[key] | JSON_VALUES) for key in keys}


PIPELINE_FILES = st.binary(max_size=200) | st.one_of(
    JSON_VALUES,
    st.builds(lambda name, entries: {"name": name, "steps": entries}, NAMES, st.lists(steps(), max_size=4)),
    st.lists(steps(), max_size=4).map(lambda entries: {"steps": entries}),
).map(lambda value: dumps(value).encode())
"""Bytes, JSON of any shape, and pipelines of near-LeRobot steps."""


def accepted_steps_are_lerobots(directory: Path, files: dict[str, bytes]) -> None:
    """What a check that accepts guarantees, from the file's own text: each step a name in the
    registry, no class but LeRobot's, each state file a regular file inside the directory."""
    root = directory.resolve()
    for name in files:
        for step in json.loads((directory / name).read_text())["steps"]:
            assert step["registry_name"] in LEROBOT_STEPS
            assert step.get("class") is None or step["class"].startswith("lerobot.")
            if "state_file" in step:
                state = (directory / step["state_file"]).resolve()
                assert state.is_relative_to(root) and state.is_file(), step["state_file"]


def test_any_processor_files_are_accepted_as_lerobot_steps_or_refused_in_one_line() -> None:
    """Generated pre- and post-processor files: the check accepts only steps LeRobot's registry
    names, with state files inside the checkpoint, and refuses anything else in one line naming
    the file; never a traceback."""
    with tempfile.TemporaryDirectory() as temporary:
        directory = processor_files(Path(temporary) / "c")

        @settings(max_examples=300, deadline=None)
        @given(files=st.dictionaries(st.sampled_from(PROCESSOR_FILES), PIPELINE_FILES, min_size=1))
        @example(files={PREPROCESSOR: json.dumps({"steps": [{"class": "subprocess.Popen", "config": {}}]}).encode()})
        @example(
            files={
                POSTPROCESSOR: json.dumps(
                    {"steps": [{"registry_name": "device_processor", "state_file": LINK_OUT}]}
                ).encode()
            }
        )
        @example(files={PREPROCESSOR: ("[" * 100_000).encode()})
        def check(files: dict[str, bytes]) -> None:
            for name, pipeline in PIPELINES.items():
                (directory / name).write_bytes(files.get(name, json.dumps(pipeline).encode()))
            try:
                check_processor_files(directory, LEROBOT_STEPS)
            except SpecError as exc:
                message = str(exc)
                assert "\n" not in message and ESC not in message and len(message) < 1000, message
                assert message.startswith((*PROCESSOR_FILES, *(f"cannot read {name}" for name in PROCESSOR_FILES))), (
                    message
                )
            else:
                accepted_steps_are_lerobots(directory, files)

        check()


def test_a_checkpoint_file_that_is_a_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """A FIFO named ``config.json`` (or one swapped in after a look at the name) is refused from the
    open descriptor; a blocking open would wait for a writer forever."""
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ValueError, match=r"^not a regular file$"):
        read_json_file(tmp_path / "config.json")
