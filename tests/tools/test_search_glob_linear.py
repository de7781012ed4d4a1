"""Globs match in linear time (SPEC Q-1, Q-4; K-6: a call cannot stop the host).

``include``, the glob mode's ``query`` and every ignore-file line were compiled to a Python ``re``
pattern, which backtracks: the glob ``*a*a*a*a*b`` against one 200-character file name took 3.9 s
holding the GIL — every session of the process stood still, and no deadline can stop one match —
and each further ``*a`` multiplied that by ~50. Globs are now matched by RE2, with the same answers.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools.search.ignore import compile_glob, parse_ignore_file

PATTERNS = [
    "*a*b", "*.py", "src/**/*.rs", "{a,b}*.{c,d}", "[!-0]x", "[/]", "a?c", "**", "x/**", "\udcffz*",
    "[a-]q", "*\n*", "f\\*o", "[[:alpha:]]", "[+-0]", "**/y/*", "[^a]*", "\\[x]", "a{b,{c,d}}e",
    "*~", "é*", "[é-ü]", ".*", "[-]", "(x)", "a|b", "$x", "^",
]  # fmt: skip
NAMES = [
    "a" * 20, "x.py", "src/q/r/t.rs", "b1.d", "!x", "/x", ".x", "abc", "a/c", "x/y/z", "\udcffzz",
    "-q", "a\nb", "f*o", "fxo", ":]", "q/x.py", "+x", "0x", "y/q", "a/y/b", "[x]", "ace", "abe",
    "q~", "éa", "ö", "-", "(x)", "a|b", "$x", "^", "src/a.rs", "x",
]  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
def test_q4_linear_matching_answers_as_the_regex_did(pattern):
    """Q-4: RE2 is used, and agrees with the Python spelling on every name (lone surrogates,
    classes around '/', escapes, alternation, '**')."""
    glob = compile_glob(pattern)
    assert glob.linear is not None
    for name in NAMES:
        assert glob.matches(name, False) == (glob.regex.match(name) is not None), (pattern, name)


def test_q4_a_backtracking_glob_is_fast():
    """Q-4, K-6: 3.9 s (GIL held) for four ``*a`` before; now microseconds, ten ``*a`` too."""
    start = time.monotonic()
    assert not compile_glob("*a" * 4 + "*b").matches("a" * 200, False)
    assert not any(p.matches("a" * 200, False) for p in parse_ignore_file("*a" * 4 + "*b\n"))
    assert time.monotonic() - start < 1.0
    assert not compile_glob("*a" * 10 + "*b").matches("a" * 250, False)


def test_q4_glob_mode_on_a_hostile_name_returns(tmp_path: Path):
    """Q-4: through the model-side tool (before: ~4 s for this query, hours for ``*a`` x 8)."""
    (tmp_path / ("a" * 200)).write_text("x\n")
    (tmp_path / ("a" * 190 + "b")).write_text("x\n")
    with Agent() as agent:
        s = agent.session(
            str(tmp_path), options=SessionOptions(permission_policy=PermissionPolicy(allow=["search"]))
        )
        start = time.monotonic()
        result = s.model_tool_call("search", {"mode": "glob", "query": "*a" * 4 + "*b", "sort": "path"})
        assert result.exit_code == 0, result.output
        assert result.metadata["paths"] == ["a" * 190 + "b"]
        assert time.monotonic() - start < 30


def test_q2_names_with_control_characters_cannot_forge_result_lines(tmp_path: Path):
    """Q-2, Q-4 (as ls does): a newline or escape in a file name is shown quoted, C-escaped, in the
    text of grep (content, count, files_with_matches), glob, bm25 and indexed; metadata keeps it exact. A
    file named ``x\\nREADME.md:1:fake`` printed a match line of a file that does not exist."""
    evil = "x\nREADME.md:1:fake \x1b[31mred"
    (tmp_path / evil).write_text("needle\n")
    with Agent() as agent:
        s = agent.session(
            str(tmp_path), options=SessionOptions(permission_policy=PermissionPolicy(allow=["search"]))
        )
        calls = [
            {"mode": "grep", "query": "needle"},
            {"mode": "grep", "query": "needle", "output_mode": "count"},
            {"mode": "grep", "query": "needle", "output_mode": "files_with_matches"},
            {"mode": "glob", "query": "*", "sort": "path"},
            {"mode": "bm25", "query": "needle"},
            {"mode": "indexed", "query": "needle"},
        ]
        for args in calls:
            result = s.model_tool_call("search", args)
            assert result.exit_code == 0, result.output
            assert "\x1b" not in result.output and "\nREADME.md:1:fake" not in result.output, args
            assert '"x\\nREADME.md:1:fake \\x1b[31mred"' in result.output, (args, result.output)
        for i in (2, 3):  # files_with_matches, glob (ripgrep printed the names one per line)
            assert s.model_tool_call("search", calls[i]).metadata["paths"] == [evil]
        counts = s.model_tool_call("search", calls[1]).metadata["counts"]
        assert counts == [{"path": evil, "count": 1}]


def test_q4_deeply_nested_braces_are_refused_or_skipped(tmp_path: Path):
    """Q-1, Q-4, K-8: 1,000 nested ``{`` made Python's re parser raise RecursionError: as a
    ``.gitignore`` line it failed every grep and glob of a ``git:`` view of the repository; as a
    query it surfaced as a crash. Now the query is invalid_argument and the ignore line skipped."""
    import subprocess

    deep = "{" * 1000 + "a" + "}" * 1000
    (tmp_path / "a.txt").write_text("needle\n")
    (tmp_path / ".gitignore").write_text(deep + "\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        check=True,
    )
    assert parse_ignore_file(deep + "\n*.log\n")[0].source == "*.log"
    policy = SessionOptions(permission_policy=PermissionPolicy(allow=["search"]))
    with Agent() as agent:
        view = agent.session(f"git:{tmp_path}@HEAD", options=policy)
        result = view.model_tool_call("search", {"mode": "grep", "query": "needle"})
        assert result.exit_code == 0 and "a.txt:1:needle" in result.output, result.output
        local = agent.session(str(tmp_path), options=policy)
        refused = local.model_tool_call("search", {"mode": "glob", "query": deep})
        assert refused.error_kind["type"] == "invalid_argument"
        assert "more than 32 deep" in refused.output
