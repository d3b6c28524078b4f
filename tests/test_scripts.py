"""Scripts are code: every script answers ``--help`` and runs its smoke mode, so a refactor of the
package cannot break one silently."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
PYTHON_SCRIPTS = sorted(path.name for path in SCRIPTS.glob("*.py"))
SHELL_SCRIPTS = ["evaluate.sh", "gpu_check.sh"]
SCRIPT = SCRIPTS / "bench_controller.py"

pytestmark = pytest.mark.minutes(6)


def run_script(
    name: str, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it: its own process, from the repository root, this interpreter first
    on PATH; ``env`` adds to the environment."""
    command = [sys.executable, str(SCRIPTS / name)] if name.endswith(".py") else ["bash", str(SCRIPTS / name)]
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, **(env or {})}
    return subprocess.run([*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", PYTHON_SCRIPTS + SHELL_SCRIPTS)
def test_script_answers_help(name: str) -> None:
    proc = run_script(name, "--help", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage:" in proc.stdout
    assert "Traceback" not in proc.stderr


def benchmark_file(name: str) -> dict:
    return yaml.safe_load((ROOT / "benchmarks" / name).read_text())


def test_mikasa_yaml_smoke_reproduces_the_committed_rows() -> None:
    """The generator's output for four rows of the task table is what benchmarks/mikasa.yaml holds for them."""
    proc = run_script("mikasa_yaml_from_csv.py", "--smoke", timeout=60)
    assert proc.returncode == 0, proc.stderr
    generated, committed = yaml.safe_load(proc.stdout), benchmark_file("mikasa.yaml")
    assert [task["env_id"] for task in generated["tasks"]] == [
        "ShellGameTouch-VLA-v0",
        "RememberColor3-VLA-v0",
        "ShellGameColorLampTouch-VLA-v0",
        "BatteriesCheckerEasy-3-VLA-v0",
    ]
    by_id = {task["env_id"]: task for task in committed["tasks"]}
    assert generated["tasks"] == [by_id[task["env_id"]] for task in generated["tasks"]]
    assert {k: v for k, v in generated.items() if k != "tasks"} == {k: v for k, v in committed.items() if k != "tasks"}


def test_mikasa_yaml_without_a_table_is_one_usage_line() -> None:
    proc = run_script("mikasa_yaml_from_csv.py", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("one of the arguments table --smoke is required")


@pytest.mark.libero
def test_libero_yaml_smoke_reproduces_the_spatial_suite() -> None:
    pytest.importorskip("libero")
    proc = run_script("libero_yaml.py", "--smoke", timeout=120)
    assert proc.returncode == 0, proc.stderr
    generated, committed = yaml.safe_load(proc.stdout), benchmark_file("libero.yaml")
    assert len(generated["tasks"]) == 10
    assert generated["tasks"] == [task for task in committed["tasks"] if task["split"] == "spatial"]
    assert {k: v for k, v in generated.items() if k != "tasks"} == {k: v for k, v in committed.items() if k != "tasks"}


@pytest.mark.long
def test_bench_serving_smoke() -> None:
    """Real servers in child processes, real clients in forked processes: the table and the checks print."""
    pytest.importorskip("torch")
    proc = run_script("bench_serving.py", "--smoke")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2
    assert "round trip, MIKASA-sized observation" in proc.stdout
    assert sum(line.startswith(("PASS", "MISS")) for line in proc.stdout.splitlines()) == 4


@pytest.mark.long
def test_bench_protocols_smoke() -> None:
    """Each wire protocol's server and client, and vla-eval's own server, serve the same policy."""
    pytest.importorskip("torch")
    pytest.importorskip("vla_eval")
    proc = run_script("bench_protocols.py", "--smoke")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [
        line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ") and "| 2 |" in line
    ]
    assert rows == [
        "vlaeval (ws://)",
        "openpi (openpi://)",
        "vla-eval (vla-eval://)",
        "vla-eval's own server (vla-eval://)",
    ]


@pytest.fixture
def gpu_bench():
    """scripts/gpu_bench.py as a module (it imports bench_serving from its own folder)."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(SCRIPTS))
    try:
        import gpu_bench

        yield gpu_bench
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture
def bench_lerobot():
    """scripts/bench_lerobot.py as a module."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import bench_lerobot

        yield bench_lerobot
    finally:
        sys.path.remove(str(SCRIPTS))


def test_bench_lerobot_rounds_give_a_row_its_medians_and_the_range_of_its_walls(bench_lerobot) -> None:
    rounds = [bench_lerobot.Row("`-n 2`", 50.0, 14.0), bench_lerobot.Row("`-n 2`", 40.0, 13.0)]
    rounds.append(bench_lerobot.Row("`-n 2`", 60.0, 16.0))
    row = bench_lerobot.median_row(rounds)
    assert (row.wall, row.startup, row.walls) == (50.0, 14.0, (50.0, 40.0, 60.0))
    assert bench_lerobot.median_row(rounds[:1]).walls == (), "one round: no range shown"
    b1, best = bench_lerobot.Row("`b=1`", 100.0, 15.0), bench_lerobot.Row("`b=16`", 75.0, 15.0)
    assert bench_lerobot.table([row], 16, b1, best)[2] == "| `-n 2` | 50.0 (40.0-60.0) | 14.0 | 0.320 | 2.00x | 1.50x |"
    refused = run_script("bench_lerobot.py", "--rounds", "0", timeout=60)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].endswith("at least 1, not 0")


def episode_record(task: str, seed: int, success: bool, length: int, ret: float, built: bool = False) -> dict:
    return {
        "task": task,
        "seed": seed,
        "success": success,
        "length": length,
        "episode_return": ret,
        "wall_time": 0.5 + length * 0.01 + (2.0 if built else 0.0),
        "env_built": built,
        "render_backend": "gpu",
    }


def test_parity_rows_report_every_difference(gpu_bench) -> None:
    cpu = gpu_bench.Session(1.0, [episode_record("A", 1, True, 20, 1.25), episode_record("A", 2, False, 25, 0.5)])
    gpu = gpu_bench.Session(1.0, [episode_record("A", 1, True, 20, 1.25 + 3e-6), episode_record("A", 2, True, 24, 0.5)])
    rows = gpu_bench.parity_rows(gpu, cpu)
    assert "same, |d return| 3.00e-06" in rows[0][3]
    assert "DIFFERENT success/length" in rows[1][3]
    assert rows[-1][1:] == ["largest |return difference|", "render ['gpu']", "3.000e-06"]
    without_gpu = gpu_bench.parity_rows(None, cpu)
    assert [row[3] for row in without_gpu] == ["gpu skipped", "gpu skipped"]


def test_scaling_row_separates_env_builds_from_steps(gpu_bench) -> None:
    records = [episode_record("A", 1, True, 20, 1.0, built=True), episode_record("A", 2, True, 30, 1.0)]
    session = gpu_bench.Session(4.0, records, worker_rss={10: 2**30}, worker_gpu={10: 3 * 2**29})
    row = gpu_bench.scaling_row("gpu", 4, session)
    assert row[:3] == ["2 scaling", "-n 4", "--vla-render=gpu"]
    # Reused episode: 0.8 s over 30 steps; the built one: 2.7 s, of which 20 steps at that pace.
    assert row[3] == "build 2.2 s, step 26.7 ms, RSS/worker 1024 MiB, GPU/worker 1536 MiB, 0.500 episodes/s"


@pytest.mark.mikasa
def test_the_gpu_wheel_list_covers_every_runtime_dependency() -> None:
    """The GPU machine installs scripts/gpu-requirements.txt without resolving dependencies, on top
    of its image: each of this package's own dependencies must be pinned there or named as the
    image's (a missing one, msgspec, once failed a GPU run at its first benchmark read)."""
    text = (ROOT / "scripts" / "gpu-requirements.txt").read_text()
    image = re.search(r"Taken from the image, at its versions: (.*?);", text, re.S).group(1)

    def name(requirement: str) -> str:
        return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")

    covered = {name(line) for line in text.splitlines() if line and not line.startswith("#")}
    covered |= {name(part) for part in re.split(r",|\band\b", image.replace("#", " ")) if part.strip()}
    block = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M).group(1)
    wanted = {name(r) for r in re.findall(r'^\s*"([^"]+)"', block, re.M)}
    assert {"msgspec", "pytest-xdist"} <= wanted, wanted
    assert wanted - covered == set()


@pytest.mark.long
def test_gpu_check_without_a_gpu_runs_every_cpu_row(tmp_path: Path) -> None:
    """No CUDA device here: one line says so, the CPU rows of every part that has one run, exit 0.
    Run from a fresh clone's point of view: no asset pack downloaded (``MS_ASSET_DIR`` empty), no
    wheel cache, so the default tasks must be ones whose assets ship in the wheels."""
    env = {"MS_ASSET_DIR": str(tmp_path / "no-asset-packs"), "VLAEVAL_GPU_CACHE": str(tmp_path / "no-cache")}
    proc = run_script("gpu_check.sh", "--smoke", timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "no CUDA device: GPU rows skipped" in lines
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and not line.startswith("| part")]
    parts = [row[0].strip() for row in rows]
    assert sorted(set(parts)) == ["1 parity", "2 scaling", "3 blocks", "5 serving", "6 libero"], "placement needs a GPU"
    assert "gpu skipped" in proc.stdout
    assert {row[1].strip() for row in rows if row[0].strip() == "1 parity"} >= {
        "RememberColor3-VLA-v0 seed 4242424242",
        "InterceptSlow-VLA-v0 seed 4242424242",
    }
    blocks = [row[3] for row in rows if row[0].strip() == "3 blocks"]
    assert len(blocks) == 2 and all("2/2 records as K=1" in cell for cell in blocks), blocks
    assert all(row[2].strip() != "skipped" for row in rows if row[0].strip() == "6 libero"), "LIBERO is installed here"


@pytest.mark.long
def test_gpu_check_runs_another_script_after_the_same_setup(tmp_path: Path) -> None:
    """``--script`` runs the given script in gpu_bench.py's place; with ``VLAEVAL_ASSET_DIR`` the
    setup installs (or finds) the wheels' missing data files first, with the installed package."""
    env = {"VLAEVAL_ASSET_DIR": str(tmp_path), "VLAEVAL_GPU_CACHE": str(tmp_path / "no-cache")}
    proc = run_script("gpu_check.sh", "--script", "scripts/bench_collection.py", "--smoke", timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("exit 0: 76 items hold ")
    assert re.search(r"^lamp_mesh: ", proc.stderr, re.M), proc.stderr[-3000:]


@pytest.mark.long
@pytest.mark.mikasa
def test_bench_reference_order_smoke_prints_a_row_per_task_and_the_flip_count() -> None:
    """One task, 2 seeds, the observed policy, the shipped order against fresh envs (in two
    processes): the task's row and the total print, every count within the episodes run."""
    proc = run_script("bench_reference_order.py", "--smoke", "--render=cpu", "--jobs=2", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("| RememberColor3-VLA-v0 |")]
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[1:3] == ["Object", "observed"] and re.fullmatch(r"[0-2]/2 vs [0-2]/2", cells[3]), cells
    assert all(cell.isdigit() and int(cell) <= 2 for cell in cells[4:7]), cells
    assert re.search(r"^success flips in all: \d of 2 episodes; render cpu", proc.stdout, re.M), proc.stdout


@pytest.mark.long
@pytest.mark.mikasa
def test_bench_scheduling_smoke() -> None:
    """The reference runner and a pytest session under -n 2 on the same real episodes agree exactly."""
    proc = run_script("bench_scheduling.py", "--smoke", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "every row gives the same success, length and return per episode: yes" in proc.stdout
    assert [line.split()[0] for line in proc.stdout.splitlines()[2:4]] == ["reference", "affinity"]


@pytest.mark.long
def test_gate_check_puts_each_plan_beside_real_sessions() -> None:
    """Two sessions per case through the real plugin on the coin benchmark: a row per correlation and
    case, the plan's numbers (none for a drop the plan does not name) and the sessions' counts within
    range, regressions on whole seeds included."""
    proc = run_script("gate_check.py", "--runs=2", "--rhos=0.3", "--episodes=20", "--whole-seeds", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 0.3 |")]
    cases = ["true drop 0", "true drop 0.2", "true drop 0.15 on whole seeds", "true drop 0.2 on whole seeds"]
    assert [row.split("|")[2].strip() for row in rows] == cases, proc.stdout
    for row in rows:
        cells = [cell.strip() for cell in row.split("|")[3:-1]]
        if "0.15" in row:
            assert cells[:2] == ["-", "-"], cells
        else:
            assert re.fullmatch(r"\d+%( to \d+%)?", cells[0]) and 0 < float(cells[1]) <= 1, cells
        assert re.fullmatch(r"[0-2]/2", cells[2]) and re.fullmatch(r"[0-2]/2", cells[3]), cells
        assert 0 < float(cells[4]) <= 1, cells


@pytest.mark.long
def test_bench_collection_smoke_counts_every_item() -> None:
    """Two episodes per task of MIKASA's short split: collection alone, no simulator."""
    proc = run_script("bench_collection.py", "--smoke", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("exit 0: 76 items hold ")


def test_blocks_rows_count_each_block_once_and_compare_with_k1(gpu_bench) -> None:
    lone = [episode_record("A", seed, seed % 2 == 0, 20, 0.5) for seed in range(4)]
    for record in lone:
        record["worker"] = "gw0"
    blocks = [dict(record, wall_time=3.0, lockstep=4) for record in lone]  # one block of four: one wall time
    blocks[3] = dict(blocks[3], episode_return=0.75)
    rows = gpu_bench.blocks_rows({1: gpu_bench.Session(8.0, lone), 4: gpu_bench.Session(6.0, blocks)}, "gpu")
    assert [row[1] for row in rows] == ["--vla-lockstep=1", "--vla-lockstep=4"]
    assert rows[0][3].startswith("1,800 episodes/h (session), 5,143 episodes/h (in blocks)")
    assert rows[1][3] == "2,400 episodes/h (session), 4,800 episodes/h (in blocks), SR 0.500 (2/4), 3/4 records as K=1"


@pytest.mark.long
def test_bench_lockstep_smoke_gives_identical_records_in_every_row() -> None:
    """Push-T in lockstep groups and through a served policy: every row's records are K=1's."""
    proc = run_script("bench_lockstep.py", "--smoke", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| -") or line.startswith("| --")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "--vla-lockstep=1, one process",
        "--vla-lockstep=2, one process",
        "-n 2 --vla-serve (batched across workers)",
    ]
    assert all(row.rstrip(" |").endswith("identical") for row in rows)
    assert "every row gives the same success, return and length per episode: yes" in proc.stdout


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``scripts/bench_controller.py`` with ``args`` (the plugin's own cost per episode, no simulator)."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_help_names_the_options() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    assert all(option in done.stdout for option in ("--sizes", "--workers", "--where", "--smoke"))


@pytest.mark.long
def test_smoke_measures_evaluations_beside_a_plain_test() -> None:
    done = run("--smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("serial")]
    assert [row[1] for row in rows] == ["8", "16"], done.stdout
    for row in rows:
        assert all(float(value) > 0 for value in row[2:6]), row
        assert row[6].endswith("x") and row[7].endswith("x"), row
    assert rows[0][7] == "1.00x"  # each size against the first


@pytest.mark.long
def test_bench_cluster_smoke_merges_every_record_and_times_the_shards() -> None:
    done = run_script("bench_cluster.py", "--smoke")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    merges = [line.split() for line in lines[: lines.index(next(x for x in lines if x.startswith("shards:")))]]
    merges = [row for row in merges if row[0].isdigit()]
    assert [row[0] for row in merges] == ["180", "360"], done.stdout  # the script checks each merged every record
    assert all(float(row[1]) > 0 and float(row[4]) > 0 for row in merges) and merges[0][3] == "1.00x"
    local, shards, merge, overhead, _ = lines[-1].split()
    assert float(local) > 0 and float(shards) > 0 and float(merge) > 0 and overhead.endswith("%"), done.stdout


@pytest.mark.long
def test_bench_interpreter_smoke_puts_both_interpreters_side_by_side() -> None:
    """The same sessions with the workers in this interpreter and in another, and the ratio."""
    proc = run_script("bench_interpreter.py", "--smoke", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the same interpreter" in proc.stdout and "another interpreter" in proc.stdout
    assert "per episode" in proc.stdout.splitlines()[-1], proc.stdout
