"""``ls`` text output escapes names that could forge lines or terminal output; metadata keeps
them exact (SPEC B-1, R-6)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.ls import TOOL
from tools.shown_names import shown_name


def _ls(root: Path) -> tuple[str, list[str]]:
    ctx = make_context(LocalWorkspace(root), tool_name="ls")
    res = asyncio.run(TOOL.run(ctx, TOOL.validate({})))
    return res.output, [e["name"] for e in res.metadata["entries"]]


def test_b1_ls_escapes_control_characters_in_names_and_keeps_metadata_exact(tmp_path: Path) -> None:
    """A name with a newline could add a fake entry line; ESC could drive a terminal; U+202E
    could reverse what is read; an undecodable byte is not text. Each is shown quoted with
    escapes, and ``metadata.entries`` names stay byte-exact."""
    forged = "a\n  passwords.txt  (1B)"
    names = [forged, "\x1b[31mred", "x\u202etxt.exe", "plain.txt", "caf\u00e9"]
    for name in names:
        (tmp_path / name).write_text("x")
    os.close(os.open(os.fsencode(tmp_path) + b"/bad\xff", os.O_CREAT | os.O_WRONLY, 0o644))
    output, listed = _ls(tmp_path)
    assert sorted(listed) == sorted([*names, "bad\udcff"])
    lines = output.splitlines()
    assert len(lines) == 1 + 6, output  # the header and one line per entry: nothing forged
    assert '  "a\\n  passwords.txt  (1B)"  (1B)' in lines
    assert '  "\\x1b[31mred"  (1B)' in lines and '  "x\\u202etxt.exe"  (1B)' in lines
    assert '  "bad\\xff"  (0B)' in lines
    assert "  plain.txt  (1B)" in lines and "  caf\u00e9  (1B)" in lines
    assert not any(ch in output for ch in "\x1b\u202e\udcff")


def test_b1_shown_name_quotes_only_what_needs_it() -> None:
    assert shown_name("src") == "src"
    assert shown_name('say "hi"\\now') == '"say \\"hi\\"\\\\now"'
    assert shown_name("\x85\u2028") == '"\\u0085\\u2028"'
