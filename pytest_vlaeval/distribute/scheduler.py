"""Task-affinity scheduling for pytest-xdist: a worker works through one task's episodes at a time.

An env costs seconds to build and a fraction of one to reset, and the runner keeps a worker's env
while consecutive episodes share a task. xdist's ``load`` mode hands out contiguous chunks that
cut across tasks, so most workers end up building most envs. Here every task's episodes form a
queue held by the controller; a worker draws from its own queue, and when that runs dry it takes
an untouched task (the longest first, by the benchmark's step limits, so no long task starts
last), else the tail of the queue whose tail is worth most once the build it costs the thief
is paid for. A crashed worker's episodes go back to the pool.

The queues stay on the controller and a worker is sent only two episodes at a time (it starts
item i only once it holds item i+1 or a shutdown), so taking a tail needs no steal request to
the worker holding the task, and cannot be refused because the worker ran those episodes
meanwhile.

Variants refine this scheduler as xdist's ``loadfile`` refines ``loadscope``, one a file: the
sequential gate's block order (``seed_blocks``), and whole tasks on one worker (``whole_tasks``).
Under ``--vla-lockstep=K`` the unit sent is a lockstep group (K consecutive episodes of a task,
``nodeid.lockstep_group_positions``): a worker gets a group whole, a tail is taken in whole
groups, and a crashed worker's groups go back whole, so one group is one batched run.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Protocol

import pytest
from xdist.remote import Producer
from xdist.report import report_collection_diff
from xdist.workermanage import WorkerController, parse_tx_spec_config

from pytest_vlaeval.benchmark.model import Selection
from pytest_vlaeval.episodes.nodeid import lockstep_group_positions, task_nodeid, task_of
from pytest_vlaeval.errors import SpecError


class SchedulingVariant(Protocol):
    """A refinement of affinity scheduling: builds the scheduler xdist gets."""

    needs: str
    """What it does, as the line refusing another ``--dist`` mode says it (``--vla-sequential
    orders seeds in blocks``)."""

    def scheduling(
        self, config: pytest.Config, log: Producer, steps: Mapping[str, float], group_size: int
    ) -> AffinityScheduling: ...


MIN_PENDING = 2
"""Episodes a worker must hold to start one: the one it runs and the next (or a shutdown)."""

DEFAULT_BUILD_COST = 1.0
"""Before any timing has come back, an env build is taken to cost about one episode."""


@dataclass
class TaskQueue:
    """Episodes of one task that no worker has been sent yet, in collection order."""

    task: str
    indices: deque[int]
    block: int = 0
    """The sequential gate's block of seeds (always 0 without it, ``seed_blocks``)."""


class BuildCost:
    """How many episodes an env build is worth, learnt from the durations workers report.

    The first episode a worker runs after changing task pays for the build ("cold"); the
    others ("warm") do not, so the difference between the two is the build. A worker's very
    first episode is left out: it also pays once-per-process costs (imports, loading the policy's
    model), which a thief that is already running never pays again.
    """

    def __init__(self) -> None:
        self.warm: dict[str, list[float]] = defaultdict(list)
        self.cold: list[tuple[str, float]] = []

    def add(self, task: str, duration: float, *, cold: bool) -> None:
        if cold:
            self.cold.append((task, duration))
        else:
            self.warm[task].append(duration)

    def episode(self, task: str) -> float | None:
        """Mean warm duration of ``task``'s episodes, else of any task's."""
        durations = self.warm.get(task) or [d for ds in self.warm.values() for d in ds]
        return fmean(durations) if durations else None

    def in_episodes(self, task: str) -> float:
        """The cost of building an env, in episodes of ``task``."""
        episode = self.episode(task)
        builds = [duration - warm for t, duration in self.cold if (warm := self.episode(t)) is not None]
        if not episode or not builds:
            return DEFAULT_BUILD_COST
        return max(fmean(builds), 0.0) / episode


class AffinityScheduling:
    """xdist scheduler (see ``xdist.scheduler.protocol``) keeping each worker on one task."""

    def __init__(
        self,
        config: pytest.Config,
        log: Producer | None = None,
        steps: Mapping[str, float] | None = None,
        group_size: int = 1,
    ) -> None:
        self.numnodes = len(parse_tx_spec_config(config))
        self.steps = steps or {}
        """Expected length of one episode per task (its step limit); unknown tasks count 1."""
        self.config = config
        self.log = log.affinitysched if log is not None else Producer("affinitysched")
        self.node2collection: dict[WorkerController, list[str]] = {}
        self.node2pending: dict[WorkerController, list[int]] = {}
        self.node2queue: dict[WorkerController, TaskQueue] = {}
        self.node2task: dict[WorkerController, str] = {}
        """The task of the last episode sent to each worker: the env it holds once there."""
        self.pool: list[TaskQueue] = []
        """Untouched tasks, and episodes handed back by crashed workers."""
        self.collection: list[str] | None = None
        self.cold: set[int] = set()
        """Episodes sent to a worker that must build their env first."""
        self.started: set[WorkerController] = set()
        """Workers that have finished an episode."""
        self.cost = BuildCost()
        self.group_size = group_size
        """Episodes run together (``--vla-lockstep``), sent and taken whole."""
        self.group_of: dict[int, int] = {}
        """Episode index -> the first index of its lockstep group (each episode its own without lockstep)."""

    @property
    def nodes(self) -> list[WorkerController]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.node2collection) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        """Nothing left to send, and no worker still needs a next episode to start its last."""
        if not self.collection_is_completed or self._unsent():
            return False
        return all(len(pending) < MIN_PENDING for pending in self.node2pending.values())

    @property
    def has_pending(self) -> bool:
        return self._unsent() or any(self.node2pending.values())

    def add_node(self, node: WorkerController) -> None:
        assert node not in self.node2pending
        self.node2pending[node] = []

    def add_node_collection(self, node: WorkerController, collection: Sequence[str]) -> None:
        assert node in self.node2pending
        if self.collection is not None and list(collection) != self.collection:
            # A replacement worker that collected something else is never given work.
            first = next(iter(self.node2collection))
            self.log(report_collection_diff(self.collection, list(collection), first.gateway.id, node.gateway.id))
            return
        self.node2collection[node] = list(collection)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:
            if not self._same_collections():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = next(iter(self.node2collection.values()))
            by_task: dict[tuple[str, int], deque[int]] = {}
            for index, nodeid in enumerate(self.collection):
                by_task.setdefault((task_of(nodeid), self._block(nodeid)), deque()).append(index)
            queues = [TaskQueue(task, indices, block) for (task, block), indices in by_task.items()]
            keys = [(task_of(nodeid), self._block(nodeid)) for nodeid in self.collection]
            for members in lockstep_group_positions(keys, self.group_size):
                self.group_of.update(dict.fromkeys(members, members[0]))
            self.pool = sorted(queues, key=lambda q: (q.block, -self.steps.get(q.task, 1) * len(q.indices)))
        self._feed()

    def mark_test_complete(self, node: WorkerController, item_index: int, duration: float = 0) -> None:
        assert self.collection is not None
        self.node2pending[node].remove(item_index)
        if node in self.started:
            self.cost.add(task_of(self.collection[item_index]), duration, cold=item_index in self.cold)
        self.started.add(node)
        self._feed()

    def mark_test_pending(self, item: str) -> None:
        """Run ``item`` again (a plugin retrying a crashed episode)."""
        assert self.collection is not None
        self._give_back([self.collection.index(item)])
        self._feed()

    def remove_pending_tests_from_node(self, node: WorkerController, indices: Sequence[int]) -> None:
        """xdist's answer to a steal request. This scheduler sends none (its queues stay here),
        but should one be answered, the episodes go back to the pool."""
        returned = set(indices)
        self.node2pending[node] = [i for i in self.node2pending[node] if i not in returned]
        self._give_back(list(indices))
        self._feed()

    def remove_node(self, node: WorkerController) -> str | None:
        """Forget a worker that shut down or died; a dead one's episodes go back to the pool.

        Returns the episode it was running when it died, which xdist reports as crashed.
        """
        pending = self.node2pending.pop(node)
        queue = self.node2queue.pop(node, None)
        self.node2task.pop(node, None)
        self.started.discard(node)
        crashed = self.collection[pending.pop(0)] if pending and self.collection else None
        self._give_back(pending + list(queue.indices if queue else ()))
        self._feed()
        return crashed

    # -- internals -------------------------------------------------------------------------

    def _unsent(self) -> bool:
        return any(queue.indices for queue in [*self.pool, *self.node2queue.values()])

    def _block(self, nodeid: str) -> int:
        """The episode's block of seeds: one block here."""
        return 0

    def _feed(self) -> None:
        """Top every live worker up to two episodes, or shut it down when none is worth sending."""
        if self.collection is None:
            return
        for node, pending in self.node2pending.items():
            if node.shutting_down or node not in self.node2collection:
                continue
            while len(pending) < MIN_PENDING:
                queue = self._next_queue(node, pending)
                if queue is None:
                    if not self._must_wait():
                        node.shutdown()  # it runs the episode it holds, then leaves
                    break
                batch = self._pop(queue, MIN_PENDING - len(pending))
                self.cold.difference_update(batch)
                if self.node2task.get(node) != queue.task:
                    self.cold.add(batch[0])
                self.node2task[node] = queue.task
                pending.extend(batch)
                node.send_runtest_some(batch)

    def _pop(self, queue: TaskQueue, count: int) -> list[int]:
        """At least ``count`` episodes from the queue's head (fewer if it holds fewer), in whole lockstep groups."""
        batch: list[int] = []
        while queue.indices and len(batch) < count:
            group = self.group_of.get(queue.indices[0], queue.indices[0])
            while queue.indices and self.group_of.get(queue.indices[0], queue.indices[0]) == group:
                batch.append(queue.indices.popleft())
        return batch

    def _pop_tail(self, queue: TaskQueue, count: int) -> list[int]:
        """At most ``count`` episodes from the queue's tail, in whole lockstep groups, in queue order."""
        size = max((size for size in self._tail_sizes(queue) if size <= count), default=0)
        return [queue.indices.pop() for _ in range(size)][::-1]

    def _next_queue(self, node: WorkerController, pending: list[int]) -> TaskQueue | None:
        """The queue to send ``node`` its next episodes from, or None."""
        return self._queue_for(node)

    def _must_wait(self) -> bool:
        """Whether a worker given nothing now should stay for later work rather than shut down."""
        return False

    def _queue_for(self, node: WorkerController) -> TaskQueue | None:
        """The worker's own queue; else an untouched task (or a crashed worker's leftovers); else a tail."""
        queue = self.node2queue.get(node)
        if queue is None or not queue.indices:
            queue = self._from_pool(node) or self._take_tail(node)
            if queue is not None:
                self.node2queue[node] = queue
        return queue

    def _from_pool(self, node: WorkerController) -> TaskQueue | None:
        """The pool's next queue."""
        return self.pool.pop(0) if self.pool else None

    def _take_tail(self, thief: WorkerController) -> TaskQueue | None:
        """Split off the tail of the queue that, taken over by ``thief``, saves the most time."""
        best: tuple[int, WorkerController, TaskQueue] | None = None
        for victim, queue in self.node2queue.items():
            if victim is thief or not queue.indices:
                continue
            take = self._worth_taking(thief, victim, queue)
            if take > 0 and (best is None or take > best[0]):
                best = (take, victim, queue)
        if best is None:
            return None
        take, victim, queue = best
        tail = self._pop_tail(queue, take)
        if not tail:
            return None
        self.log(f"{thief.gateway.id} takes {len(tail)} episodes of {queue.task} from {victim.gateway.id}")
        return TaskQueue(queue.task, deque(tail))

    def _worth_taking(self, thief: WorkerController, victim: WorkerController, queue: TaskQueue) -> int:
        """Episodes to move (whole lockstep groups from the tail) so that the later of the two
        finishes soonest: the victim still runs what it holds, the thief first runs what it holds
        and builds the env unless it already has it; 0 when moving none is soonest."""
        remaining = len(self.node2pending[victim]) + len(queue.indices)
        build = 0.0 if self.node2task.get(thief) == queue.task else self.cost.in_episodes(queue.task)
        held = len(self.node2pending[thief])
        best, finish = 0, float(remaining)
        for moved in self._tail_sizes(queue):
            later = max(remaining - moved, held + build + moved)
            if later < finish:
                best, finish = moved, later
        return best

    def _tail_sizes(self, queue: TaskQueue) -> list[int]:
        """How many episodes a tail of 1, 2, ... whole lockstep groups of ``queue`` holds."""
        sizes: list[int] = []
        previous = None
        for count, index in enumerate(reversed(queue.indices)):
            group = self.group_of.get(index, index)
            if previous is not None and group != previous:
                sizes.append(count)
            previous = group
        if queue.indices:
            sizes.append(len(queue.indices))
        return sizes

    def _give_back(self, indices: list[int]) -> None:
        """Return episodes to a live worker whose env is already their task, else to the pool's front."""
        if not indices:
            return
        assert self.collection is not None
        by_task: dict[tuple[str, int], list[int]] = {}
        for index in indices:
            nodeid = self.collection[index]
            by_task.setdefault((task_of(nodeid), self._block(nodeid)), []).append(index)
        for (task, block), returned in by_task.items():
            queue = next(
                (
                    q
                    for node, q in self.node2queue.items()
                    if (q.task, q.block) == (task, block) and not node.shutting_down
                ),
                None,
            ) or next((q for q in self.pool if (q.task, q.block) == (task, block)), None)
            if queue is None:
                queue = TaskQueue(task, deque(), block)
                self.pool.insert(0, queue)
            queue.indices = deque(sorted([*returned, *queue.indices]))

    def _same_collections(self) -> bool:
        """Whether every worker collected the same episodes; if not, say where they differ."""
        (first, reference), *others = self.node2collection.items()
        same = True
        for node, collection in others:
            diff = report_collection_diff(reference, collection, first.gateway.id, node.gateway.id)
            if diff:
                same = False
                self.log(diff)
                report = pytest.CollectReport(nodeid=node.gateway.id, outcome="failed", longrepr=diff, result=[])
                self.config.hook.pytest_collectreport(report=report)
        return same


class Affinity:
    """The plain variant: affinity scheduling as it is."""

    needs = "task-affinity scheduling"

    def scheduling(
        self, config: pytest.Config, log: Producer, steps: Mapping[str, float], group_size: int
    ) -> AffinityScheduling:
        return AffinityScheduling(config, log, steps, group_size)


class AffinityPlugin:
    """Controller plugin handing xdist the affinity scheduler, as its variant builds it."""

    def __init__(self, steps: Mapping[str, float], variant: SchedulingVariant, group_size: int = 1) -> None:
        self.steps = steps
        self.variant = variant
        self.group_size = group_size

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Producer) -> AffinityScheduling:
        return self.variant.scheduling(config, log, self.steps, self.group_size)


def explicit_dist(config: pytest.Config) -> str | None:
    """The ``--dist`` mode the user asked for, if any.

    ``-n`` alone becomes ``--dist=load`` in xdist's own ``pytest_cmdline_main`` before any
    ``pytest_configure``, so this reads the command line as parsed, not ``config.option``.
    """
    args = config.known_args_namespace
    if getattr(args, "distload", False):
        return "load"
    dist = getattr(args, "dist", "no")
    return None if dist == "no" else dist


def uses_affinity(config: pytest.Config) -> bool:
    """``--vla-dist`` decides; without it, affinity unless ``--dist`` chose one of xdist's modes."""
    requested = config.getoption("vla_dist")
    dist = explicit_dist(config)
    if requested == "affinity" and dist is not None:
        raise SpecError(f"--vla-dist=affinity and --dist={dist} both choose how episodes are spread; pass one")
    return requested == "affinity" or (requested is None and dist is None)


def install(
    config: pytest.Config, selection: Selection, variant: SchedulingVariant | None = None, group_size: int = 1
) -> None:
    """Register the affinity scheduler (refined by ``variant``) on the controller when this session
    uses it; a variant or a lockstep group that needs it refuses any other ``--dist`` mode."""
    distributed = config.pluginmanager.has_plugin("xdist") and (
        config.getoption("numprocesses", None) or config.getoption("tx", None)
    )
    needs = [variant.needs] if variant else []
    if group_size > 1:
        needs.append(f"--vla-lockstep={group_size} sends each group of episodes to one worker")
    if needs and distributed and not uses_affinity(config):
        raise SpecError(f"{needs[0]} with the affinity scheduler: drop --dist/--vla-dist")
    if uses_affinity(config) and config.pluginmanager.has_plugin("xdist"):
        if config.getoption("tx") and config.option.dist == "no":
            # Gateways alone (--tx, no -n) start xdist only with a --dist mode; "load" just turns
            # distribution on, and the hook below still chooses the scheduler.
            config.option.dist = "load"
        steps = {
            task_nodeid(selection.benchmark.name, task.split, task.env_id): task.max_steps for task in selection.tasks
        }
        plugin = AffinityPlugin(steps, variant or Affinity(), group_size)
        config.pluginmanager.register(plugin, "vlaeval-scheduler")
