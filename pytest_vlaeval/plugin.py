"""pytest entry point: options, and nothing else until ``--benchmark`` is given.

This module is imported by every pytest run in an environment where the package is installed,
so it imports only pytest, the standard library and ``choices`` (the options' vocabularies, a
standard-library-only leaf). With ``--benchmark``, ``configure`` registers the plugins that do the work:

- ``episodes.collect.BenchmarkCollection``: the benchmark's episodes become the session's items;
- ``episodes.collect.EpisodeReports``: each episode's record rides on its test report;
- ``controller.plugin.ResultsController`` (controller process only): records -> store ->
  canonical JSON, gate, reports.
"""

from __future__ import annotations

import argparse

import pytest

from pytest_vlaeval.choices import (
    EPISODE_LIST_MAX_MIB,
    LIVE_MODES,
    POLICY_PLACEMENTS,
    RENDER_BACKENDS,
    VIDEO_MODES,
    add_gate_options,
    in_range,
    non_empty,
)

DEFAULT_RESULTS = "results"

REPORT_CHARS_GIVEN = pytest.StashKey[bool]()
"""Whether a benchmark session was given ``-r`` (on the command line or in addopts)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vlaeval", "VLA policy evaluation (pytest-vlaeval)")
    group.addoption(
        "--benchmark",
        metavar="NAME",
        help="evaluate a benchmark: a split (short|medium|long|all), NAME[:SPLIT] (mikasa:short), "
        "or a benchmark YAML file[:SPLIT]. Without it the plugin does nothing.",
    )
    group.addoption(
        "--policy",
        metavar="SPEC",
        type=non_empty("a policy", "--policy=random"),
        help="module:attr (class or factory), a built-in: random, zero, a LeRobot checkpoint: lerobot:PATH (run in "
        "LeRobot's interpreter; lerobot:PATH:batched or :unbatched chooses batched inference, by default on a GPU "
        "only), or a policy server: ws://HOST:PORT, openpi://HOST:PORT, vla-eval://HOST:PORT [random]",
    )
    group.addoption(
        "--vla-serve",
        metavar="SPEC",
        type=non_empty("the policy to serve", "--vla-serve=my_pkg.policies:make_policy"),
        help="serve the policy SPEC (module:attr or built-in) from one server process for the whole session, "
        "shared by all xdist workers and batched across their episodes",
    )
    group.addoption(
        "--vla-serve-python",
        metavar="NAME|PYTHON",
        type=non_empty("an interpreter", "--vla-serve-python=openpi"),
        help="the interpreter the served policy runs in: a name under the interpreters folder (vlaeval install NAME "
        "makes the built-in ones) or a Python executable; one with this package in it [this one; lerobot:PATH: lerobot]",
    )
    group.addoption(
        "--vla-policy-placement",
        choices=POLICY_PLACEMENTS,
        default=POLICY_PLACEMENTS[0],
        help="where a policy with an interpreter of its own (lerobot:PATH) runs: beside the env (the workers start "
        "in its interpreter, each loads its own copy; no server) or served to all workers from one process; auto "
        "runs it beside the env where its interpreter holds the benchmark's simulators, unless workers run on other "
        "hosts or a GPU is visible to several workers without --vla-placement [auto]",
    )
    group.addoption("--episodes", type=int, metavar="N", help="episodes per task [the benchmark's protocol]")
    group.addoption(
        "--vla-start-seed", type=in_range(int, 0), metavar="SEED", help="episode i's seed is SEED+i [the benchmark's]"
    )
    group.addoption("--vla-tasks", metavar="IDS", help="comma-separated env ids to evaluate (within the split)")
    group.addoption(
        "--vla-control-arm",
        action="store_true",
        help="also run, on the same seeds, the unperturbed control task of every selected task (the benchmark "
        "file's controls: LIBERO-Plus's are LIBERO's own tasks), and give each group's paired difference "
        "against them (summary.json's control_arm)",
    )
    group.addoption("--vla-results", metavar="DIR", help=f"output root; each run writes DIR/<run>/ [{DEFAULT_RESULTS}]")
    group.addoption(
        "--vla-run-name",
        metavar="NAME",
        help="name of the run's directory under --vla-results [benchmark-split-policy]",
    )
    group.addoption(
        "--vla-render",
        choices=RENDER_BACKENDS,
        help="simulation/render backend: gpu (both on the GPU), gpu-render (CPU physics, GPU rendering), cpu "
        "(software Vulkan); auto is gpu when a CUDA device is present, else cpu [auto]",
    )
    group.addoption(
        "--vla-dist",
        choices=("affinity", "xdist"),
        help="spreading episodes over xdist workers: affinity (a worker keeps one task's env for its episodes; "
        "an idle one takes a new task or the tail of the longest queue) or xdist (its --dist mode) "
        "[affinity, unless --dist is given]",
    )
    group.addoption(
        "--vla-placement",
        metavar="SPEC",
        help="GPUs of the xdist workers (CUDA_VISIBLE_DEVICES), comma-separated GPUS[:WORKERS] segments: "
        "0-3 (one GPU each), 0-1:0-3 (two workers per GPU), 0-3:0-1 (two GPUs each), all. Sets -n when not given.",
    )
    group.addoption(
        "--vla-reference-order",
        action="store_true",
        help="run each task's seeds in order in one env, reset as the benchmark's reference runner resets "
        "(MIKASA: plain resets, so an episode depends on the one before it), to match numbers that runner "
        "produced; one worker per task, no reruns of single episodes, no shards [off: every episode is what "
        "its seed gives in a fresh env]",
    )
    group.addoption(
        "--vla-lockstep",
        type=in_range(int, 1),
        metavar="K",
        help="run K episodes of a task in lockstep in one worker, one batched policy call per step for all of "
        "them (a policy's act_batch, else one instance per episode); one simulator of num_envs=K where the "
        "benchmark has one (MIKASA on GPU), else K envs [1]",
    )
    group.addoption(
        "--vla-timeout",
        type=in_range(float, 0, open_ends="low"),
        metavar="SECONDS",
        help="per-episode limit (policy construction + env build + episode): past it the episode is an error "
        "and, under xdist, a worker stuck in native code is replaced; a serial run cannot be rescued from a "
        "hang in native code (it says so on stderr): use -n 1 or more where that can happen",
    )
    group.addoption(
        "--vla-video",
        choices=VIDEO_MODES,
        default="none",
        help="write a video (WebM) per episode (scene beside the two cameras) under <run>/videos/: "
        "none, failed (every episode that did not succeed) or all [none]",
    )
    group.addoption(
        "--vla-live",
        choices=LIVE_MODES,
        default="auto",
        help="live progress panel: auto shows it on a terminal; elsewhere a line per finished task [auto]",
    )
    group.addoption(
        "--vla-failure-details",
        action="store_true",
        help="show a FAILURES section entry per failed episode (off: the results table counts them; "
        "errors always keep their tracebacks)",
    )
    results = parser.getgroup(
        "vlaeval-results", "VLA evaluation: reruns, shards and the regression gate (pytest-vlaeval)"
    )
    results.addoption(
        "--vla-rerun",
        metavar="WHAT",
        help="run only the episodes whose latest record in the run's store is: errors, failures, missing or "
        "incomplete (errors + missing; --lf cannot see episodes that never ran)",
    )
    results.addoption(
        "--vla-resume", action="store_true", help="skip episodes already recorded (= --vla-rerun=missing)"
    )
    results.addoption(
        "--vla-shard",
        metavar="I/N",
        help="run shard I of N (deterministic, balanced by expected steps; shards beyond the episodes are empty); "
        "auto: from a Slurm job array, a Kubernetes Indexed Job or VLAEVAL_SHARD=I/N, each shard writing only "
        "its episode log for `vlaeval merge` to summarise",
    )
    results.addoption(
        "--vla-episode-list",
        metavar="FILE",
        help="run only these episodes: a JSON list of [task, seed] pairs of the selection (with --vla-shard, "
        f"the list is what is sharded); a regular file of at most {EPISODE_LIST_MAX_MIB} MiB",
    )
    results.addoption(
        "--vla-retries",
        type=in_range(int, 0),
        default=0,
        metavar="N",
        help="retry a crashed or errored episode N times [0]",
    )
    add_gate_options(results.addoption, prefix="vla-")
    results.addoption(
        "--vla-sequential",
        action="store_true",
        help="sequential gate (with --vla-baseline or --vla-min-sr): run seeds in blocks, look after each "
        "complete block and stop once PASS or FAIL is settled at --vla-gate-alpha (or the baseline has no "
        "seed left to pair)",
    )
    results.addoption(
        "--vla-min-sr",
        type=in_range(float, 0, 1),
        metavar="X",
        help="with --vla-sequential and no baseline: PASS once the split SR is surely >= X, FAIL once surely below",
    )
    results.addoption(
        "--vla-block", type=in_range(int, 1), metavar="N", help="seeds per block of the sequential gate [5]"
    )
    results.addoption(
        "--vla-gate-plan",
        action="store_true",
        help="print the seeds the gate needs to decide, simulated for the selected tasks, and exit without "
        "running an episode",
    )
    results.addoption(
        "--vla-gate-plan-probability",
        type=in_range(float, 0, 1, open_ends="both"),
        default=0.8,
        metavar="P",
        help="with --vla-gate-plan: the chance of a correct verdict the recommended budget must reach [0.8]",
    )
    parser.addini("vla_policy", "default for --policy", default="random")
    parser.addini("vla_results", "default for --vla-results", default=DEFAULT_RESULTS)
    parser.addini("vla_render", "default for --vla-render", default="auto")


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Note whether ``-r`` was given, while the arguments with their addopts are at hand: the
    parsed value cannot tell pytest's default ``fE`` from ``-rfE`` given."""
    if early_config.known_args_namespace.benchmark:
        given = parser.parse_known_args(args, namespace=argparse.Namespace(reportchars=None)).reportchars
        early_config.stash[REPORT_CHARS_GIVEN] = given is not None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("benchmark"):
        return
    if not config.stash.get(REPORT_CHARS_GIVEN, True):
        # Failed episodes are results, counted in the results table: the short test summary
        # lists them only under -r (read by the terminal reporter, which is made after this).
        config.option.reportchars = config.option.reportchars.replace("f", "")
    from pytest_vlaeval.configure import start

    start(config)
