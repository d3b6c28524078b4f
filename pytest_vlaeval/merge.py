"""Merge run directories (shards from several machines or CI jobs) into one run.

``vlaeval merge RUN_DIR... [--out DIR]`` checks that
every directory holds the same run (equal fingerprints), copies their episode logs into the
output, says which shards and episodes are still missing with the command that fills them, and
writes the canonical files. Logs are copied by name and the latest attempt of each episode
wins, so merging the same shard twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pytest_vlaeval import strict_json
from pytest_vlaeval.arrays.submission import completing_command
from pytest_vlaeval.benchmark.model import (
    Benchmark,
    Selection,
    builtin_benchmarks,
    load_benchmark,
    resolve_benchmark,
    select,
)
from pytest_vlaeval.choices import add_gate_options
from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.gate.baseline import load_baseline
from pytest_vlaeval.gate.fixed import FixedGate
from pytest_vlaeval.gate.protocol import Gate, NoGate
from pytest_vlaeval.gate.settings import GateSettings
from pytest_vlaeval.gate.verdict import EXIT_GATE_FAILED, FAIL, UNDECIDED, Verdict
from pytest_vlaeval.lerobot.eval_info import eval_info
from pytest_vlaeval.printable import command_line, terminal_safe
from pytest_vlaeval.report.page import pct
from pytest_vlaeval.report.run_files import write_run_files
from pytest_vlaeval.results.canonical import summary
from pytest_vlaeval.results.latest import LatestRecords, skipped_line, whole_lines
from pytest_vlaeval.results.made_with import MACHINES, baseline_made_with, gate_note, hosts_note, made_with
from pytest_vlaeval.results.readback import read_json
from pytest_vlaeval.results.record import record_time
from pytest_vlaeval.results.rundir import RunDir, shard_of, writing
from pytest_vlaeval.results.store import RunStore
from pytest_vlaeval.schema import Fingerprint
from pytest_vlaeval.termination import interrupt_on_termination

TAIL_BYTES = 65536
"""Enough of a log's end to hold its last record."""


@dataclass(frozen=True)
class Merged:
    lines: list[str]
    """What to print."""
    verdict: Verdict | None = None
    complete: bool = True
    """Every episode of the run has a completed record (no error, none missing)."""


def merge(
    run_dirs: list[Path], out: Path, benchmark_arg: str | None = None, gate: GateSettings | None = None
) -> Merged:
    """Merge ``run_dirs`` into ``out`` (one directory into itself writes its files from its logs);
    raises SpecError on a mismatch."""
    reference, policy = _same_run(run_dirs)
    store = RunStore(out)
    store.claim(reference)
    if policy is not None:
        store.claim(policy, store.dir.policy)
    shard_hosts = [machine for directory in run_dirs for machine in made_with(directory).machines]
    hosts = store.join_machines(shard_hosts)  # never this host: a merge runs no episode
    skipped: list[str] = []
    copied = sum(
        _copy_log(log, RunDir(directory), store.dir, skipped)
        for directory in run_dirs
        for log in RunDir(directory).logs()
    )
    benchmark = _benchmark(run_dirs, reference, benchmark_arg)
    store.keep_spec(benchmark)
    selection = _selection(benchmark, reference)
    judge = _gate(gate, selection)  # a bad baseline stops before the run's files are rewritten
    baseline = baseline_made_with(judge.baseline.directory) if judge.baseline else None
    with store.locked():  # a session may be writing the same directory's canonical files
        latest = LatestRecords.read(store.dir, selection.episode_ids)
        body, per_task = summary(selection, latest, interrupted=False)
        verdict = judge.judge(per_task)
        note = gate_note(made_with(out), baseline) if judge.baseline else None
        verdict = verdict.made_with(note) if verdict is not None and note else verdict
        written = write_run_files(
            store.dir,
            body,
            per_task,
            policy=reference["policy"],
            eval_info=eval_info(selection, latest),
            verdict=verdict,
            baseline=judge.baseline,
            final=True,
        )
    if written.canonical_refused is not None:
        raise ResultsUnwritable(written.canonical_refused)

    lines = [f"merged {len(run_dirs)} run directories into {out}: {copied} new or grown episode logs"]
    lines += [f"not written: {line}" for line in written.refused]
    lines += skipped + latest.skipped
    lines += filter(None, [hosts_note(hosts, "the merged run's sessions")])
    if latest.outside:
        lines.append(f"left out {latest.outside:,} records of episodes the run's fingerprint does not name")
    lines += shard_finish_lines(store.dir)
    lines += [
        f"shard {index}/{count} has no episode log: run `{rerun_command(reference, store.dir, f'--vla-shard={index}/{count}')}`"
        for index, count in missing_shards(out, len(selection.episode_ids))
    ]
    lines.append(
        f"episodes: {body['n_completed']} completed, {body['n_errors']} errors, {body['n_missing']} missing of {body['n_expected']}; "
        f"split SR {pct(body['sr_split'])}"
    )
    if body["n_errors"] or body["n_missing"]:
        fill = rerun_command(
            reference, store.dir, "--vla-rerun=incomplete", f"--vla-results={out.parent}", f"--vla-run-name={out.name}"
        )
        lines.append(f"fill the gaps with: {fill}")
        complete = completing_command(out)
        if complete is not None:
            lines.append(f"or, on the cluster it was submitted to: {complete}")
    if verdict is not None:
        lines.append(verdict.verdict())
    return Merged(lines, verdict, not (body["n_errors"] or body["n_missing"]))


def _same_run(run_dirs: list[Path]) -> tuple[Fingerprint, dict[str, Any] | None]:
    """The run the directories hold (its fingerprint, and its policy where recorded); SpecError when they differ."""
    fingerprints = {d: read_json(RunDir(d).fingerprint, Fingerprint, "fingerprint") for d in run_dirs}
    reference = next(iter(fingerprints.values()))
    for directory, fingerprint in fingerprints.items():
        keys = (set(reference) | set(fingerprint)) - {MACHINES}  # the shards of one run may differ in their hosts
        differ = sorted(k for k in keys if reference.get(k) != fingerprint.get(k))
        if differ:
            raise SpecError(f"{directory} is not the same run as {run_dirs[0]} (differs in: {', '.join(differ)})")
    policy_files = [RunDir(d).policy for d in run_dirs]
    policies = {
        json.dumps(read_json(path, dict[str, Any], "policy"), sort_keys=True) for path in policy_files if path.exists()
    }
    if len(policies) > 1:
        raise SpecError(f"the runs were made with different policy configurations: {sorted(policies)}")
    return reference, json.loads(policies.pop()) if policies else None


def _selection(benchmark: Benchmark, reference: Fingerprint) -> Selection:
    """The episode universe a fingerprint describes, with the benchmark it was made with."""
    if benchmark.digest != reference["benchmark_digest"]:
        raise SpecError(f"benchmark {benchmark.name!r} here differs from the one the run used; pass --benchmark FILE")
    return select(
        benchmark,
        reference["split"],
        env_ids=reference["tasks"],
        start_seed=reference["start_seed"],
        episodes=reference["episodes"],
        collected=False,  # a merge collects no items: a run of any size is summarised
    )


def selection_of(run_dir: Path) -> Selection:
    """The episode universe of the run in ``run_dir``, from its fingerprint and the benchmark file it keeps."""
    reference = read_json(RunDir(run_dir).fingerprint, Fingerprint, "fingerprint")
    return _selection(_benchmark([run_dir], reference, None), reference)


def _gate(settings: GateSettings | None, selection: Selection) -> Gate:
    """The fixed gate with ``--baseline``, its baseline read and checked now; else no gate."""
    if settings is None:
        return NoGate()
    assert settings.baseline is not None
    baseline = load_baseline(
        settings.baseline, [t.env_id for t in selection.tasks], selection.seeds, benchmark=selection.benchmark
    )
    return FixedGate.create(baseline, selection.seeds, settings)


def shard_finish_lines(run_dir: RunDir) -> list[str]:
    """When the first and the last shard finished (their logs' last records), and the spread."""
    finished: dict[tuple[int, int], datetime] = {}
    for log in run_dir.logs():
        shard, ended = shard_of(log), last_record_time(log)
        if shard and ended is not None:
            finished[shard] = max(finished.get(shard, ended), ended)
    if len(finished) < 2:
        return []
    (first, at_first), (last, at_last) = (
        min(finished.items(), key=lambda kv: kv[1]),
        max(finished.items(), key=lambda kv: kv[1]),
    )
    spread = (at_last - at_first).total_seconds()
    return [
        f"shards finished over {spread:.0f} s: first shard {first[0]}/{first[1]} at {at_first.isoformat()}, "
        f"last shard {last[0]}/{last[1]} at {at_last.isoformat()}"
    ]


def last_record_time(log: Path) -> datetime | None:
    """The time of a log's last whole record, read from its end (a log can hold 100,000 records)."""
    with log.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        lines = f.read().split(b"\n")
    for line in reversed(lines[1:] if size > TAIL_BYTES else lines):
        try:
            return record_time(strict_json.loads(line)["time"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line, or not a record
    return None


def _copy_log(log: Path, source: RunDir, run: RunDir, skipped: list[str]) -> int:
    """Copy an episode log of ``source`` into ``run`` (1), or bring an earlier copy up to date (1 when
    it grew, 0 when it was whole): a log only grows by whole lines, so an earlier copy (made while its
    session was still writing, or cut short by a killed merge) holds its first lines, and is extended.
    Nothing is followed through a symbolic link of either run: a received run's could name any file
    of yours, to copy into the run or to write over. Only whole lines are copied, one at a time; a
    line too long to be a record is neither read whole nor copied, but named in ``skipped``
    (``latest.whole_lines``)."""
    if log.is_symlink():
        raise SpecError(f"{log} is a symbolic link, not an episode log: remove it and merge again")
    source.confined(log)
    target = run.confined(run.episodes / log.name)
    if target.exists() and log.samefile(target):  # a directory merged into itself: its own log
        return 0
    with writing(target):
        created = not os.path.lexists(target)
        with log.open("rb") as new, run.open_appending(target, "a+b") as old:
            old.seek(0)
            grew = False
            for line in whole_lines(new):
                if line.text is None:
                    skipped.append(skipped_line(log, line.number))
                    continue
                if not grew:
                    copied = old.read(len(line.text))
                    if copied == line.text:
                        continue
                    if copied:
                        raise _not_a_copy(target, log)
                    grew = True
                old.write(line.text)
            if not grew and old.read(1):
                raise _not_a_copy(target, log)
    return 1 if created or grew else 0


def _not_a_copy(target: Path, log: Path) -> SpecError:
    return SpecError(f"{target} is not a copy of {log} (nor the start of one): remove {target} and merge again")


def _benchmark(run_dirs: list[Path], fingerprint: dict[str, Any], benchmark_arg: str | None) -> Benchmark:
    """The benchmark the runs were made with: ``--benchmark`` when given, else the copy a run
    directory keeps, else (a run from before runs kept one) the benchmark of that name."""
    if benchmark_arg:
        return resolve_benchmark(benchmark_arg)[0]
    kept = next((RunDir(d).spec for d in run_dirs if RunDir(d).spec.is_file()), None)
    return load_benchmark(kept) if kept else resolve_benchmark(fingerprint["benchmark"])[0]


def missing_shards(run_dir: Path, episodes: int) -> list[tuple[int, int]]:
    """Shards of an N-way split that left no log in ``run_dir`` though they hold episodes: of
    ``episodes``, shards past the first ``episodes`` are empty (``results.subset``), so a split
    into a billion shards costs what its episodes cost."""
    seen: dict[int, set[int]] = {}
    for log in RunDir(run_dir).logs():
        shard = shard_of(log)
        if shard:
            seen.setdefault(shard[1], set()).add(shard[0])
    return [(i, n) for n, present in sorted(seen.items()) for i in range(1, min(n, episodes) + 1) if i not in present]


def rerun_command(fingerprint: Fingerprint, run_dir: RunDir, *extra: str) -> str:
    """The pytest command that evaluates (part of) the run a fingerprint describes: with the built-in
    benchmark of that name where it is the file the run was made with (equal digests), else with the
    copy of the benchmark file the run keeps (a received run may name a built-in and hold another)."""
    builtin = builtin_benchmarks().get(fingerprint["benchmark"])
    same = builtin is not None and load_benchmark(builtin).digest == fingerprint["benchmark_digest"]
    benchmark = fingerprint["benchmark"] if same else str(run_dir.spec)
    args = [
        "pytest",
        f"--benchmark={benchmark}:{fingerprint['split']}",
        f"--policy={fingerprint['policy']}",
    ]
    args += [f"--vla-tasks={','.join(fingerprint['tasks'])}", f"--episodes={fingerprint['episodes']}"]
    args += [f"--vla-start-seed={fingerprint['start_seed']}", f"--vla-render={fingerprint['render']}"]
    if fingerprint.get("num_envs", 1) > 1:
        args.append(f"--vla-lockstep={fingerprint['num_envs']}")  # the same simulator batch, or another run
    if fingerprint.get("order") == "reference":
        args.append("--vla-reference-order")
    args += extra
    return command_line(args)


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``vlaeval merge`` arguments."""
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, help="merged run directory [the first RUN_DIR]")
    parser.add_argument(
        "--benchmark", help="benchmark name or YAML file [the copy the run directories keep, else the built-in]"
    )
    add_gate_options(parser.add_argument)


def run(args: argparse.Namespace) -> int:
    """0, or with --baseline as pytest's gate: 6 on FAIL, 7 on UNDECIDED, and on PASS 1 while
    episodes are missing or errored (an incomplete run never passes)."""
    gate = GateSettings.from_arguments(args)
    restore = interrupt_on_termination()  # SIGTERM (a CI runner, scancel) or SIGHUP interrupts as Ctrl-C does
    try:
        merged = merge(args.run_dirs, args.out or args.run_dirs[0], args.benchmark, gate)
    except (SpecError, ResultsUnwritable, FileNotFoundError) as exc:
        print(terminal_safe(f"vlaeval merge: {exc}"))
        return 2
    except KeyboardInterrupt:
        print("vlaeval merge: interrupted; run it again to finish (what it copied is kept, whole)")
        return 130
    finally:
        restore()
    print("\n".join(terminal_safe(line) for line in merged.lines))
    outcome = merged.verdict.outcome if merged.verdict else None
    if outcome == FAIL:
        return EXIT_GATE_FAILED
    if outcome == UNDECIDED:
        assert gate is not None  # only a gate is undecided
        return gate.undecided_exit
    return 1 if outcome is not None and not merged.complete else 0
