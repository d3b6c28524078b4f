"""ManiSkill 3.0.0b15 and SAPIEN on Vulkan (MIKASA's stack): GPU or software Vulkan, and the patches
that make ManiSkill run on the latter.

The CPU path uses Mesa's lavapipe and needs three runtime patches, applied once per process before
any env is built: SAPIEN's ``RenderSystem`` only finds lavapipe when called without a device, and
ManiSkill calls ``torch.cuda.synchronize()`` unconditionally after rendering.

The GPU path simulates with PhysX on the GPU, whose library SAPIEN downloads at first use (from
GitHub, into ``~/.sapien/physx/<version>/``); ``gpu-render`` keeps the simulation on the CPU and
renders on the GPU, which needs no such download.

``python -m pytest_vlaeval.envs.vulkan BACKEND`` checks, in a throwaway process, that the backend can
render at all; the plugin runs it before a session (the benchmark's ``env.preflight``) so a broken
machine fails in one line.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from pytest_vlaeval.cores import worker_threads
from pytest_vlaeval.envs.render import resolve_backend, set_cache_env

ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
NO_VULKAN_HINT = (
    "install Mesa's lavapipe >= 25 (Debian 12: mesa-vulkan-drivers from bookworm-backports; "
    "`vlaeval install mikasa --system-deps` does this) or run on a CUDA machine with --vla-render=gpu"
)

NO_CUDA_HINT = "the GPU path needs an NVIDIA GPU with its driver; use --vla-render=cpu (software Vulkan) or auto"
PHYSX_GPU_LIBRARY = "libPhysXGpu_64.so"

_patched = False


def find_lavapipe_icd() -> str | None:
    """The lavapipe ICD manifest; its file name differs between Mesa versions."""
    for directory in ICD_DIRS:
        matches = sorted(glob.glob(os.path.join(directory, "lvp_icd*.json")))
        if matches:
            return matches[0]
    return None


def set_backend_env(backend: str) -> None:
    """Point Vulkan at lavapipe for the CPU path, and Mesa's caches out of the home; must run before
    SAPIEN is imported."""
    set_cache_env()
    if backend == "cpu":
        icd = find_lavapipe_icd()
        if icd:
            os.environ.setdefault("VK_ICD_FILENAMES", icd)
        # the worker's share of the cores (``envs.cpu_share``); pixels do not depend on it
        os.environ.setdefault("LP_NUM_THREADS", str(worker_threads()))


def apply_cpu_patches() -> None:
    """Patch SAPIEN and torch for software rendering (idempotent, CPU path only)."""
    global _patched
    if _patched:
        return
    import sapien.render
    import torch

    device_render_system = sapien.render.RenderSystem

    class DefaultDeviceRenderSystem(device_render_system):
        """Drops the device argument: on lavapipe only the no-argument form finds a device."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__()

    sapien.render.RenderSystem = DefaultDeviceRenderSystem
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *args, **kwargs: None
    _patched = True


def make_kwargs(backend: str) -> dict[str, str]:
    """``gym.make`` arguments that select the simulation and render devices."""
    if backend == "gpu-render":
        return {"sim_backend": "cpu", "render_backend": "gpu"}
    return {"sim_backend": backend, "render_backend": backend}


def physx_gpu_problem() -> str | None:
    """None when SAPIEN's PhysX GPU library is in place or can be fetched now, else one actionable line."""
    import sapien.physx

    folder = Path.home() / ".sapien" / "physx" / sapien.physx.version()
    if (folder / PHYSX_GPU_LIBRARY).is_file():
        return None
    try:
        sapien.physx.enable_gpu()  # downloads it where GitHub is reachable
    except Exception as exc:
        return (
            f"SAPIEN's PhysX GPU library {folder / PHYSX_GPU_LIBRARY} is missing and could not be fetched "
            f"({type(exc).__name__}): unzip the release asset linux-so.zip of sapien-sim/physx-precompiled, tag "
            f"{sapien.physx.version()}, into {folder}, or simulate on the CPU with --vla-render=gpu-render"
        )
    return None


def check(backend: str) -> str | None:
    """Try to create a render system; None when it works, else one actionable line."""
    if backend == "cpu":
        if find_lavapipe_icd() is None and "VK_ICD_FILENAMES" not in os.environ:
            return f"no software Vulkan driver (lavapipe ICD) in {', '.join(ICD_DIRS)}: {NO_VULKAN_HINT}"
        apply_cpu_patches()
    import sapien.render

    try:
        sapien.render.RenderSystem() if backend == "cpu" else sapien.render.RenderSystem("cuda")
    except Exception as exc:
        hint = NO_VULKAN_HINT if backend == "cpu" else NO_CUDA_HINT
        return f"no usable Vulkan device for --vla-render={backend} ({type(exc).__name__}: {exc}): {hint}"
    return physx_gpu_problem() if backend == "gpu" else None


def main(argv: list[str]) -> int:
    backend = resolve_backend(argv[0] if argv else "auto")
    set_backend_env(backend)
    problem = check(backend)
    if problem:
        print(problem)
        return 1
    print(backend)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
