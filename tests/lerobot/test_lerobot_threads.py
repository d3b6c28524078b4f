"""A worker beside the env runs torch on its share of the cores (``lerobot.threads``) and its actions
stay those of torch's default thread count, bit for bit: the modules that round differently on the
share run on the default count.

The random-init ACT and Diffusion checkpoints of ``lerobot_checkpoints``, three episodes of 21 steps
on observations that differ at every step (ACT predicts chunks at steps 0 and 20, Diffusion at 0, 8
and 16), each in a process of LeRobot's interpreter: as a serial session's (torch's default count),
as one of N workers on N cores (a share of one thread, every leaf after the first pass on it but
those inside a pinned module), and, for Diffusion, as such a worker whose leaves all seem to compute
alike on one thread: its check passes then find the module that rounds differently themselves (the
first given the same inputs to return another output) and pin it; and as one where they cannot
either, so that nothing is pinned: its check pass differs (the count moves Diffusion's actions on
this machine) and it keeps torch's default count, its actions the serial ones. These need
``vlaeval install lerobot``; they fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from lerobot_reference import lerobot_python, pusht_act_checkpoint, pusht_diffusion_checkpoint  # noqa: F401

pytestmark = pytest.mark.lerobot

ACTIONS = """
import json, sys
import numpy as np
import torch
from pytest_vlaeval.lerobot.policy import LeRobotPolicy, _load
from pytest_vlaeval.lerobot import threads
from pytest_vlaeval.policy.contract import EpisodeInfo

path = sys.argv[1]
if sys.argv[2] != "planned":  # every leaf seems to compute alike on the share
    threads._differs = lambda *args: False
if sys.argv[2] == "unpinnable":  # and no check pass shows which module does not: nothing is pinned
    threads._first_own_difference = lambda *args: None
default = torch.get_num_threads()
loaded = _load(path, "pusht")
policy = LeRobotPolicy(path, "pusht")
actions, ran_on, names = [], set(), {}

def leaf_ran(module, args, output):  # after the first pass; a global hook runs before a pin's leave
    if sum(map(len, actions)) and threads._is_leaf(module) and module in names:
        ran_on.add((names[module], torch.get_num_threads()))

torch.nn.modules.module.register_module_forward_hook(leaf_ran)
for seed in (1202, 1203, 1204):
    policy.reset(EpisodeInfo("PushT-v0", seed, "", 0, 300))
    names = {module: name for name, module in policy._policy.named_modules()}
    views = [{"pixels": np.full((96, 96, 3), (seed * 7 + step * 37) % 256, np.uint8),
              "agent_pos": np.array([100.0 + step, 300.0 - seed % 50]), "instruction": ""} for step in range(21)]
    actions.append([])
    for view in views:
        actions[-1].append(policy.act(view).tolist())
plan = loaded.threads.plan
print(json.dumps({"actions": actions, "default": default, "threads": torch.get_num_threads(),
                  "plan": plan and {"share": plan.share, "pinned": list(plan.pinned)}, "ran_on": sorted(ran_on)}))
"""


def run(checkpoint: Path, workers: int, check: str = "planned") -> dict:
    """The script in LeRobot's interpreter as one of ``workers`` xdist workers (1: a serial session),
    its check as is (``planned``), finding pins by check passes alone (``refined``) or not at all."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "OMP_NUM_THREADS") and not key.startswith("PYTEST_XDIST_")
    }
    if workers > 1:
        environ["PYTEST_XDIST_WORKER_COUNT"] = str(workers)
    proc = subprocess.run(
        [str(lerobot_python()), "-c", ACTIONS, str(checkpoint), check],
        env={**environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_worker_on_its_share_of_the_cores_acts_as_on_torchs_default_count(
    pusht_act_checkpoint: Path,  # noqa: F811
    pusht_diffusion_checkpoint: Path,  # noqa: F811
) -> None:
    cores = len(os.sched_getaffinity(0))
    assert cores >= 2, "one core: a worker's share is torch's default count, nothing to check"
    checkpoints = {"act": pusht_act_checkpoint, "diffusion": pusht_diffusion_checkpoint}
    runs = [(name, workers, "planned") for name in checkpoints for workers in (1, cores)]
    runs += [("diffusion", cores, "refined"), ("diffusion", cores, "unpinnable")]
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(runs, pool.map(lambda r: run(checkpoints[r[0]], r[1], r[2]), runs), strict=True))
    for name in checkpoints:
        serial, worker = results[(name, 1, "planned")], results[(name, cores, "planned")]
        assert serial["plan"] is None and serial["threads"] == serial["default"] == cores, name
        assert worker["plan"] is not None and worker["plan"]["share"] == 1 and worker["threads"] == 1, (name, worker)
        # After the first pass every leaf ran on the share but those in a pinned module, to the last pass.
        pinned = worker["plan"]["pinned"]
        off_share = {leaf for leaf, threads in worker["ran_on"] if threads != 1}
        unpinned = {leaf for leaf in off_share if not any(leaf == p or leaf.startswith(f"{p}.") for p in pinned)}
        assert not unpinned, f"{name}: on the default count: {sorted(unpinned)[:5]}"
        assert any(threads == 1 for _, threads in worker["ran_on"]), f"{name}: no pass on the share"
        assert np.array_equal(np.array(worker["actions"]), np.array(serial["actions"])), f"{name}: bit for bit"
    planned, serial = results[("diffusion", cores, "planned")], results[("diffusion", 1, "planned")]
    assert planned["plan"]["pinned"], "Diffusion's pinned modules"
    refined = results[("diffusion", cores, "refined")]
    assert refined["plan"] == planned["plan"], "the check passes pin what the leaves' check did"
    assert np.array_equal(np.array(refined["actions"]), np.array(serial["actions"])), "refined: bit for bit"
    unpinnable = results[("diffusion", cores, "unpinnable")]
    assert unpinnable["plan"] is None and unpinnable["threads"] == cores, "one thread, nothing pinned: refused"
    assert np.array_equal(np.array(unpinnable["actions"]), np.array(serial["actions"])), "the default count's actions"


def test_a_pinned_module_runs_on_the_default_count_and_another_layout_all_of_its_pass() -> None:
    """``ThreadPlan`` on a small torch model, in this interpreter: on the checked layout the pinned
    module runs on the default count and the rest on the share; on another, every module runs on
    the default count (a pinned module's exit gives back the count it found)."""
    import torch

    from pytest_vlaeval.lerobot.threads import ThreadPlan, observation_layout

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    seen: list[tuple[str, int]] = []
    for name, module in model.named_children():
        module.register_forward_hook(
            lambda module, args, output, name=name: seen.append((name, torch.get_num_threads()))
        )
    checked = {"observation.state": torch.zeros(1, 4)}
    plan = ThreadPlan(share=1, default=2, pinned=("0",), layout=observation_layout(checked))
    plan.pin(model)
    before = torch.get_num_threads()
    torch.set_num_threads(plan.share)
    try:
        passes = {}
        for name, observation in (("checked", checked), ("other", {"observation.state": torch.zeros(2, 4)})):
            seen.clear()
            with plan.running(observation), torch.no_grad():
                model(observation["observation.state"])
            passes[name] = (list(seen), torch.get_num_threads())
    finally:
        torch.set_num_threads(before)
    assert passes["checked"] == ([("0", 2), ("1", 1), ("2", 1)], 1)
    assert passes["other"] == ([("0", 2), ("1", 2), ("2", 2)], 1)


def test_the_check_pins_a_module_that_rounds_outside_its_children_and_keeps_the_layout_it_was_given() -> None:
    """``first_pass`` on a small torch policy, in this interpreter: its attention-like module adds a
    term computed from its own weight (not through its child), which here moves by the thread count
    as a kernel's rounding would. No leaf differs on the share, so only the check passes can find it:
    the plan pins that module, and its layout is the observation's as given, before
    ``select_action`` popped its ``action`` (as Diffusion's does)."""
    import copy

    import torch

    from pytest_vlaeval.lerobot.threads import first_pass, observation_layout

    class OwnArithmetic(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.weight = torch.nn.Parameter(torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            own = x * self.weight + (1e-3 if torch.get_num_threads() == 1 else 0.0)  # "rounds" by the count
            return self.proj(own)

    class Policy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = OwnArithmetic()
            self.head = torch.nn.Linear(4, 2)

        def select_action(self, batch: dict) -> torch.Tensor:
            batch.pop("action", None)
            return self.head(self.attention(batch["observation.state"]))

    torch.manual_seed(0)
    policy = Policy()
    observation = {"observation.state": torch.ones(1, 4), "action": None}
    given = observation_layout(observation)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad():
            _, plan = first_pass(policy, lambda: copy.deepcopy(policy), observation, 1)
    finally:
        torch.set_num_threads(before)
    assert plan is not None and plan.pinned == ("attention",), plan
    assert plan.layout == given and "action" not in observation, "the layout as given, before the pop"
