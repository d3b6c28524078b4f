"""Whole-task scheduling for ``--vla-reference-order``: a task's episodes stay on the worker that
started them, in order, because each one runs in the env the one before it left. It refines the
affinity scheduler by one seam: no worker takes another's tail."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from xdist.remote import Producer
from xdist.workermanage import WorkerController

from pytest_vlaeval.distribute.scheduler import AffinityScheduling, TaskQueue


class WholeTasks:
    """The variant ``configure`` chooses for the reference order."""

    needs = "--vla-reference-order keeps each task on one worker"

    def scheduling(
        self, config: pytest.Config, log: Producer, steps: Mapping[str, float], group_size: int = 1
    ) -> WholeTaskScheduling:
        return WholeTaskScheduling(config, log, steps, group_size)


class WholeTaskScheduling(AffinityScheduling):
    def _take_tail(self, thief: WorkerController) -> TaskQueue | None:
        return None
