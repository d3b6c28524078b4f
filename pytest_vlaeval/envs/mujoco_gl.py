"""MuJoCo's headless GL for the MuJoCo benchmarks (LIBERO, LIBERO-PRO, Meta-World, ALOHA): the backend
``--vla-render`` picks, the renderer that backend found (recorded with every episode: images
depend on it; ``RenderedIsSuccessEnv`` records it), and a render check a preflight runs in a
throwaway process.

Imports no simulator: the backend must be chosen before mujoco is imported.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from pytest_vlaeval.envs.adapter import IsSuccessEnv, Reset
from pytest_vlaeval.envs.render import set_cache_env

GL_BACKENDS = {"auto": None, "gpu": "egl", "gpu-render": "egl", "cpu": "osmesa"}
"""``--vla-render`` -> MUJOCO_GL. ``auto`` keeps the user's MUJOCO_GL, else EGL (Mesa's llvmpipe
without a GPU); ``cpu`` forces OSMesa (software); images are identical between the two here."""


def set_gl_backend(render_request: str) -> str:
    """Choose MuJoCo's GL backend; must run before mujoco is imported. Returns MUJOCO_GL."""
    set_cache_env()
    wanted = GL_BACKENDS[render_request]
    if wanted:
        os.environ["MUJOCO_GL"] = wanted
    else:
        os.environ.setdefault("MUJOCO_GL", "egl")
    if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
        # PyOpenGL's platform must be MuJoCo's: an inherited PYOPENGL_PLATFORM=egl under
        # --vla-render=cpu (OSMesa) leaves mujoco half imported.
        os.environ["PYOPENGL_PLATFORM"] = os.environ["MUJOCO_GL"]
    return os.environ["MUJOCO_GL"]


def gl_renderer() -> str:
    """The OpenGL renderer and version of the current context (e.g. Mesa llvmpipe), for the record."""
    try:
        from OpenGL import GL

        return f"{GL.glGetString(GL.GL_RENDERER).decode()}, OpenGL {GL.glGetString(GL.GL_VERSION).decode()}"
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"


def render_problem(gl: str, install: str) -> str | None:
    """Create a MuJoCo offscreen context and render; None when it works, else one line naming the
    fix (``install``: the command that installs the benchmark, with ``--system-deps`` for Mesa)."""
    try:
        import mujoco
    except ModuleNotFoundError as exc:
        return f"MuJoCo is not installed in this interpreter ({exc}): run `{install}`"
    except Exception as exc:  # mujoco checks MUJOCO_GL as it is imported
        return (
            f"MuJoCo does not import with MUJOCO_GL={gl} ({type(exc).__name__}: {exc}): use egl or osmesa "
            f"(--vla-render=cpu is osmesa), with Mesa installed (`{install} --system-deps`)"
        )
    try:
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='1'/></worldbody></mujoco>")
        renderer = mujoco.Renderer(model, 16, 16)
        renderer.update_scene(mujoco.MjData(model))
        renderer.render()
        renderer.close()
    except Exception as exc:
        return (
            f"MuJoCo cannot render with MUJOCO_GL={gl} ({type(exc).__name__}: {exc}): install Mesa "
            f"(libegl1, libgl1-mesa-dri, libosmesa6; `{install} --system-deps` does this)"
        )
    return None


def simulator_problem(render_request: str, *, module: str, title: str, stack: str) -> str | None:
    """A MuJoCo benchmark's preflight: create an offscreen context, render, and import the simulator
    ``module``; None when both work, else one line naming the fix (``vlaeval install STACK``)."""
    gl = set_gl_backend(render_request)
    install = f"vlaeval install {stack}"
    problem = render_problem(gl, install)
    if problem:
        return problem
    try:
        importlib.import_module(module)
    except Exception as exc:
        return f"{title} does not import ({type(exc).__name__}: {exc}): run `{install}`"
    return None


def preflight_main(check: Callable[[str], str | None], argv: list[str]) -> int:
    """A benchmark's ``python -m MODULE RENDER`` preflight: prints the backend and exits 0, or
    prints ``check``'s one line and exits 1."""
    problem = check(argv[0] if argv else "auto")
    if problem:
        print(problem)
        return 1
    print(os.environ["MUJOCO_GL"])
    return 0


class RenderedIsSuccessEnv(IsSuccessEnv):
    """A MuJoCo ``IsSuccessEnv`` whose record names what rendered it: ``<MUJOCO_GL>: <GL renderer,
    version>``, read at the first reset (its context is current then)."""

    def __init__(self, env: Any, *, instruction: str, gl: str, max_episode_steps: int | None = None) -> None:
        super().__init__(env, instruction, max_episode_steps)
        self.gl = gl
        self.renderer: str | None = None

    @property
    def render_backend(self) -> str:
        return f"{self.gl}: {self.renderer or 'not rendered yet'}"

    def reset(self, *, seed: int, options: dict[str, Any]) -> Reset:
        reset = super().reset(seed=seed, options=options)
        if self.renderer is None:
            self.renderer = gl_renderer()
        return reset
