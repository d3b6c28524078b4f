"""GPU placement of xdist workers: ``--vla-placement`` in RLinf's ``resources[:processes]`` syntax.

A placement is a comma-separated list of segments ``GPUS[:PROCESSES]``. ``GPUS`` is an index, an
inclusive range ``a-b`` or ``all``; ``PROCESSES`` an index or a range, numbered contiguously
from 0 across segments (left out, a segment has one process per GPU). Within a segment one count
must be an integer multiple of the other: several processes share a GPU (``0:0-3``), or a
process gets several GPUs (``0-3:0-1``). Process i is xdist worker i.

Each worker's ``CUDA_VISIBLE_DEVICES`` rides in its execnet spec (``popen//env:NAME=value``), so it
is set when the worker process starts, before pytest, the user's conftest or any CUDA or
simulator import, and a worker that replaces a crashed one (under a new id) inherits it.

GPU indices count the devices this process may use: the entries of an inherited
``CUDA_VISIBLE_DEVICES`` (a cluster scheduler's allocation), else the machine's GPUs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest

from pytest_vlaeval.errors import SpecError

ALL = "all"


@dataclass(frozen=True)
class Segment:
    text: str
    gpus: tuple[int, int] | None
    """Inclusive range of GPU indices; None for ``all``."""
    processes: tuple[int, int] | None
    """Inclusive range of process numbers; None for one process per GPU."""


def parse(spec: str) -> list[Segment]:
    """Check the syntax of a placement and split it into segments."""
    segments = []
    for number, text in enumerate(spec.split(","), start=1):
        text = text.strip()
        if not text:
            raise SpecError(f"--vla-placement {spec!r}: segment {number} is empty")
        gpus, sep, processes = (part.strip() for part in text.partition(":"))
        where = f"segment {number} ({text!r})"
        if sep and processes == ALL:
            raise SpecError(f"--vla-placement {spec!r}: {where}: 'all' names GPUs, not processes")
        segments.append(
            Segment(
                text,
                None if gpus == ALL else _range(gpus, spec, where),
                _range(processes, spec, where) if sep else None,
            )
        )
    return segments


def _range(text: str, spec: str, where: str) -> tuple[int, int]:
    first, sep, last = (part.strip() for part in text.partition("-"))
    if not first.isdecimal() or (sep and not last.isdecimal()):
        raise SpecError(f"--vla-placement {spec!r}: {where}: {text!r} is not an index, a range a-b or (for GPUs) all")
    low, high = int(first), int(last) if sep else int(first)
    if high < low:
        raise SpecError(f"--vla-placement {spec!r}: {where}: range {text!r} runs backwards")
    return low, high


def assign(spec: str, gpu_count: Callable[[], int]) -> list[tuple[int, ...]]:
    """GPU indices of each process. ``gpu_count`` is asked only when a segment says ``all``."""
    segments = parse(spec)
    placement: list[tuple[int, ...]] = []
    owner: dict[int, int] = {}
    for number, segment in enumerate(segments, start=1):
        where = f"segment {number} ({segment.text!r})"
        gpus = list(range(segment.gpus[0], segment.gpus[1] + 1)) if segment.gpus else _all(spec, where, gpu_count)
        for gpu in gpus:
            if gpu in owner:
                raise SpecError(f"--vla-placement {spec!r}: GPU {gpu} is in segment {owner[gpu]} and segment {number}")
            owner[gpu] = number
        first, last = segment.processes or (len(placement), len(placement) + len(gpus) - 1)
        if first != len(placement):
            raise SpecError(
                f"--vla-placement {spec!r}: {where}: processes are numbered contiguously from 0, so this "
                f"segment's processes start at {len(placement)}, not {first}"
            )
        processes = last - first + 1
        if processes % len(gpus) and len(gpus) % processes:
            raise SpecError(
                f"--vla-placement {spec!r}: {where}: {len(gpus)} GPUs for {processes} processes; "
                "one count must be an integer multiple of the other"
            )
        if processes >= len(gpus):
            placement += [(gpus[i * len(gpus) // processes],) for i in range(processes)]
        else:
            width = len(gpus) // processes
            placement += [tuple(gpus[i * width : (i + 1) * width]) for i in range(processes)]
    return placement


def _all(spec: str, where: str, gpu_count: Callable[[], int]) -> list[int]:
    count = gpu_count()
    if count < 1:
        raise SpecError(f"--vla-placement {spec!r}: {where}: 'all' needs GPUs, and none is visible here")
    return list(range(count))


def detect_gpu_count() -> int:
    """The machine's GPUs: ``nvidia-smi -L`` lists one per line; without it, ask torch."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        try:
            import torch
        except ImportError:
            return 0
        return torch.cuda.device_count()
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


def gpu_visible(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a CUDA program started from here would see a GPU: ``CUDA_VISIBLE_DEVICES`` does not
    hide them all (empty, or a first entry of -1), and ``nvidia-smi -L`` lists one (asked without
    importing torch: no driver, no GPU)."""
    hidden = environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None:
        first = hidden.split(",")[0].strip()
        if not first or first.startswith("-"):
            return False
    program = shutil.which("nvidia-smi")
    if program is None:
        return False
    try:
        listing = subprocess.run([program, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return listing.returncode == 0 and any(line.startswith("GPU ") for line in listing.stdout.splitlines())


def visible_devices(
    spec: str, environ: Mapping[str, str], gpu_count: Callable[[], int] = detect_gpu_count
) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` for each worker, translating indices through an inherited one."""
    inherited = environ.get("CUDA_VISIBLE_DEVICES")
    if inherited is None:
        placement = assign(spec, gpu_count)
        return [",".join(map(str, gpus)) for gpus in placement]
    devices = [d.strip() for d in inherited.split(",") if d.strip()]
    placement = assign(spec, lambda: len(devices))
    for gpus in placement:
        missing = [g for g in gpus if g >= len(devices)]
        if missing:
            raise SpecError(
                f"--vla-placement {spec!r}: GPU {missing[0]} is not visible: CUDA_VISIBLE_DEVICES={inherited!r} "
                f"makes {len(devices)} available (indices count within it)"
            )
    return [",".join(devices[g] for g in gpus) for gpus in placement]


def apply(config: pytest.Config, environ: Mapping[str, str] = os.environ) -> None:
    """Give each xdist worker its devices; without ``-n``/``--tx``, start one worker per process."""
    spec = config.getoption("vla_placement")
    if not spec:
        return
    if not config.pluginmanager.has_plugin("xdist"):
        raise SpecError(f"--vla-placement {spec!r} places xdist workers, but pytest-xdist is disabled")
    devices = visible_devices(spec, environ)
    from xdist.workermanage import parse_tx_spec_config

    if not config.option.tx and config.option.numprocesses is None:
        config.option.numprocesses = len(devices)
        config.option.tx = ["popen"] * len(devices)
        if config.option.dist == "no":
            config.option.dist = "load"
    workers = parse_tx_spec_config(config) if config.option.tx else []
    if len(workers) != len(devices):
        raise SpecError(
            f"--vla-placement {spec!r} places {len(devices)} worker(s) but -n/--tx starts {len(workers)}; "
            f"pass -n {len(devices)} or leave -n out"
        )
    config.option.tx = [
        f"{worker}//env:CUDA_VISIBLE_DEVICES={gpus}" for worker, gpus in zip(workers, devices, strict=True)
    ]
