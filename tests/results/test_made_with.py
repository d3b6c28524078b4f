"""What a run was made with (``results/made_with.py``): every session records its host beside the
simulator's versions and assets; a run resumed on another machine, shards merged from two, runs
compared and a gate's baseline made elsewhere each say in one line that seeds pair in
distribution only; the same stack, runs made before the record and a lerobot-eval baseline
(unknown) are told apart. Other machines arrive as received runs do: their fingerprint names them."""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import CONFIGURED, checkpoint_runs, read_json, run_dir

import pytest_vlaeval
from pytest_vlaeval.cli import main as vlaeval
from pytest_vlaeval.results import made_with as made_with_module
from pytest_vlaeval.results.made_with import MadeWith, differences, this_machine

SHORT = ["--benchmark=fake.yaml:short"]
ELSEWHERE = {
    "arch": "x86_64",
    "cpu": "AMD EPYC 7763 64-Core Processor",
    "cpu_flags": ["avx2", "fma", "avx", "sse4_2"],
    "gpus": ["NVIDIA A100-SXM4-80GB driver 535.104.05"],
}
"""A host this suite never runs on, as a received run's fingerprint names it."""
CPUS_AND_GPUS = (
    r"different CPUs \(.+ vs AMD EPYC 7763 64-Core Processor avx2\) and "
    r"GPUs \(.* vs NVIDIA A100-SXM4-80GB driver 535\.104\.05\)"
)
PAIRING = "seeds pair in distribution, not episode by episode"
GATE_CLAUSE = (
    f"this run and the baseline were made with {CPUS_AND_GPUS}: {PAIRING} \\(the paired test of the mean drop "
    r"stays valid, but pairing gains less, and a seed's flip is no evidence on its own\)"
)


def _made_elsewhere(run: Path, machines: list[dict[str, Any]] | None = None, **fields: Any) -> None:
    """Make ``run`` a run received from another machine (``machines``), or one made before hosts
    and assets were recorded (None); ``fields`` replace others of its fingerprint."""
    path = run / "fingerprint.json"
    fingerprint = read_json(path)
    if machines is None:
        fingerprint.pop("machines", None)
        fingerprint.pop("assets", None)
    else:
        fingerprint["machines"] = machines
    path.write_text(json.dumps(fingerprint | fields))


def test_a_run_records_its_host_and_a_session_resuming_it_on_another_says_so(fake: pytest.Pytester) -> None:
    args = [*SHORT, "--policy=zero", "--episodes=2"]
    first = fake.runpytest(*args)
    assert "pair in distribution" not in first.stdout.str()
    run = run_dir(fake)
    fingerprint = read_json(run / "fingerprint.json")
    assert fingerprint["machines"] == [this_machine()] and fingerprint["assets"] == {}
    assert fingerprint["machines"][0]["cpu"] and "gpus" in fingerprint["machines"][0]

    _made_elsewhere(run, [ELSEWHERE])  # the run was started on another machine and moved here
    resumed = fake.runpytest(*args, "--vla-rerun=failures")
    assert resumed.ret == pytest.ExitCode.TESTS_FAILED, "the session is not refused: the hosts are no part of the run"
    line = re.compile(
        "this run's sessions were made with different CPUs \\(AMD EPYC 7763 64-Core Processor avx2 vs .+\\) and "
        "GPUs \\(NVIDIA A100-SXM4-80GB driver 535\\.104\\.05 vs .*\\): compared with another run, its " + PAIRING
    )
    said = [text for text in resumed.outlines if line.fullmatch(text)]
    assert len(said) == 2, "said at the session's start and in its summary"
    assert read_json(run / "fingerprint.json")["machines"] == [ELSEWHERE, this_machine()]
    fake.runpytest(*args, "--vla-rerun=failures")
    assert read_json(run / "fingerprint.json")["machines"] == [ELSEWHERE, this_machine()], "each host once"


def test_a_session_refused_on_another_machine_leaves_the_runs_hosts_as_they_were(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This host joins the run with the session's first stored episode, not before: a session the
    run's policy refuses leaves every file of it as it was, its fingerprint too."""
    fake.makepyfile(policies=CONFIGURED)
    args = [*SHORT, "-p", "no:cacheprovider", "--policy=policies:Configured", "--vla-tasks=Alpha-v0,Beta-v0"]
    monkeypatch.setenv("WEIGHTS", "a")
    assert fake.runpytest(*args).ret == pytest.ExitCode.TESTS_FAILED
    run = run_dir(fake)
    _made_elsewhere(run, [ELSEWHERE])
    before = (run / "fingerprint.json").read_bytes()
    monkeypatch.setenv("WEIGHTS", "b")
    monkeypatch.setenv("FAIL_SEED", "100")  # an error before the first completed episode shows the difference
    refused = fake.runpytest(*args)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert (run / "fingerprint.json").read_bytes() == before


def test_compare_says_in_one_line_what_the_runs_were_made_with(
    fake: pytest.Pytester, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    early, late = checkpoint_runs(fake, "Early", "Late")
    same = pytest_vlaeval.compare(early, late)
    assert same.made_with is None, "the same host and stack: no line"

    _made_elsewhere(late, [ELSEWHERE])
    out = tmp_path / "out"
    capsys.readouterr()
    assert vlaeval(["compare", str(early), str(late), "--out", str(out)]) == 0
    expected = f"The runs were made with {CPUS_AND_GPUS}: {PAIRING}"
    assert len(re.findall(expected, capsys.readouterr().out)) == 1
    assert re.search(expected, (out / "compare.md").read_text(encoding="utf-8"))
    shown = re.search('<p id="made-with" class="warn">(.*?)</p>', (out / "compare.html").read_text(encoding="utf-8"))
    assert shown is not None and re.match(expected, html.unescape(shown.group(1)))

    _made_elsewhere(late, [this_machine()], packages={"pytest-vlaeval": "0", "mani_skill": "3.0.0b16"})
    _made_elsewhere(early, [this_machine()], packages={"pytest-vlaeval": "1", "mani_skill": "3.0.0b15"})
    assert pytest_vlaeval.compare(early, late).made_with == (
        f"The runs were made with different mani_skill (3.0.0b15 vs 3.0.0b16): {PAIRING} (the paired differences "
        "stay valid, but pairing narrows them less, and a seed's flip is no evidence on its own)."
    ), "the simulator's version is named; this package's own is not what the floats depend on"

    for run in (early, late):
        _made_elsewhere(run, None, packages={"pytest-vlaeval": "0"})  # runs made before the record
    assert pytest_vlaeval.compare(early, late).made_with is None
    assert vlaeval(["compare", str(early), str(late), "--out", str(out)]) == 0
    assert "pair in distribution" not in capsys.readouterr().out

    _made_elsewhere(late, "garbage")  # type: ignore[arg-type]
    assert vlaeval(["compare", str(early), str(late), "--out", str(out)]) == 2
    (refused,) = capsys.readouterr().err.splitlines()
    assert "fingerprint.json (fingerprint) is not as this package writes it" in refused, refused


def test_merge_says_when_its_shards_were_made_on_different_machines(
    fake: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, shard in (("a", "1/2"), ("b", "2/2")):
        fake.runpytest(*SHORT, f"--vla-results={name}", f"--vla-shard={shard}")
    (a,) = (fake.path / "a").iterdir()
    (b,) = (fake.path / "b").iterdir()
    assert vlaeval(["merge", str(a), str(b), "--out", str(fake.path / "same")]) == 0
    assert "were made with" not in capsys.readouterr().out, "shards of one host: no line"

    _made_elsewhere(b, [ELSEWHERE])
    merged = fake.path / "two"
    assert vlaeval(["merge", str(a), str(b), "--out", str(merged)]) == 0
    out = capsys.readouterr().out
    line = re.compile(
        "the merged run's sessions were made with different CPUs \\(.+ vs AMD EPYC 7763 64-Core Processor "
        f"avx2\\) and GPUs \\(.* vs NVIDIA A100-SXM4-80GB driver 535\\.104\\.05\\): compared with another run, its {PAIRING}"
    )
    assert len([text for text in out.splitlines() if line.fullmatch(text)]) == 1, out
    assert read_json(merged / "fingerprint.json")["machines"] == [this_machine(), ELSEWHERE], "never the merging host"


def test_the_gates_verdict_says_the_baseline_was_made_on_another_stack(fake: pytest.Pytester) -> None:
    twenty = [*SHORT, "--episodes=20"]
    fake.runpytest(*twenty, "--vla-results=base")
    (base,) = (fake.path / "base").iterdir()
    same = fake.runpytest(*twenty, "--vla-results=same", f"--vla-baseline={base}")
    assert same.ret == pytest.ExitCode.OK and "pair in distribution" not in same.stdout.str()

    _made_elsewhere(base, [ELSEWHERE])
    elsewhere = fake.runpytest(*twenty, "--vla-results=elsewhere", f"--vla-baseline={base}")
    assert elsewhere.ret == pytest.ExitCode.OK
    lines = elsewhere.outlines
    assert [text for text in lines if re.fullmatch(f"vlaeval gate: {GATE_CLAUSE}", text)], "said at the start"
    (verdict,) = [text for text in lines if text.startswith("vlaeval gate: PASS")]
    assert re.search(f"alpha 0.05; {GATE_CLAUSE}$", verdict), verdict
    run = fake.path / "elsewhere" / base.name
    gate = read_json(run / "summary.json")["gate"]
    assert gate["verdict_line"] == verdict and re.fullmatch(GATE_CLAUSE, gate["made_with"])
    assert f"**{verdict}**" in (run / "report.md").read_text(encoding="utf-8")

    sequential = fake.runpytest(*twenty, "--vla-results=sequential", f"--vla-baseline={base}", "--vla-sequential")
    (verdict,) = [text for text in sequential.outlines if re.match("vlaeval gate: (PASS|FAIL|UNDECIDED): ", text)]
    assert re.search(f"; {GATE_CLAUSE}$", verdict), verdict

    _made_elsewhere(base, None)  # a baseline made before hosts were recorded
    old = fake.runpytest(*twenty, "--vla-results=old", f"--vla-baseline={base}")
    assert old.ret == pytest.ExitCode.OK and "made with" not in old.stdout.str()


def test_a_lerobot_eval_baseline_was_made_with_unknown(fake: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    twenty = [*SHORT, "--episodes=20"]
    fake.runpytest(*twenty, "--vla-results=base")
    (base,) = (fake.path / "base").iterdir()
    lerobot = fake.path / "lerobot"
    lerobot.mkdir()
    shutil.copy(base / "eval_info.json", lerobot / "eval_info.json")  # its file alone, as lerobot-eval leaves it
    gated = fake.runpytest(*twenty, "--vla-results=now", f"--vla-baseline={lerobot}")
    (verdict,) = [text for text in gated.outlines if text.startswith("vlaeval gate: PASS")]
    assert verdict.endswith("alpha 0.05; baseline made with: unknown"), verdict
    assert vlaeval(["merge", str(base), "--baseline", str(lerobot)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("alpha 0.05; baseline made with: unknown")
    assert pytest_vlaeval.compare(base, f"{lerobot}").made_with == "Made with: unknown for lerobot."


@pytest.fixture
def probes_cleared() -> Iterator[None]:
    """The host's probes asked afresh, and again after the test: they are read once a process."""
    cached = (made_with_module._cpu, made_with_module._nvidia_gpus, made_with_module._system_versions)
    for probe in cached:
        probe.cache_clear()
    yield
    for probe in cached:
        probe.cache_clear()


def _tool(folder: Path, name: str, script: str) -> None:
    tool = folder / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)


def test_a_host_is_what_its_tools_say(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probes_cleared: None) -> None:
    """``nvidia-smi``'s GPUs (each model and driver once) and ``dpkg-query``'s installed versions of
    the benchmark's system packages, run for real; a tool that fails leaves its part unknown."""
    _tool(tmp_path, "nvidia-smi", "printf 'NVIDIA H200, 550.54.15\\nNVIDIA H200, 550.54.15\\n'")
    _tool(
        tmp_path,
        "dpkg-query",
        "printf 'mesa-vulkan-drivers 25.0.7-2 installed\\nlibvulkan1 1.3.239 not-installed\\n'; exit 1",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    machine = this_machine(["mesa-vulkan-drivers", "libvulkan1"])
    assert machine["gpus"] == ["NVIDIA H200 driver 550.54.15"]
    assert machine["system_packages"] == {"mesa-vulkan-drivers": "25.0.7-2"}
    assert machine["cpu"] and "workers_elsewhere" not in machine
    assert this_machine(workers_elsewhere=True)["workers_elsewhere"] is True

    made_with_module._nvidia_gpus.cache_clear()
    _tool(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed'; exit 9")
    assert "gpus" not in this_machine(), "a driver nvidia-smi cannot reach: unknown, not none"


def _host(cpu: str, flags: list[str], **more: Any) -> MadeWith:
    return MadeWith(machines=({"arch": "x86_64", "cpu": cpu, "cpu_flags": flags, **more},))  # type: ignore[typeddict-item]


def test_differences_show_plain_text_and_tell_apart_what_the_widest_extension_does_not() -> None:
    assert (
        differences([_host("Xeon", ["avx2", "fma"]), _host("Xeon", ["avx2"])])
        == "different CPUs (Xeon avx2 fma vs Xeon avx2)"
    )
    assert (
        differences([_host("Xeon", ["avx512f"]), _host("EPYC", ["avx2"])])
        == "different CPUs (Xeon avx512f vs EPYC avx2)"
    )
    assert differences([_host("Xeon", ["avx2"]), _host("Xeon", ["avx2"], gpus=[])]) is None, "unknown is no difference"
    assert differences([_host("Xeon", ["avx2"]), _host("EPYC", ["avx2"], workers_elsewhere=True)]) is None, (
        "a host whose workers ran elsewhere says nothing of theirs"
    )
    assert (
        differences([MadeWith(renderer="cpu"), MadeWith(renderer="gpu"), MadeWith()])
        == "different renderers (cpu vs gpu)"
    )
    mixed = MadeWith(machines=(*_host("Xeon", ["avx2"]).machines, *_host("EPYC", ["avx2"]).machines))
    assert differences([mixed, _host("Xeon", ["avx2"])]) == "different CPUs (Xeon avx2 + EPYC avx2 vs Xeon avx2)"
    hostile = differences([_host("Evil\x1b[2J <b>**x**</b> | #", []), _host("Xeon", [])])
    assert hostile is not None and not set("\x1b<>*|#") & set(hostile), hostile
    assert differences([_host("x" * 500, []), _host("Xeon", [])]) == f"different CPUs ({'x' * 117}... vs Xeon)"
