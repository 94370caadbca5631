from __future__ import annotations

from bwlab.errors import last_line


def test_last_line_is_the_last_non_blank_line() -> None:
    assert last_line("warning: x\nfatal: bad object HEAD\n\n") == "fatal: bad object HEAD"
    assert last_line("  indented  \n   \n") == "indented"
    assert last_line("") == "no output" and last_line(" \n", default="?") == "?"
