"""Text from elsewhere made safe to print, and command lines made safe to run.

A received run, a benchmark file or a policy's name can hold any character. A terminal obeys the
control sequences among them (ESC sets the title, clears the screen, recolours what follows;
U+202E reverses it), and a shell runs whatever a quote lets out. So every such text is printed
through ``terminal_safe``, and every command the tool advises is built from its argv by
``command_line``, never by pasting values into a string.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""What a terminal acts on instead of showing: C0 and C1 controls (ESC among them), DEL, the line
and paragraph separators, the bidirectional marks, embeddings, overrides and isolates, and lone
surrogates (a file name that is not UTF-8), which cannot be printed at all."""


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character of ``UNSAFE`` shown as its escape (``\\x1b``, ``\\u202e``):
    the same on every terminal, and nothing a terminal acts on."""
    return UNSAFE.sub(lambda match: _escape(match.group()), text)


def terminal_lines(text: str) -> str:
    """Lines of the tool's own making (a table, a script) that hold such text: each made safe, the
    line breaks between them kept."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))


def _ansi_c_bytes(char: str) -> str:
    """``char`` as ``$'...'`` escapes of its bytes, which the shell puts back as they were (a
    surrogate from a file name that is not UTF-8 is the byte it stood for)."""
    data = char.encode("utf-8", "surrogateescape" if "\udc80" <= char <= "\udcff" else "surrogatepass")
    return "".join(f"\\x{byte:02x}" for byte in data)


def shell_word(argument: str) -> str:
    """One argument as the shell reads it back exactly: ``shlex.quote``'s single quotes, or, where
    it holds a character of ``UNSAFE``, ANSI-C quoting (``$'...'``, bash and zsh) with that
    character as escaped bytes, so the printed command shows no control character either."""
    if not UNSAFE.search(argument):
        return shlex.quote(argument)
    escaped = (_ansi_c_bytes(c) if UNSAFE.match(c) else f"\\{c}" if c in "\\'" else c for c in argument)
    return "$'" + "".join(escaped) + "'"


def command_line(argv: Iterable[str]) -> str:
    """The command ``argv`` as a line to print and paste into a shell: every argument quoted."""
    return " ".join(shell_word(argument) for argument in argv)
