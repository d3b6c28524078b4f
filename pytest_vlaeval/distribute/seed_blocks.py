"""Block-ordered affinity scheduling for the sequential gate, refining the affinity scheduler
the way xdist's ``loadfile`` refines ``loadscope``.

The queues are per (task, block of seeds): a queue of block b+1 is handed out only once every
episode of block b has been sent, preferably to a worker whose env is already that task, so a
look sees complete per-seed means; when the gate says no episode can change its verdict, nothing
more is sent and the workers shut down after the episodes they hold.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest
from xdist.remote import Producer
from xdist.workermanage import WorkerController

from pytest_vlaeval.distribute.scheduler import AffinityScheduling, TaskQueue
from pytest_vlaeval.episodes.nodeid import parse_nodeid
from pytest_vlaeval.gate.protocol import SeedBlocks


@dataclass(frozen=True)
class SequentialBlocks:
    """What the scheduler needs of the sequential gate: an episode's block, and whether to stop."""

    block_of: Callable[[str], int]
    """Node id -> block of seeds."""
    settled: Callable[[], bool]
    """True once no episode can add to the gate's verdict (settled, or its last look taken): send nothing more."""
    needs = "--vla-sequential orders seeds in blocks"

    @classmethod
    def of(cls, gate: SeedBlocks) -> SequentialBlocks:
        """What the scheduler needs of ``gate``: an episode's block by node id, and whether to stop sending."""

        def block_of(nodeid: str) -> int:
            key = parse_nodeid(nodeid)
            return gate.block_of_seed(key[1]) if key else 0

        return cls(block_of, lambda: gate.done)

    def scheduling(
        self, config: pytest.Config, log: Producer, steps: Mapping[str, float], group_size: int = 1
    ) -> BlockScheduling:
        return BlockScheduling(config, log, steps, self, group_size)


class BlockScheduling(AffinityScheduling):
    """Affinity scheduling that hands out every task's block b before any task's block b+1."""

    def __init__(
        self,
        config: pytest.Config,
        log: Producer | None,
        steps: Mapping[str, float],
        blocks: SequentialBlocks,
        group_size: int = 1,
    ) -> None:
        super().__init__(config, log, steps, group_size)
        self.blocks = blocks

    def _block(self, nodeid: str) -> int:
        return self.blocks.block_of(nodeid)

    def _feed(self) -> None:
        if self.collection is not None and self.blocks.settled():
            self.pool.clear()  # not needed: nothing more can change the sequential gate's verdict
            for queue in self.node2queue.values():
                queue.indices.clear()
        super()._feed()

    def _next_queue(self, node: WorkerController, pending: list[int]) -> TaskQueue | None:
        queue = self._queue_for(node)
        if queue is None and self._unsent():
            return self._lookahead(node, pending)
        return queue

    def _must_wait(self) -> bool:
        """The next block waits for this one to complete; an idle worker gets it then."""
        return self._unsent()

    def _from_pool(self, node: WorkerController) -> TaskQueue | None:
        """A queue of the lowest block not yet sent, of the task whose env the worker holds if there is one."""
        chosen = self._pool_queue(node, self._current_block())
        if chosen is not None:
            self.pool.remove(chosen)
        return chosen

    def _pool_queue(self, node: WorkerController, block: int | None) -> TaskQueue | None:
        """A pool queue of ``block``, of the task whose env the worker holds if there is one."""
        candidates = [q for q in self.pool if q.block == block and q.indices]
        return next(
            (q for q in candidates if q.task == self.node2task.get(node)), candidates[0] if candidates else None
        )

    def _current_block(self) -> int | None:
        """The lowest block with an episode not yet sent or not yet finished: the one being run."""
        assert self.collection is not None
        unsent = [q.block for q in [*self.pool, *self.node2queue.values()] if q.indices]
        running = [self._block(self.collection[i]) for pending in self.node2pending.values() for i in pending]
        return min(unsent + running, default=None)

    def _lookahead(self, node: WorkerController, pending: list[int]) -> TaskQueue | None:
        """One episode (one lockstep group) of the next block for a worker holding only its last
        episode of the current block: xdist starts an episode once the worker holds the next one
        (or a shutdown)."""
        assert self.collection is not None
        current = self._current_block()
        if len(pending) != 1 or current is None or self._block(self.collection[pending[0]]) != current:
            return None
        queue = self._pool_queue(node, current + 1)
        if queue is None:
            return None
        taken = self._pop(queue, 1)
        if not queue.indices:
            self.pool.remove(queue)
        return TaskQueue(queue.task, deque(taken), queue.block)
