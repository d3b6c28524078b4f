"""``--policy=lerobot:PATH`` and ``--vla-serve-python`` in real pytest sessions: what is refused
before any episode (in one line), and a served policy running in another interpreter."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
from pathlib import Path

import pytest
from helpers import (
    assert_one_line_usage_error,
    episode_records,
    make_interpreter,
    make_interpreter_with_own_copy,
    package_copy,
    run_dir,
)

from pytest_vlaeval.policy.lerobot_checkpoint import CHECKPOINT_FILES
from pytest_vlaeval.policy.loading import LeRobotCheckpoint, parse_local_policy, parse_policy
from pytest_vlaeval.serving.command import configure as serve_options

FAKE = ("--benchmark=fake.yaml:short", "-p", "no:cacheprovider")


def checkpoint(directory: Path, input_features: dict | None = None, leave_out: tuple[str, ...] = ()) -> Path:
    """A directory with a LeRobot checkpoint's files (no real weights: the checks read config.json)."""
    directory.mkdir()
    features = input_features or {
        "observation.image": {"type": "VISUAL", "shape": [3, 96, 96]},
        "observation.state": {"type": "STATE", "shape": [2]},
    }
    for name in CHECKPOINT_FILES:
        if name not in leave_out:
            (directory / name).write_text("{}")
    if "config.json" not in leave_out:
        (directory / "config.json").write_text(json.dumps({"type": "act", "input_features": features}))
    return directory


def test_a_lerobot_spec_parses_to_its_checkpoint_and_the_benchmarks_env() -> None:
    spec = parse_policy("lerobot:~/ckpt")
    assert isinstance(spec, LeRobotCheckpoint) and spec.path == Path("~/ckpt").expanduser().resolve()
    assert spec.text == f"lerobot:{spec.path}"


@pytest.mark.parametrize(
    ("text", "env_type", "server_args"),
    [
        ("lerobot:/ckpt", "pusht", ("--env-type", "pusht")),
        ("lerobot:/ckpt", None, ()),
        ("zero", None, ()),
        ("m:f", None, ()),
    ],
)
def test_a_served_spec_is_rebuilt_by_vlaeval_serve_from_its_own_arguments(
    text: str, env_type: str | None, server_args: tuple[str, ...]
) -> None:
    """The session's server gets the spec's text and ``server_args`` (the launcher knows no kind of
    spec), and ``vlaeval serve`` parses them back into the same spec."""
    spec = parse_local_policy(text, env_type, "--vla-serve")
    assert (spec.server_args, spec.option) == (server_args, "--vla-serve")
    parser = argparse.ArgumentParser()
    serve_options(parser)
    args = parser.parse_args(["--policy", spec.text, *spec.server_args])
    assert parse_local_policy(args.policy, args.env_type) == spec


def test_torch_and_lerobot_are_imported_once_at_load_never_per_step() -> None:
    """``act`` runs every step: the imports are done when the checkpoint loads, and the module
    itself imports neither (the main interpreter has no LeRobot)."""
    origin = importlib.util.find_spec("pytest_vlaeval.policy.lerobot").origin
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
    ],
)
def test_an_unusable_checkpoint_is_one_line_before_any_episode(pytester: pytest.Pytester, make, expected: str) -> None:
    path = make(pytester.path)
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, expected)


def test_a_single_image_checkpoint_is_refused_where_the_benchmark_has_named_cameras(pytester: pytest.Pytester) -> None:
    """ALOHA's pixels are a dict of cameras (``lerobot.cameras: [top]``): LeRobot names its image
    ``observation.images.top``, so a Push-T checkpoint's ``observation.image`` is not given there."""
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


def test_a_checkpoint_for_another_action_size_is_refused(pytester: pytest.Pytester) -> None:
    path = checkpoint(pytester.path / "c")
    config = json.loads((path / "config.json").read_text())
    config["output_features"] = {"action": {"type": "ACTION", "shape": [4]}}  # a Meta-World checkpoint
    (path / "config.json").write_text(json.dumps(config))
    result = pytester.runpytest("--benchmark=pusht", f"--policy=lerobot:{path}", "-p", "no:cacheprovider")
    assert_one_line_usage_error(result, "returns actions of shape (4,), where Push-T takes (2,)")


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
    monkeypatch.setenv("VLAEVAL_INTERPRETER_DIR", str(fake.path / "none-here"))
    result = fake.runpytest(*FAKE, "--vla-serve=random", "--vla-serve-python=openpi", "--episodes=1")
    assert_one_line_usage_error(result, "runs in an interpreter of its own, and there is none at")


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
