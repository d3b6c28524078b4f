"""Text from a received run made safe to print, and command lines that the shell reads back
exactly: whatever the text, nothing a terminal acts on is printed, and every argument of a
printed command reaches its program byte for byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_vlaeval.printable import UNSAFE, command_line, terminal_lines, terminal_safe

TEXT = st.text(
    st.one_of(
        st.characters(blacklist_characters="\x00"),
        st.sampled_from("\x1b\x07\x7f\x85\x9b\u202e\u2066\u2028\n\r\t'\"\\$`!;&|<>() "),
        st.sampled_from(["\udc80", "\udcff"]),  # a file name's bytes that are not UTF-8
    )
)
"""Any text, control characters, quotes and lone surrogates weighed up."""

ARGUMENT = TEXT.filter(lambda text: all(not "\ud800" <= c <= "\udfff" or "\udc80" <= c <= "\udcff" for c in text))
"""Any text an argument can be: no NUL, and of the lone surrogates only those that stand for a byte
that is not UTF-8 (``os.fsdecode``'s escapes); ``\ud800`` cannot come from the OS."""


def test_plain_text_is_printed_as_it_is_and_controls_as_their_escapes() -> None:
    assert terminal_safe("Alpha-v0 réussi: 50% [6-98%]") == "Alpha-v0 réussi: 50% [6-98%]"
    assert terminal_safe("a\x1b[2Jb\x9bc\x7fd\u202ee\nf") == "a\\x1b[2Jb\\x9bc\\x7fd\\u202ee\\x0af"
    assert terminal_lines("one \x1b[8m\ntwo") == "one \\x1b[8m\ntwo"


@given(TEXT)
def test_nothing_a_terminal_acts_on_is_left(text: str) -> None:
    shown = terminal_safe(text)
    assert not UNSAFE.search(shown) and terminal_safe(shown) == shown
    shown.encode("utf-8")  # printable on any UTF-8 terminal: no lone surrogate


@settings(max_examples=60, deadline=None)
@given(st.lists(ARGUMENT, min_size=1, max_size=4))
def test_the_shell_reads_every_argument_back_exactly_and_the_line_shows_no_control(arguments: list[str]) -> None:
    line = command_line(["printf", "%s\\0", *arguments])
    assert not UNSAFE.search(line)
    shown = subprocess.run(["bash", "-c", line], capture_output=True, check=True).stdout
    assert shown.split(b"\0")[:-1] == [os.fsencode(argument) for argument in arguments]


def test_a_quote_in_an_argument_runs_nothing(tmp_path: Path) -> None:
    line = command_line(["echo", "x'; touch PWNED; echo '", "$(touch PWNED)", "\x1b'; touch PWNED"])
    subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, check=True)
    assert not os.listdir(tmp_path)
