"""``--policy=lerobot:PATH`` and ``--vla-serve-python`` in real pytest sessions: what is refused
before any episode (in one line), and a served policy running in another interpreter."""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import (
    assert_one_line_usage_error,
    episode_records,
    make_interpreter,
    make_interpreter_with_own_copy,
    package_copy,
    run_dir,
)

from pytest_vlaeval.benchmark.model import resolve_benchmark
from pytest_vlaeval.lerobot import policy as policy_module
from pytest_vlaeval.lerobot.checkpoint import CHECKPOINT_FILES, LeRobotCheckpoint
from pytest_vlaeval.policy.loading import parse_local_policy, parse_policy
from pytest_vlaeval.policy.sources import Given
from pytest_vlaeval.serving.command import configure as serve_options

FAKE = ("--benchmark=fake.yaml:short", "-p", "no:cacheprovider")


def checkpoint(directory: Path, input_features: dict | None = None, leave_out: tuple[str, ...] = ()) -> Path:
    """A directory with a LeRobot checkpoint's files (no real weights, empty processor pipelines:
    the checks read config.json and the processor files)."""
    directory.mkdir()
    features = input_features or {
        "observation.image": {"type": "VISUAL", "shape": [3, 96, 96]},
        "observation.state": {"type": "STATE", "shape": [2]},
    }
    for name in CHECKPOINT_FILES:
        if name not in leave_out:
            (directory / name).write_text(json.dumps({"name": Path(name).stem, "steps": []}))
    if "config.json" not in leave_out:
        (directory / "config.json").write_text(json.dumps({"type": "act", "input_features": features}))
    return directory


def with_preprocessor_step(directory: Path, step: dict) -> Path:
    """``directory`` whose pre-processor pipeline is the one ``step``."""
    (directory / "policy_preprocessor.json").write_text(json.dumps({"name": "policy_preprocessor", "steps": [step]}))
    return directory


def test_a_lerobot_spec_parses_to_its_checkpoint_and_the_benchmarks_env() -> None:
    """The prefix is registered where ``vlaeval serve`` (imported above) and a session start."""
    spec = parse_policy("lerobot:~/ckpt")
    assert isinstance(spec, LeRobotCheckpoint) and spec.path == Path("~/ckpt").expanduser().resolve()
    assert spec.text == f"lerobot:{spec.path}"
    assert spec.interpreter == "lerobot"
    aloha = parse_local_policy("lerobot:/ckpt", benchmark=resolve_benchmark("aloha")[0])
    assert isinstance(aloha, LeRobotCheckpoint) and aloha.env_type == "aloha"


@pytest.mark.parametrize(
    ("text", "benchmark", "server_args"),
    [
        ("lerobot:/ckpt", "pusht", ("--env-type", "pusht")),
        ("lerobot:/ckpt:batched", "pusht", ("--env-type", "pusht")),
        ("lerobot:/ckpt:unbatched", "pusht", ("--env-type", "pusht")),
        ("lerobot:/ckpt", "lerobot-libero", ("--env-type", "libero")),
        ("lerobot:/ckpt", "libero", ()),
        ("zero", "pusht", ()),
        ("m:f", "pusht", ()),
    ],
)
def test_a_served_spec_is_rebuilt_by_vlaeval_serve_from_its_own_arguments(
    text: str, benchmark: str, server_args: tuple[str, ...]
) -> None:
    """The session's server gets the spec's text and ``server_args`` (the launcher knows no kind of
    spec), and ``vlaeval serve`` parses them back into the same spec."""
    spec = parse_local_policy(text, "--vla-serve", resolve_benchmark(benchmark)[0])
    assert (spec.server_args, spec.option) == (server_args, "--vla-serve")
    parser = argparse.ArgumentParser()
    serve_options(parser)
    args = parser.parse_args(["--policy", spec.text, *spec.server_args])
    assert parse_local_policy(args.policy, env_type=args.env_type) == spec


@pytest.mark.parametrize(
    ("text", "path", "batched"),
    [
        ("lerobot:/ckpt", "/ckpt", None),
        ("lerobot:/ckpt:batched", "/ckpt", True),
        ("lerobot:/ckpt:unbatched", "/ckpt", False),
        ("lerobot:/runs/a:b", "/runs/a:b", None),  # a colon of the path is the path's
    ],
)
def test_batched_inference_is_asked_for_after_the_checkpoints_path(text: str, path: str, batched: bool | None) -> None:
    spec = parse_local_policy(text, benchmark=resolve_benchmark("pusht")[0])
    assert isinstance(spec, LeRobotCheckpoint)
    assert (spec.path, spec.batched, spec.text, spec.identity) == (Path(path), batched, text, text)


def test_batched_inference_for_a_type_it_does_not_serve_is_one_line_before_any_episode(
    pytester: pytest.Pytester,
) -> None:
    path = checkpoint(pytester.path / "c")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "type": "vqbet"}))
    result = pytester.runpytest(
        "--benchmark=pusht", f"--policy=lerobot:{path}:batched", "-p", "no:cacheprovider", "--co"
    )
    assert_one_line_usage_error(result, "batched inference serves act and diffusion checkpoints, not 'vqbet'")
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider", "--co")
    assert result.ret == pytest.ExitCode.OK, "without ':batched' the same checkpoint is accepted"


def test_torch_and_lerobot_are_imported_once_at_load_never_per_step() -> None:
    """``act`` runs every step: the imports are done when the checkpoint loads, and the module
    itself imports neither (the main interpreter has no LeRobot)."""
    origin = importlib.util.find_spec("pytest_vlaeval.lerobot.policy").origin
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    importing = {
        function.name
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }
    assert importing == {"_load"}
    top = {
        ((node.module or "") if isinstance(node, ast.ImportFrom) else alias.name).partition(".")[0]
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert not top & {"torch", "lerobot"}


def test_the_installed_distributions_are_mapped_once_while_a_checkpoint_loads(monkeypatch) -> None:
    """transformers and diffusers each map every installed distribution when LeRobot imports them
    (about a second each): the load's second call reuses the first's map, and the process gets the
    function back after it (a long-lived server must not answer from a stale map)."""
    calls: list[int] = []

    def mapping() -> dict[str, list[str]]:
        calls.append(1)
        return {"lerobot": ["lerobot"]}

    monkeypatch.setattr(importlib.metadata, "packages_distributions", mapping)
    with policy_module._distributions_mapped_once():
        first = importlib.metadata.packages_distributions()
        assert importlib.metadata.packages_distributions() is first
    assert calls == [1]
    assert importlib.metadata.packages_distributions is mapping

    origin = importlib.util.find_spec("pytest_vlaeval.lerobot.policy").origin
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    (load,) = (node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "_load")
    (_docstring, imports, *_built) = load.body
    assert isinstance(imports, ast.With), "LeRobot's imports, first in the load, run inside"
    assert ast.unparse(imports.items[0].context_expr) == "_distributions_mapped_once()"
    every = {ast.unparse(node) for node in ast.walk(load) if isinstance(node, (ast.Import, ast.ImportFrom))}
    inside = {ast.unparse(node) for node in ast.walk(imports) if isinstance(node, (ast.Import, ast.ImportFrom))}
    assert "from lerobot.policies.factory import make_policy, make_pre_post_processors" in inside
    assert every == inside, "an import of the load outside the map's scope"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "absent", "no such directory (a LeRobot pretrained-model directory)"),
        (
            lambda d: checkpoint(d / "c", leave_out=("model.safetensors", "policy_postprocessor.json")),
            "is not a complete LeRobot pretrained-model directory: it lacks model.safetensors, policy_postprocessor.json",
        ),
        (
            lambda d: checkpoint(d / "c", {"observation.images.top": {"type": "VISUAL", "shape": [3, 480, 640]}}),
            "reads observation.images.top, which Push-T does not give (it gives observation.image, observation.state)",
        ),
        (
            lambda d: checkpoint(d / "c", {"observation.environment_state": {"type": "ENV", "shape": [16]}}),
            "reads observation.environment_state, which Push-T does not give",
        ),
        (
            lambda d: with_preprocessor_step(checkpoint(d / "c"), {"class": "subprocess.Popen", "config": {}}),
            "policy_preprocessor.json step 0 ('subprocess.Popen'): class 'subprocess.Popen' is not LeRobot's",
        ),
    ],
)
def test_an_unusable_checkpoint_is_one_line_before_any_episode(pytester: pytest.Pytester, make, expected: str) -> None:
    path = make(pytester.path)
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, expected)


def test_a_single_image_checkpoint_is_refused_where_the_benchmark_has_named_cameras(pytester: pytest.Pytester) -> None:
    """ALOHA's pixels are a dict of cameras (``lerobot.features``: ``pixels.top:
    observation.images.top``), so a Push-T checkpoint's ``observation.image`` is not given there."""
    path = checkpoint(pytester.path / "c")
    result = pytester.runpytest("--benchmark=aloha", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    expected = "reads observation.image, which ALOHA does not give (it gives observation.images.top, observation.state)"
    assert_one_line_usage_error(result, expected)


def test_a_checkpoint_whose_config_is_not_a_policy_config_is_refused(pytester: pytest.Pytester) -> None:
    path = checkpoint(pytester.path / "c")
    (path / "config.json").write_text(json.dumps(["not", "a", "config"]))
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "config.json is not a LeRobot policy config (no policy 'type')")


def test_a_deeply_nested_config_is_refused_in_one_line(pytester: pytest.Pytester) -> None:
    path = checkpoint(pytester.path / "c")
    (path / "config.json").write_text("[" * 100_000)  # under the size cap, past any parser's recursion
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "cannot read config.json")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"type": "act", "chunk_size": NaN}', "cannot read config.json: NaN is not JSON"),
        ('{"type": "act", "dropout": 1e999}', "config.json: the number 1e999 is beyond the range of a float"),
        ('{"type": "act"}' + " " * 2**20, "cannot read config.json: larger than 1 MiB"),
    ],
    ids=["NaN", "past the float range", "over 1 MiB"],
)
def test_a_config_json_no_strict_reader_takes_is_refused_in_one_line(
    pytester: pytest.Pytester, content: str, expected: str
) -> None:
    path = checkpoint(pytester.path / "c")
    (path / "config.json").write_text(content)
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, expected)


def test_a_checkpoint_for_another_action_size_is_refused(pytester: pytest.Pytester) -> None:
    path = checkpoint(pytester.path / "c")
    config = json.loads((path / "config.json").read_text())
    config["output_features"] = {"action": {"type": "ACTION", "shape": [4]}}  # a Meta-World checkpoint
    (path / "config.json").write_text(json.dumps(config))
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "returns actions of shape (4,), where Push-T takes (2,)")


def training_run(directory: Path) -> Path:
    """``outputs/train/RUN`` as LeRobot's training writes it: a step folder holding
    ``pretrained_model`` and ``training_state``, and ``checkpoints/last`` linking to it."""
    steps = directory / "checkpoints"
    (steps / "005000" / "training_state").mkdir(parents=True)
    checkpoint(steps / "005000" / "pretrained_model")
    (steps / "last").symlink_to("005000")
    return directory


def test_a_training_runs_checkpoint_step_names_its_pretrained_model(tmp_path: Path) -> None:
    """``checkpoints/last`` (a link to the latest step) and a step folder name the ``pretrained_model``
    they hold, which the start-up line and the record then show."""
    run = training_run(tmp_path / "outputs" / "train" / "act_pusht")
    pusht = resolve_benchmark("pusht")[0]
    model = (run / "checkpoints" / "005000" / "pretrained_model").resolve()
    for given in ("checkpoints/last", "checkpoints/005000", "checkpoints/last/pretrained_model"):
        spec = LeRobotCheckpoint.parse(f"lerobot:{run / given}", Given(benchmark=pusht))
        assert spec.path == model, given
        spec.check(pusht)


def test_a_training_runs_own_folder_is_refused_naming_its_checkpoint(pytester: pytest.Pytester) -> None:
    run = training_run(pytester.path / "act_pusht")
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{run}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(
        result, "lacks config.json, model.safetensors, policy_preprocessor.json, policy_postprocessor.json"
    )
    assert "(a training run's output: its checkpoint is lerobot:DIR/checkpoints/last)" in "\n".join(result.errlines)


def test_a_benchmark_lerobot_has_no_env_for_is_refused(fake: pytest.Pytester) -> None:
    path = checkpoint(fake.path / "c")
    result = fake.runpytest(*FAKE, f"--policy=lerobot:{path}")
    assert_one_line_usage_error(result, "Fake-Bench names no LeRobot env (lerobot.env_type in its benchmark file)")


def test_serve_python_without_a_served_policy_is_refused(fake: pytest.Pytester) -> None:
    result = fake.runpytest(*FAKE, "--policy=random", "--vla-serve-python=lerobot")
    assert_one_line_usage_error(result, "--vla-serve-python names the interpreter a served policy runs in")


def test_a_served_policy_runs_in_the_interpreter_it_names(fake: pytest.Pytester) -> None:
    python = make_interpreter(fake.path / "other-env")
    result = fake.runpytest(*FAKE, "--vla-serve=random", f"--vla-serve-python={python}", "--episodes=1")
    assert result.parseoutcomes().get("errors", 0) == 0, result.stdout.str()
    log = (run_dir(fake) / "server.log").read_text()
    assert f"at {python})\n" in log, log  # the server says which interpreter it runs in
    assert len(episode_records(run_dir(fake))) == 2


def test_a_server_interpreter_with_another_copy_of_this_package_is_refused(fake: pytest.Pytester) -> None:
    python = make_interpreter_with_own_copy(fake.path / "stale-env")
    (package_copy(fake.path / "stale-env") / "stale.py").write_text("")
    result = fake.runpytest(*FAKE, "--vla-serve=random", f"--vla-serve-python={python}", "--episodes=1")
    assert_one_line_usage_error(result, "the policy server's interpreter")
    assert "with other files (digest" in result.stdout.str() + result.stderr.str()


def test_a_missing_server_interpreter_says_how_to_make_it(fake: pytest.Pytester, monkeypatch) -> None:
    """Naming the options given: it once said ``--policy random`` for ``--vla-serve=random``."""
    monkeypatch.setenv("VLAEVAL_INTERPRETER_DIR", str(fake.path / "none-here"))
    result = fake.runpytest(*FAKE, "--vla-serve=random", "--vla-serve-python=openpi", "--episodes=1")
    assert_one_line_usage_error(
        result,
        "--vla-serve random (--vla-serve-python=openpi) runs in an interpreter of its own, and there is none at "
        f"{fake.path / 'none-here' / 'openpi'}: make a virtual env there",
    )


def test_a_server_interpreter_name_with_a_line_break_is_shown_escaped_in_one_line(
    fake: pytest.Pytester, monkeypatch
) -> None:
    monkeypatch.setenv("VLAEVAL_INTERPRETER_DIR", str(fake.path / "none-here"))
    result = fake.runpytest(*FAKE, "--vla-serve=random", "--vla-serve-python=open\npi\x1b[2J", "--episodes=1")
    assert_one_line_usage_error(result, f"there is none at {fake.path / 'none-here' / 'open'}\\x0api\\x1b[2J: ")


def test_lerobot_libero_gives_both_cameras_and_the_state_its_processor_makes(pytester: pytest.Pytester) -> None:
    """LeRobot's LIBERO env gives ``pixels`` {image, image2} and ``robot_state``, which its env
    processor flattens into ``observation.state``: a Push-T checkpoint's single image is not given."""
    path = checkpoint(pytester.path / "c")
    result = pytester.runpytest("--benchmark=lerobot-libero", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    expected = (
        "reads observation.image, which LIBERO (LeRobot) does not give "
        "(it gives observation.images.image, observation.images.image2, observation.state)"
    )
    assert_one_line_usage_error(result, expected)


def test_a_benchmark_without_a_lerobot_env_names_the_built_in_ones_with_one(pytester: pytest.Pytester) -> None:
    path = checkpoint(pytester.path / "c")
    result = pytester.runpytest("--benchmark=libero", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "LIBERO names no LeRobot env (lerobot.env_type in its benchmark file)")
    assert (
        "the built-in benchmarks that do: aloha, lerobot-libero, metaworld, pusht"
        in result.stdout.str() + result.stderr.str()
    )


def test_a_server_interpreter_that_prints_without_end_is_stopped_and_one_line(fake: pytest.Pytester) -> None:
    """The package probe kept all it said: a script running ``yes`` cost 2.8 GB in 10 s, then a
    MemoryError. Under a 1 GiB data limit the session ends in seconds with one line, and the
    script's own child is stopped with it."""
    script = fake.path / "yes.sh"
    # The child writes its pid before it execs yes, so the pid is on disk before any output: the
    # probe may stop the group as soon as yes has written 64 KiB.
    script.write_text("#!/bin/sh\nsh -c 'echo $$ > yes.pid; exec yes' &\nwait\n")
    script.chmod(0o755)
    session = [sys.executable, "-m", "pytest", *FAKE, "--vla-serve=random", f"--vla-serve-python={script}"]
    started = time.monotonic()
    try:
        result = fake.run("sh", "-c", f"ulimit -d {2**20}; exec {shlex.join(session)}", timeout=100)
        took = time.monotonic() - started
        yes = int((fake.path / "yes.pid").read_text())
        assert_one_line_usage_error(
            result,
            f"{script} did not say which pytest-vlaeval it holds (is it a Python interpreter?): "
            "it wrote over 64 KiB and was stopped, with no answer",
        )
        assert took < 30, took
        assert _gone(yes), "the script's yes outlived the probe"
    finally:  # the script's yes, where it outlived the session (as it did before the bound)
        with contextlib.suppress(OSError, ValueError):
            pid = int((fake.path / "yes.pid").read_text())
            if Path(f"/proc/{pid}/comm").read_text().strip() == "yes":
                os.kill(pid, signal.SIGKILL)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (its parent, killed, left it to be reaped by init)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def scaling_checkpoint(torch: Any, extra: dict[str, Any] | None = None) -> SimpleNamespace:
    """What ``_policy_inputs`` reads of a loaded checkpoint, with element-wise processors (uint8
    images to [0, 1]) whose output gains ``extra``."""
    from pytest_vlaeval.lerobot.policy import _Inputs

    return SimpleNamespace(
        preprocess_observation=lambda arrays: {
            key: torch.from_numpy(value) / 255 if value.dtype == np.uint8 else torch.from_numpy(value)
            for key, value in arrays.items()
        },
        env_preprocessor=lambda observation: observation,
        preprocessor=lambda observation: {**observation, **(extra or {})},
        split_checked=set(),
        inputs=_Inputs(("pixels",), frozenset(), True, "pusht", ("pixels",)),
    )


def test_a_processed_value_that_does_not_split_by_episode_fails_batched_inference() -> None:
    """Batched inference runs LeRobot's processors once on a call's episodes stacked and splits the
    output by its leading size; a value of another layout that has that size by chance is caught, at
    whatever size the batch has when it does (a lockstep block shrinks as its episodes end)."""
    torch = pytest.importorskip("torch")
    from pytest_vlaeval.errors import PolicyError
    from pytest_vlaeval.lerobot.policy import _policy_inputs

    observations = [{"pixels": np.full((2, 2), row, np.uint8), "instruction": f"task {row}"} for row in range(4)]
    element_wise = scaling_checkpoint(torch)
    rows = _policy_inputs(element_wise, observations)
    for row, obs in enumerate(observations):
        alone = _policy_inputs(element_wise, [obs])[0]
        assert torch.equal(rows[row]["pixels"], alone["pixels"])
        assert rows[row]["task"] == alone["task"] == [f"task {row}"]
    constant = scaling_checkpoint(torch, {"observation.bias": torch.zeros(3, 4)})
    assert len(_policy_inputs(constant, observations)) == 4  # size 3, not the batch's 4: passed whole
    with pytest.raises(
        PolicyError, match=r"'observation\.bias' a layout that does not split by episode \(\(3, 4\) for one"
    ):
        _policy_inputs(constant, observations[:3])


def test_rows_of_other_layouts_are_processed_as_their_own_calls() -> None:
    """A served batch may hold several clients' observations: other keys or dtypes are never dropped
    or converted by stacking them with the first row's."""
    torch = pytest.importorskip("torch")
    from pytest_vlaeval.lerobot.policy import _policy_inputs

    scaled = scaling_checkpoint(torch)
    observations = [
        {"pixels": np.full((2, 2), 255, np.uint8)},
        {"pixels": np.full((2, 2), 0.5, np.float32)},  # stacked with the first, it would become 255 * 0.5
        {"pixels": np.full((2, 2), 255, np.uint8), "agent_pos": np.ones(2, np.float32)},
        {"pixels": np.zeros((2, 2), np.uint8)},
    ]
    rows = _policy_inputs(scaled, observations)
    for row, obs in zip(rows, observations, strict=True):
        alone = _policy_inputs(scaled, [obs])[0]
        assert row.keys() == alone.keys()
        assert all(torch.equal(row[key], alone[key]) for key in row if key != "task")


@pytest.mark.parametrize("kind", ["smolvla", "act"])
def test_an_observation_short_of_a_camera_reaches_only_a_policy_that_takes_the_cameras_given(kind: str) -> None:
    """SmolVLA (as pi0, GR00T) takes the cameras an observation has, so one image of two is enough
    for it, where ACT reads each of its own; no image at all, or no state, is the observation of
    another benchmark for either: one line naming what is missing, checked before the checkpoint's
    processors (which may pack images away)."""
    from pytest_vlaeval.errors import PolicyError
    from pytest_vlaeval.lerobot.policy import _Inputs

    images = {"observation.images.top": None, "observation.images.wrist": None}
    config = SimpleNamespace(type=kind, input_features={**images, "observation.state": None}, image_features=images)
    inputs = _Inputs.of(config, "aloha", ("agent_pos",))
    one_camera = {"observation.images.top": 0, "observation.state": 0}
    if kind == "act":
        with pytest.raises(
            PolicyError, match=r"\(top, agent_pos\) gives the checkpoint no observation\.images\.wrist: its"
        ):
            inputs.check(one_camera, {"top": 0, "agent_pos": 0})
    else:
        inputs.check(one_camera, {"top": 0, "agent_pos": 0})
    with pytest.raises(
        PolicyError, match=r"\(rgb\) gives the checkpoint no observation\.images\.top, observation\.images\.wrist: its"
    ):
        inputs.check({"observation.state": 0}, {"rgb": 0})
    with pytest.raises(
        PolicyError, match=r"no observation\.state: its inputs come from LeRobot's aloha observation \(agent_pos\)"
    ):
        inputs.check({"observation.images.top": 0, "observation.images.wrist": 0}, {"top": 0})
