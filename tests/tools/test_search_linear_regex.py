"""Deadlines hold for any grep pattern on the pure-Python engine (SPEC K-6, Q-2; issue 15 item 7).

``(a+)+$`` backtracks exponentially in Python ``re``; on a ``git:`` workspace (the Python engine)
it once ran 300 s past a 5 s timeout. The engine now searches with RE2 (linear time), so such
patterns finish fast — or, if anything is slow, end within the deadline with a typed ``timeout``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernel import SessionOptions
from orchestrator import Agent
from tools.search.dialect import translate
from tools.search.linear_regex import compile_linear, re2_spelling

CATASTROPHIC = [r"(a+)+$", r"(a|aa)+$", r"(a*)*b", r"^(\w+\s?)*$", r"(x+x+)+y", r"(.*a){12}"]


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    line = "a" * 40 + "!\n"
    (tmp_path / "evil.txt").write_text(line * 2000 + "a" * 5000 + "\n")
    (tmp_path / "words.txt").write_text(("word " * 30 + "!\n") * 500)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        check=True,
    )
    return tmp_path


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_k6_catastrophic_patterns_on_a_git_workspace_respect_the_deadline(
    agent: Agent, repo: Path, pattern: str
) -> None:
    assert compile_linear(translate(pattern).rust, True) is not None, "RE2 reads the pattern exactly"
    # Backtracking would need ~2^40 steps per line here: only a linear-time engine finishes at all.
    opts = SessionOptions(tool_timeouts_ms={"search": 30_000})
    s = agent.session(f"git:{repo}@HEAD", opts)
    for mode in ("content", "count", "files_with_matches"):
        res = s.tool("search", {"mode": "grep", "query": pattern, "output_mode": mode})
        assert res.exit_code == 0, res.output[:300]
    s.close()


def test_q2_re2_spelling_keeps_rusts_unicode_classes() -> None:
    rx = compile_linear(translate(r"ü\w+").rust, True)
    assert rx is not None and rx.search("süße ünïcode".encode()) is not None
    assert rx.search("ü!".encode()) is None
    assert compile_linear(translate(r"\d+").rust, True).search("٣٤".encode()) is not None  # Arabic-Indic
    assert compile_linear(translate(r"a\sb").rust, True).search("a\u3000b".encode()) is not None
    assert compile_linear(translate("(?i)STRASSE").rust, True).search(b"strasse") is not None
    assert re2_spelling(r"[\w-]") == r"[\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}-]"
    assert compile_linear(translate(r"[\W]").rust, True) is not None  # spelled (?:[^word])
    assert compile_linear(translate(r"[^a\W]").rust, True) is None  # no exact RE2 spelling


def test_q2_a_class_with_w_or_s_is_spelled_for_re2() -> None:
    """Q-2: ``[a\\W]``, ``[\\S\\d]`` were left to Python ``re``; now RE2 reads them, with re's answers."""
    import re

    for pattern in (r"[\W]", r"[a\W]+", r"[\S\d]", r"x[\W_]y", r"[]\W]", r"[[:alpha:]\S]", r"[\W]{2}"):
        d = translate(pattern)
        rx = compile_linear(d.rust, True)
        assert rx is not None, pattern
        for text in ("a", "!", "é", " ", "x y", "x_y", "\u3000", "]", "-", "\t", "x!y", "!!"):
            assert (rx.search(text.encode()) is not None) == (re.search(d.python, text) is not None), (
                pattern,
                text,
            )


@pytest.mark.parametrize("pattern", [r"(?:[a\W]+)+b", r"(?:[^\W\d]+)+!", r"(?:a{1,1001})+b"])
def test_k6_a_pattern_without_a_linear_form_is_refused_on_the_python_engine(
    agent: Agent, tmp_path: Path, pattern: str
) -> None:
    """K-6, K-8: Python ``re`` backtracked on these holding the GIL — (?:[a\\W]+)+b took 4.9 s on a
    line of 26 'a's (x4 per two more: a line of 40 would stop the whole process for days). They
    are now read by RE2, or refused (invalid_argument, reason regex_not_linear) before any file is
    read. (The line here is short, so the old fallback also answered quickly.)"""
    (tmp_path / "x.txt").write_text("a" * 12 + "\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        check=True,
    )
    s = agent.session(f"git:{tmp_path}@HEAD", SessionOptions(tool_timeouts_ms={"search": 30_000}))
    res = s.tool("search", {"mode": "grep", "query": pattern})
    if pattern.startswith("(?:[a"):
        assert compile_linear(translate(pattern).rust, True) is not None
        assert res.exit_code == 0, res.output
    else:
        assert res.error_kind is not None, res.output
        assert (res.error_kind["type"], res.error_kind["reason"]) == ("invalid_argument", "regex_not_linear")
    s.close()
