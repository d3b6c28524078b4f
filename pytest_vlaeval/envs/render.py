"""The ``--vla-render`` resolver every benchmark shares, and where software renderers keep their
caches. What a backend means to a simulator is its adapter's business (``envs/vulkan.py``,
``envs/mujoco_gl.py``).
"""

from __future__ import annotations

import os
import tempfile

from pytest_vlaeval.choices import RENDER_BACKENDS


def resolve_backend(requested: str) -> str:
    """``auto`` -> ``gpu`` when torch sees a CUDA device, else ``cpu``."""
    if requested not in RENDER_BACKENDS:
        raise ValueError(f"--vla-render {requested!r}; valid: {', '.join(RENDER_BACKENDS)}")
    if requested != "auto":
        return requested
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def set_cache_env() -> None:
    """Keep Mesa's shader cache and matplotlib's config out of the user's home (their settings win);
    must run before the renderer starts."""
    cache_dir = os.path.join(tempfile.gettempdir(), "pytest-vlaeval-cache")
    os.environ.setdefault("XDG_CACHE_HOME", os.path.join(cache_dir, "xdg"))
    os.environ.setdefault("MPLCONFIGDIR", os.path.join(cache_dir, "matplotlib"))
