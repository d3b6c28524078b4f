"""The task-affinity scheduler: driven with mock workers as xdist's own scheduler tests are, then
in real ``-n 2`` sessions on the fake benchmark."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest
from helpers import episode_records, run_dir

from pytest_vlaeval.distribute.scheduler import AffinityScheduling, uses_affinity
from pytest_vlaeval.distribute.whole_tasks import WholeTaskScheduling
from pytest_vlaeval.episodes.nodeid import lockstep_group_positions, task_of
from pytest_vlaeval.errors import SpecError

SHORT = ["--benchmark=fake.yaml:short"]


class MockGateway:
    def __init__(self, number: int) -> None:
        self.id = f"gw{number}"


class MockNode:
    """Stands in for xdist's WorkerController: records what the scheduler sends it."""

    def __init__(self, number: int) -> None:
        self.gateway = MockGateway(number)
        self.sent: list[int] = []
        self.stolen: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def send_steal(self, indices: list[int]) -> None:
        self.stolen.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.gateway.id


def episodes(**counts: int) -> list[str]:
    """Node ids in benchmark order: ``episodes(A=2)`` -> ``["s::A::0", "s::A::1"]``."""
    return [f"s::{task}::{seed}" for task, count in counts.items() for seed in range(count)]


def started(
    pytester: pytest.Pytester,
    collection: list[str],
    workers: int,
    steps: dict[str, int] | None = None,
    lockstep: int = 1,
) -> tuple[AffinityScheduling, list]:
    config = pytester.parseconfig(f"--tx={workers}*popen")
    sched = AffinityScheduling(config, steps=steps, group_size=lockstep)
    nodes = [MockNode(i) for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    assert sched.collection_is_completed
    sched.schedule()
    return sched, nodes


def simulate(sched: AffinityScheduling, nodes: list[MockNode], *, build: float, episode: float) -> int:
    """Run everything with simulated time: a worker runs its first episode once it holds a second
    one or a shutdown; an episode costs ``episode``, plus ``build`` when its task differs from the
    worker's previous one. Returns the number of env builds."""
    collection = sched.collection
    assert collection is not None
    clock = dict.fromkeys(nodes, 0.0)
    env: dict[MockNode, str] = {}
    builds = 0

    def next_up(node: MockNode) -> tuple[float, int, bool]:
        """When the worker's current episode ends, which one it is, and whether it builds an env."""
        index = sched.node2pending[node][0]
        fresh = env.get(node) != task_of(collection[index])
        return clock[node] + episode + build * fresh, index, fresh

    while ready := [n for n in nodes if sched.node2pending[n] and (n.shutting_down or len(sched.node2pending[n]) > 1)]:
        node = min(ready, key=lambda n: next_up(n)[0])
        finish, index, fresh = next_up(node)
        builds += fresh
        env[node] = task_of(collection[index])
        sched.mark_test_complete(node, index, finish - clock[node])
        clock[node] = finish
    assert sched.tests_finished and not sched.has_pending
    assert all(node.shutting_down for node in nodes)
    assert sorted(i for node in nodes for i in node.sent) == list(range(len(collection))), "each episode once"
    return builds


def test_each_worker_starts_on_its_own_task(pytester: pytest.Pytester) -> None:
    sched, (node1, node2) = started(pytester, episodes(A=4, B=4, C=4), 2)
    assert node1.sent == [0, 1] and node2.sent == [4, 5]
    assert not sched.tests_finished and sched.has_pending
    sched.mark_test_complete(node1, 0, 1.0)
    assert node1.sent == [0, 1, 2]
    sched.mark_test_complete(node1, 1, 1.0)
    sched.mark_test_complete(node1, 2, 1.0)
    assert node1.sent == [0, 1, 2, 3, 8], "done with A's queue, it takes the untouched task C"
    assert node2.sent == [4, 5]
    assert not node1.stolen and not node2.stolen, "queues stay on the controller: no steal requests"


def test_the_longest_untouched_task_goes_first(pytester: pytest.Pytester) -> None:
    """Work = episodes x step limit: B 6 x 60, then C 8 x 25, then A 6 x 25; a long task never starts last."""
    steps = {"s::A": 25, "s::B": 60, "s::C": 25}
    sched, (node1, node2) = started(pytester, episodes(A=6, B=6, C=8), 2, steps)
    assert node1.sent == [6, 7] and node2.sent == [12, 13]
    assert [queue.task for queue in sched.pool] == ["s::A"]


def test_idle_worker_takes_the_tail_of_the_longest_queue(pytester: pytest.Pytester) -> None:
    sched, (node1, node2, node3) = started(pytester, episodes(A=12, B=4), 3)
    # node3 finds no untouched task: with no timings yet a build counts as one episode, so it
    # takes floor((12 - 1) / 2) = 5 episodes from the end of A.
    assert node1.sent == [0, 1] and node2.sent == [12, 13]
    assert node3.sent == [7, 8]
    assert list(sched.node2queue[node1].indices) == [2, 3, 4, 5, 6]
    assert list(sched.node2queue[node3].indices) == [9, 10, 11]


def test_a_worker_on_the_same_task_takes_a_tail_without_paying_a_build(pytester: pytest.Pytester) -> None:
    sched, (node1, node2) = started(pytester, episodes(A=10), 2)
    assert node2.sent == [6, 7]  # floor((10 - 1) / 2) = 4 of A: 6, 7, 8, 9
    for index in (6, 7, 8):
        sched.mark_test_complete(node2, index, 1.0)
    # node2 holds 9 and has A's env: of node1's 2 held + 4 queued, it takes floor((6 - 0 - 1) / 2) = 2.
    assert node2.sent == [6, 7, 8, 9, 4]
    assert list(sched.node2queue[node2].indices) == [5]
    assert list(sched.node2queue[node1].indices) == [2, 3]


def test_a_tail_not_worth_an_env_build_is_left_alone(pytester: pytest.Pytester) -> None:
    sched, (node1, node2) = started(pytester, episodes(A=8, B=2, C=2), 2)
    assert node1.sent == [0, 1] and node2.sent == [8, 9]
    sched.mark_test_complete(node2, 8, 11.0)  # a worker's first episode: not a build-cost sample
    sched.mark_test_complete(node2, 9, 1.0)
    sched.mark_test_complete(node2, 10, 11.0)  # C's first episode: a build of 10 episodes
    # node2 holds C::1; taking any of A would cost it a 10-episode build for at most 8 episodes.
    assert node2.sent == [8, 9, 10, 11] and node2.shutting_down
    assert not node1.shutting_down


def test_a_workers_first_episode_does_not_teach_the_build_cost(pytester: pytest.Pytester) -> None:
    """The first episode also pays for the process (imports, the policy's model), thieves don't."""
    sched, (_, node2) = started(pytester, episodes(A=8, B=2, C=2), 2)
    sched.mark_test_complete(node2, 8, 61.0)
    sched.mark_test_complete(node2, 9, 1.0)
    sched.mark_test_complete(node2, 10, 2.0)  # a build of 1 episode
    assert node2.sent == [8, 9, 10, 11, 5], "takes floor((8 - 1 - 1) / 2) = 3 of A: 5, 6, 7"
    assert list(sched.node2queue[node2].indices) == [6, 7]


@pytest.mark.parametrize(
    ("tasks", "per_task", "workers", "build", "episode"),
    [(4, 6, 2, 5.0, 3.0), (5, 10, 4, 5.0, 1.0), (1, 50, 8, 5.0, 1.0), (12, 3, 3, 5.0, 2.0), (3, 50, 2, 1.0, 8.0)],
)
def test_env_builds_stay_within_tasks_plus_workers(
    pytester: pytest.Pytester, tasks: int, per_task: int, workers: int, build: float, episode: float
) -> None:
    sched, nodes = started(pytester, episodes(**{f"T{t}": per_task for t in range(tasks)}), workers)
    assert simulate(sched, nodes, build=build, episode=episode) <= tasks + workers


def test_fewer_episodes_than_workers(pytester: pytest.Pytester) -> None:
    sched, (node1, node2, node3) = started(pytester, episodes(A=1), 3)
    assert node1.sent == [0] and node2.sent == node3.sent == []
    assert node1.shutting_down and node2.shutting_down and node3.shutting_down, "all must run or leave"
    assert sched.tests_finished
    sched.mark_test_complete(node1, 0, 1.0)
    assert not sched.has_pending


def test_crashed_workers_episodes_return_to_the_pool(pytester: pytest.Pytester) -> None:
    sched, (node1, node2) = started(pytester, episodes(A=4, B=4), 2)
    crashed = sched.remove_node(node1)  # died running A::0, holding A::1, with A::2-3 queued
    assert crashed == "s::A::0"
    assert not sched.tests_finished and sched.has_pending
    replacement = MockNode(2)
    sched.add_node(replacement)
    sched.add_node_collection(replacement, episodes(A=4, B=4))
    sched.schedule()
    assert replacement.sent == [1, 2]
    assert node2.sent == [4, 5]


def test_a_retried_crash_goes_to_the_worker_on_that_task(pytester: pytest.Pytester) -> None:
    """xdist calls remove_node, then a retrying plugin calls mark_test_pending."""
    sched, (node1, node2) = started(pytester, episodes(A=6, B=2), 2)
    sched.mark_test_complete(node2, 6, 1.0)  # node2 holds B::1, and takes floor((6 - 1 - 1) / 2) = 2 of A
    sched.mark_test_complete(node2, 7, 1.0)
    assert node2.sent == [6, 7, 4, 5]
    crashed = sched.remove_node(node1)
    assert crashed == "s::A::0"
    sched.mark_test_pending(crashed)
    # node2 has A's env now: node1's remainder and the crashed episode join its queue, in order.
    assert list(sched.node2queue[node2].indices) == [0, 1, 2, 3]
    sched.mark_test_complete(node2, 4, 1.0)
    assert node2.sent == [6, 7, 4, 5, 0]


def test_episodes_a_worker_hands_back_are_not_lost(pytester: pytest.Pytester) -> None:
    """xdist's answer to a steal request; this scheduler sends none, but must not lose episodes."""
    sched, (node1, _) = started(pytester, episodes(A=3, B=2), 2)
    sched.remove_pending_tests_from_node(node1, [1])
    assert node1.sent == [0, 1, 1], "back in its task's queue, and resent to the worker holding that env"
    assert sched.node2pending[node1] == [0, 1] and list(sched.node2queue[node1].indices) == [2]


def test_different_collections_are_reported_and_nothing_runs(pytester: pytest.Pytester) -> None:
    reports = []

    class Collect:
        def pytest_collectreport(self, report: pytest.CollectReport) -> None:
            reports.append(report)

    config = pytester.parseconfig("--tx=2*popen")
    config.pluginmanager.register(Collect(), "collect-spy")
    sched = AffinityScheduling(config)
    node1, node2 = MockNode(0), MockNode(1)
    sched.add_node(node1)
    sched.add_node(node2)
    sched.add_node_collection(node1, episodes(A=2))
    sched.add_node_collection(node2, episodes(B=2))
    sched.schedule()
    assert len(reports) == 1 and "Different tests were collected between" in reports[0].longrepr
    assert node1.sent == node2.sent == [] and sched.tests_finished


@pytest.mark.parametrize(
    ("args", "affinity"),
    [
        (["-n", "2"], True),
        (["-n", "2", "--dist", "load"], False),
        (["-n", "2", "--dist=worksteal"], False),
        (["-d", "--tx=2*popen"], False),
        (["-n", "2", "--vla-dist=xdist"], False),
        (["-n", "2", "--vla-dist=affinity"], True),
    ],
)
def test_who_chooses_the_scheduler(pytester: pytest.Pytester, args: list[str], affinity: bool) -> None:
    assert uses_affinity(pytester.parseconfig(*args)) is affinity


def test_affinity_and_an_explicit_dist_conflict(pytester: pytest.Pytester) -> None:
    with pytest.raises(SpecError, match="--vla-dist=affinity and --dist=loadscope both choose"):
        uses_affinity(pytester.parseconfig("-n", "2", "--vla-dist=affinity", "--dist=loadscope"))


BUILD_COST_POLICY = textwrap.dedent(
    """
    import time
    import numpy as np

    class FirstEpisodeSlow:
        '''Zero actions; the first episode of each task a worker sees costs 0.3 s, like an env build.'''
        chunk_size = 1
        def __init__(self):
            self.tasks = set()
        def reset(self, episode):
            if episode.task not in self.tasks:
                self.tasks.add(episode.task)
                time.sleep(0.3)
        def act(self, obs):
            return np.zeros(7)
    """
)


def test_real_session_keeps_each_task_on_one_worker(fake: pytest.Pytester) -> None:
    fake.makepyfile(slowstart=BUILD_COST_POLICY)
    result = fake.runpytest_subprocess(
        "--benchmark=fake.yaml:short", "--episodes=3", "--policy=slowstart:FirstEpisodeSlow", "-n", "2", "-v"
    )
    result.stdout.fnmatch_lines(["*scheduling tests via AffinityScheduling*"])
    records = episode_records(run_dir(fake))
    assert len(records) == 6
    workers_of = {
        task: {r["worker"] for r in records.values() if r["task"] == task} for task in ("Alpha-v0", "Beta-v0")
    }
    assert workers_of["Alpha-v0"] | workers_of["Beta-v0"] == {"gw0", "gw1"}
    assert all(len(workers) == 1 for workers in workers_of.values()), workers_of
    assert Counter(r["task"] for r in records.values() if r["env_built"]) == {"Alpha-v0": 1, "Beta-v0": 1}


def test_an_explicit_dist_mode_falls_back_to_xdist(fake: pytest.Pytester) -> None:
    result = fake.runpytest_subprocess("--benchmark=fake.yaml:short", "--episodes=3", "-n", "2", "--dist=load", "-v")
    result.stdout.fnmatch_lines(["*scheduling tests via LoadScheduling*"])
    records = episode_records(run_dir(fake))
    assert {r["worker"] for r in records.values() if r["task"] == "Alpha-v0"} == {"gw0", "gw1"}, "load splits tasks"


def test_sequential_blocks_keep_order_and_affinity_and_stop_when_settled(pytester: pytest.Pytester) -> None:
    """Blocks of 2 seeds, in the collection's block-major order; each worker keeps its task's env."""
    from pytest_vlaeval.distribute.seed_blocks import BlockScheduling, SequentialBlocks

    collection = [f"s::{task}::{seed}" for block in range(3) for task in "AB" for seed in (2 * block, 2 * block + 1)]
    settled = []
    blocks = SequentialBlocks(lambda nodeid: int(nodeid.rpartition("::")[2]) // 2, lambda: bool(settled))
    config = pytester.parseconfig("--tx=2*popen")
    sched = BlockScheduling(config, None, {}, blocks)
    nodes = [MockNode(0), MockNode(1)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    sched.schedule()
    assert simulate(sched, nodes, build=5.0, episode=1.0) == 2, "one env build per worker: it keeps its task"
    for node in nodes:
        sent_blocks = [blocks.block_of(collection[i]) for i in node.sent]
        assert sent_blocks == sorted(sent_blocks) and len({task_of(collection[i]) for i in node.sent}) == 1

    sched = BlockScheduling(config, None, {}, blocks)
    nodes = [MockNode(0), MockNode(1)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, collection)
    sched.schedule()
    assert [node.sent for node in nodes] == [[0, 1], [2, 3]]
    sched.mark_test_complete(nodes[0], 0, 1.0)
    assert nodes[0].sent == [0, 1, 4], "its last episode of block 0 needs a next one to start"
    sched.mark_test_complete(nodes[0], 1, 1.0)
    assert nodes[0].sent == [0, 1, 4], "block 1 waits until block 0 is complete"
    settled.append(True)  # the gate's look after block 0 settles the verdict
    for node, index in ((nodes[1], 2), (nodes[1], 3), (nodes[0], 4)):
        sched.mark_test_complete(node, index, 1.0)
    assert [node.sent for node in nodes] == [[0, 1, 4], [2, 3]] and all(node.shutting_down for node in nodes)
    assert sched.tests_finished and not sched.has_pending


def sent_whole(nodes: list[MockNode], groups: list[list[int]]) -> bool:
    """Every lockstep group went to one worker, in one piece and in order."""
    for group in groups:
        holders = [node for node in nodes if group[0] in node.sent]
        if len(holders) != 1:
            return False
        sent = holders[0].sent
        start = sent.index(group[0])
        if sent[start : start + len(group)] != group:
            return False
    return True


def test_lockstep_groups_are_sent_whole(pytester: pytest.Pytester) -> None:
    """K=3: A's 7 episodes are groups [0-2], [3-5], [6]; a worker gets a group whole and the next
    once it holds only the group's last episode (the one it starts only when it holds another)."""
    sched, (node1, node2) = started(pytester, episodes(A=7, B=4), 2, lockstep=3)
    assert node1.sent == [0, 1, 2] and node2.sent == [7, 8, 9]
    sched.mark_test_complete(node1, 0, 3.0)
    assert node1.sent == [0, 1, 2], "it still holds two"
    sched.mark_test_complete(node1, 1, 0.0)
    assert node1.sent == [0, 1, 2, 3, 4, 5]
    sched.mark_test_complete(node1, 2, 0.0)
    assert node1.sent == [0, 1, 2, 3, 4, 5]


def test_lockstep_tails_are_taken_in_whole_groups(pytester: pytest.Pytester) -> None:
    """With K=2 the third worker's tail of A (5.5 episodes would even it out) is three whole groups:
    A's holder then runs 6, the thief a build and 6, where two groups would leave the holder 8."""
    sched, (node1, node2, node3) = started(pytester, episodes(A=12, B=2), 3, lockstep=2)
    assert node1.sent == [0, 1] and node2.sent == [12, 13]
    assert node3.sent == [6, 7]
    assert list(sched.node2queue[node3].indices) == [8, 9, 10, 11]
    assert list(sched.node2queue[node1].indices) == [2, 3, 4, 5]


def test_a_second_worker_takes_a_lockstep_group_larger_than_half(pytester: pytest.Pytester) -> None:
    """One task, two groups of 8, two workers: the second takes the second group (finishing after
    a build and 8 episodes, not after 16) rather than shutting down because half the work, less a
    build, is not a whole group."""
    _, (node1, node2) = started(pytester, episodes(A=16), 2, lockstep=8)
    assert node1.sent == list(range(8))
    assert node2.sent == list(range(8, 16)) and not node2.shutting_down


@pytest.mark.parametrize("lockstep", [2, 3, 5])
def test_every_lockstep_group_runs_on_one_worker(pytester: pytest.Pytester, lockstep: int) -> None:
    collection = episodes(A=11, B=7, C=3, D=9)
    sched, nodes = started(pytester, collection, 3, lockstep=lockstep)
    simulate(sched, nodes, build=4.0, episode=1.0)
    groups = lockstep_group_positions([task_of(nodeid) for nodeid in collection], lockstep)
    assert all(len(group) <= lockstep for group in groups)
    assert sent_whole(nodes, groups)


def test_a_crashed_workers_lockstep_groups_go_back_whole(pytester: pytest.Pytester) -> None:
    sched, (node1, node2) = started(pytester, episodes(A=6, B=6), 2, lockstep=3)
    assert node1.sent == [0, 1, 2]
    crashed = sched.remove_node(node1)
    assert crashed == "s::A::0"
    sched.mark_test_complete(node2, 6, 1.0)
    sched.mark_test_complete(node2, 7, 0.0)
    assert node2.sent[3:6] == [9, 10, 11], "its own task first"
    for index in (8, 9, 10):
        sched.mark_test_complete(node2, index, 0.0)
    assert node2.sent[6:] == [1, 2], "then A's returned group, whole (its first episode was the crash)"


def test_whole_tasks_are_never_split(pytester: pytest.Pytester) -> None:
    """Under the reference order an idle worker waits rather than take another worker's tail."""
    config = pytester.parseconfig("--tx=3*popen")
    sched = WholeTaskScheduling(config)
    nodes = [MockNode(i) for i in range(3)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, episodes(A=12, B=4))
    sched.schedule()
    assert nodes[2].sent == [] and nodes[2].shutting_down, "no tail of A for the third worker"
    simulate(sched, nodes[:2], build=2.0, episode=1.0)
    assert sorted(nodes[0].sent) == list(range(12)) and sorted(nodes[1].sent) == list(range(12, 16))


def test_xdist_gives_the_same_records_as_serial(fake: pytest.Pytester) -> None:
    serial = fake.runpytest(*SHORT, "--vla-results=serial")
    parallel = fake.runpytest_subprocess(*SHORT, "-n", "2", "--vla-results=parallel")
    assert serial.parseoutcomes() == parallel.parseoutcomes()

    def comparable(root: str) -> dict:
        (directory,) = (fake.path / root).iterdir()
        records = episode_records(directory)
        return {k: (r["outcome"], r["episode_return"], r["length"]) for k, r in records.items()}

    assert comparable("serial") == comparable("parallel")
    workers = {r["worker"] for r in episode_records(next((fake.path / "parallel").iterdir())).values()}
    assert workers == {"gw0", "gw1"}
