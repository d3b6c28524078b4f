"""The terminal summary shows the names a benchmark file chooses (an axis's label, a task's group)
as text: never a control sequence for the terminal, never rich markup; and the chart draws them."""

from __future__ import annotations

import pytest

from pytest_vlaeval.printable import UNSAFE

GROUP = r"\e]0;owned\a\e[32mPASS\u202e[blink]x $\\notasymbol$"
"""As YAML writes it: set the title, a green verdict, reverse what follows; rich markup; mathtext."""


def test_a_benchmark_files_names_reach_the_summary_as_text(fake: pytest.Pytester) -> None:
    spec = (fake.path / "fake.yaml").read_text()
    spec = spec.replace("label: memory type", r'label: "kind \e[2J[bold red]"')
    (fake.path / "hostile.yaml").write_text(spec.replace("memory_type: Object", f'memory_type: "{GROUP}"'))
    result = fake.runpytest("--benchmark=hostile.yaml:short", "--episodes=1", "-p", "no:cacheprovider")
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED and "INTERNALERROR" not in output, output
    assert not UNSAFE.search(output.replace("\n", "")), "no control character reaches the terminal"
    assert r"kind \x1b[2J[bold red]" in output and r"\x1b]0;owned\x07\x1b[32mPASS\u202e[blink]x $\notasymbol$" in output
    assert list((fake.path / "results").glob("*/summary.png")), "the chart is drawn"


def test_a_results_folder_the_user_names_reaches_the_summary_as_text(fake: pytest.Pytester) -> None:
    """``--vla-results`` is the user's own, and still shown, not obeyed: an ESC in it was printed raw
    in the ``results:`` line."""
    result = fake.runpytest(
        "--benchmark=fake.yaml:short", "--episodes=1", "--vla-results=out\x1b[2J", "-p", "no:cacheprovider"
    )
    output = result.stdout.str()
    assert not UNSAFE.search(output.replace("\n", "")), "no control character reaches the terminal"
    (line,) = [line for line in output.splitlines() if line.startswith("results: ")]
    assert line.startswith(f"results: {fake.path}/out\\x1b[2J/fake-short-random-"), line
