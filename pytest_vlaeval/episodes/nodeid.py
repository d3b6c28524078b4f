"""An episode's pytest node id, ``<benchmark>-<split>::<ENV_ID>::<seed>``: built and read here only.

The controller, the affinity scheduler and the sequential gate see episodes as node ids (xdist
reports them by id); they read them with these functions, never by splitting on ``::``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

SEP = "::"


def split_nodeid(benchmark: str, split: str) -> str:
    """The node of one split's tasks (the top of an episode's id)."""
    return f"{benchmark}-{split}"


def task_nodeid(benchmark: str, split: str, env_id: str) -> str:
    """The node of one task's episodes: an episode's id without its seed."""
    return f"{split_nodeid(benchmark, split)}{SEP}{env_id}"


def task_of(nodeid: str) -> str:
    """The task node an episode's id belongs to (the affinity scheduler's unit)."""
    return nodeid.rpartition(SEP)[0]


def parse_nodeid(nodeid: str) -> tuple[str, int] | None:
    """(env_id, seed) of an episode node id, or None for any other node."""
    parts = nodeid.split(SEP)
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[1], int(parts[2])


def lockstep_group_positions(keys: Sequence[Hashable], size: int) -> list[list[int]]:
    """Positions of the session's episodes grouped for lockstep (``--vla-lockstep``):
    consecutive episodes with one key (their task, and block of the sequential gate), ``size`` at
    a time. The controller's scheduler (keys from node ids) and every worker (keys from its items)
    group the same collection, so they agree on every group."""
    groups: list[list[int]] = []
    previous: Hashable = object()
    for position, key in enumerate(keys):
        if key != previous or len(groups[-1]) == size:
            groups.append([])
        groups[-1].append(position)
        previous = key
    return groups
