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
import shlex
import shutil
from pathlib import Path
from typing import Any

from pytest_vlaeval.errors import ResultsUnwritable, SpecError
from pytest_vlaeval.report.html import write_report
from pytest_vlaeval.results.canonical import summary, write_canonical
from pytest_vlaeval.results.chart import write_chart
from pytest_vlaeval.results.latest import LatestRecords
from pytest_vlaeval.results.rundir import RunDir, attempt_write, shard_of, writing
from pytest_vlaeval.results.runfiles import read_json
from pytest_vlaeval.results.schema import Fingerprint
from pytest_vlaeval.results.store import RunStore
from pytest_vlaeval.spec import Benchmark, builtin_benchmarks, load_benchmark, resolve_benchmark, select


def merge(run_dirs: list[Path], out: Path, benchmark_arg: str | None = None) -> list[str]:
    """Merge ``run_dirs`` into ``out``; returns the lines to print. Raises SpecError on a mismatch."""
    fingerprints = {d: read_json(RunDir(d).fingerprint, Fingerprint, "fingerprint") for d in run_dirs}
    reference = next(iter(fingerprints.values()))
    for directory, fingerprint in fingerprints.items():
        if fingerprint != reference:
            diff = ", ".join(
                k for k in sorted(set(reference) | set(fingerprint)) if reference.get(k) != fingerprint.get(k)
            )
            raise SpecError(f"{directory} is not the same run as {run_dirs[0]} (differs in: {diff})")
    policy_files = [RunDir(d).policy for d in run_dirs]
    policies = {
        json.dumps(read_json(path, dict[str, Any], "policy"), sort_keys=True) for path in policy_files if path.exists()
    }
    if len(policies) > 1:
        raise SpecError(f"the runs were made with different policy configurations: {sorted(policies)}")

    store = RunStore(out)
    store.claim(reference)
    if policies:
        store.claim(json.loads(policies.pop()), store.dir.policy)
    copied = 0
    for directory in run_dirs:
        for log in RunDir(directory).logs():
            copied += _copy_log(log, store.dir.episodes / log.name)

    benchmark = _benchmark(run_dirs, reference, benchmark_arg)
    if benchmark.digest != reference["benchmark_digest"]:
        raise SpecError(f"benchmark {benchmark.name!r} here differs from the one the run used; pass --benchmark FILE")
    store.keep_spec(benchmark)
    selection = select(
        benchmark,
        reference["split"],
        env_ids=reference["tasks"],
        start_seed=reference["start_seed"],
        episodes=reference["episodes"],
    )
    with store.locked():  # a session may be writing the same directory's canonical files
        body, per_task = summary(selection, LatestRecords.read(store.dir), interrupted=False)
        write_canonical(store.dir, body, per_task)
    unwritten: list[str] = []
    attempt_write(
        store.dir.report_html, lambda: write_report(store.dir, body, per_task, reference["policy"]), unwritten
    )
    attempt_write(store.dir.chart, lambda: write_chart(body, per_task, store.dir.chart), unwritten)

    lines = [f"merged {len(run_dirs)} run directories into {out}: {copied} new or grown episode logs"]
    lines += [f"not written: {line}" for line in unwritten]
    lines += [
        f"shard {index}/{count} has no episode log: run `{rerun_command(reference, store.dir, f'--vla-shard={index}/{count}')}`"
        for index, count in missing_shards(out)
    ]
    lines.append(
        f"episodes: {body['n_completed']} completed, {body['n_errors']} errors, {body['n_missing']} missing of {body['n_expected']}; "
        f"split SR {body['sr_split']}"
    )
    if body["n_errors"] or body["n_missing"]:
        lines.append(
            f"fill the gaps with: {rerun_command(reference, store.dir, '--vla-rerun=incomplete', f'--vla-results={out.parent}')}"
        )
    return lines


def _copy_log(log: Path, target: Path) -> int:
    """Copy an episode log into the merged run (1), or bring an earlier copy up to date (1 when it
    grew, 0 when it was whole): a log only grows by whole lines, so an earlier copy (made while its
    session was still writing, or cut short by a killed merge) is a prefix of it, and is extended."""
    with writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(log, target)
            return 1
        have, source = target.stat().st_size, log.stat().st_size
        with log.open("rb") as new, target.open("rb") as old:
            if have > source or new.read(have) != old.read():
                raise SpecError(
                    f"{target} is not a copy of {log} (nor the start of one): remove {target} and merge again"
                )
            rest = new.read()
        if not rest:
            return 0
        with target.open("ab") as old:
            old.write(rest)
        return 1


def _benchmark(run_dirs: list[Path], fingerprint: dict[str, Any], benchmark_arg: str | None) -> Benchmark:
    """The benchmark the runs were made with: ``--benchmark`` when given, else the copy a run
    directory keeps, else (a run from before runs kept one) the benchmark of that name."""
    if benchmark_arg:
        return resolve_benchmark(benchmark_arg)[0]
    kept = next((RunDir(d).spec for d in run_dirs if RunDir(d).spec.is_file()), None)
    return load_benchmark(kept) if kept else resolve_benchmark(fingerprint["benchmark"])[0]


def missing_shards(run_dir: Path) -> list[tuple[int, int]]:
    """Shards of an N-way split that left no log in ``run_dir``."""
    seen: dict[int, set[int]] = {}
    for log in RunDir(run_dir).logs():
        shard = shard_of(log)
        if shard:
            seen.setdefault(shard[1], set()).add(shard[0])
    return [(i, n) for n, present in sorted(seen.items()) for i in range(1, n + 1) if i not in present]


def rerun_command(fingerprint: Fingerprint, run_dir: RunDir, *extra: str) -> str:
    """The pytest command that evaluates (part of) the run a fingerprint describes: with the built-in
    benchmark of that name, else with the copy of the benchmark file the run keeps."""
    benchmark = fingerprint["benchmark"] if fingerprint["benchmark"] in builtin_benchmarks() else str(run_dir.spec)
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
    return shlex.join(args)


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``vlaeval merge`` arguments."""
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, help="merged run directory [the first RUN_DIR]")
    parser.add_argument(
        "--benchmark", help="benchmark name or YAML file [the copy the run directories keep, else the built-in]"
    )


def run(args: argparse.Namespace) -> int:
    try:
        lines = merge(args.run_dirs, args.out or args.run_dirs[0], args.benchmark)
    except (SpecError, ResultsUnwritable, FileNotFoundError) as exc:
        print(f"vlaeval merge: {exc}")
        return 2
    except KeyboardInterrupt:
        print("vlaeval merge: interrupted; run it again to finish (what it copied is kept, whole)")
        return 130
    print("\n".join(lines))
    return 0
