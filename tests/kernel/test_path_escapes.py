"""The path-escape corpus (SPEC B-6): zero escapes, every outside case a typed ``path_outside_workspace``.

Every case runs against every resolving entry point of ``LocalWorkspace`` (``resolve``, ``normalize``,
``stat``, ``read_bytes``, ``list_dir``, ``walk_files``) and, where it applies, of ``GitTreeWorkspace``
built from a commit holding the same symlinks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import ToolError
from kernel.gittree import GitTreeWorkspace
from kernel.workspace import LocalWorkspace
from tools.git.testing import Link, RepoBuilder

SECRET = "TOP-SECRET-OUTSIDE"

# (case id, path) — each must be refused with path_outside_workspace.
OUTSIDE: list[tuple[str, str]] = [
    ("dotdot", "../x"),
    ("dotdot-deep", "../../../../etc/passwd"),
    ("dotdot-trailing-slash", "../"),
    ("dot-then-dotdot", "./../x"),
    ("in-then-out", "a/../../x"),
    ("deep-then-out", "inside/deep/../../../x"),
    ("dotdot-after-file", "inside/deep/file.txt/../../../../x"),
    ("absolute", "/etc/passwd"),
    ("absolute-root", "/"),
    ("absolute-double-slash", "//etc/passwd"),
    ("backslash-absolute", "\\etc\\passwd"),
    ("drive-letter", "C:/Windows"),
    ("nul-byte", "inside\x00/../../x"),
    ("nul-only", "\x00"),
    ("fullwidth-solidus", "..／..／etc／passwd"),
    ("fullwidth-full-stop", "．．/x"),
    ("one-dot-leader", "\u2024\u2024/x"),
    ("two-dot-leader", "\u2025/x"),
    ("small-full-stop", "\ufe52\ufe52/x"),
    ("fraction-slash", "..\u2044..\u2044etc"),
    ("division-slash", "..\u2215x"),
    ("big-solidus", "..\u29f8x"),
    ("fullwidth-reverse-solidus", "..＼x"),
    ("backslash-dotdot", "..\\..\\x"),
    ("fullwidth-absolute", "／etc／passwd"),
    ("internal", ".a3s/artifacts.json"),
    ("internal-root", ".a3s"),
    ("internal-dot", "./.a3s/x"),
    ("internal-via-dotdot", "inside/../.a3s/x"),
    ("long-dotdot", "../" * 1500),
    ("link-parent-outside", "link_out/secret.txt"),
    ("link-parent-outside-trailing-slash", "link_out/"),
    ("link-outside-itself", "link_out"),
    ("link-absolute-outside", "link_abs_out/secret.txt"),
    ("link-etc-passwd", "link_passwd"),
    ("link-dev-null", "link_dev_null"),
    ("link-loop", "loop_a"),
    ("link-loop-inner", "loop_a/x"),
    ("link-self-loop", "self_loop"),
    ("link-leaves-and-reenters", "chain_leave/inside/deep/file.txt"),
    ("link-dangling-outside", "dangling_out"),
    ("link-dangling-outside-child", "dangling_out/new.txt"),
    ("link-deep-then-dotdot-out", "deep_link/../../.."),
    ("link-outside-then-dotdot-back", "link_out/../ws/inside/deep/file.txt"),
    ("link-climbs-out", "inside/link_up/x"),
    ("link-to-root-then-up", "root_link/../x"),
    ("link-into-internal", "a3s_link/secret"),
    ("link-chain-to-outside", "chain_a"),
    # A missing component used to switch the resolver to lexical mode, so '..' after it reached a
    # symlink that was then followed by the OS: these read the outside file before issue 15.
    ("missing-then-dotdot-through-link", "nothere/../link_out/secret.txt"),
    ("missing-deep-then-dotdot-through-link", "a/b/c/../../../link_out/secret.txt"),
    ("missing-then-dotdot-through-abs-link", "nothere/../link_abs_out/secret.txt"),
    ("missing-then-dotdot-into-internal", "nothere/../a3s_link/secret"),
]

# (case id, path, physical location relative to the root) — must resolve inside.
INSIDE: list[tuple[str, str, str]] = [
    ("plain", "inside/deep/file.txt", "inside/deep/file.txt"),
    ("dot-segments", "./inside/./deep//file.txt", "inside/deep/file.txt"),
    ("dotdot-inside", "inside/deep/../deep/file.txt", "inside/deep/file.txt"),
    ("trailing-slash", "inside/", "inside"),
    ("link-deep-then-dotdot-in", "deep_link/../x.txt", "inside/x.txt"),
    ("link-absolute-inside", "abs_in/deep/file.txt", "inside/deep/file.txt"),
    ("link-chain-inside", "chain_in", "inside/deep/file.txt"),
    ("fraction-slash-name", "a\u2044b", "a\u2044b"),
    ("ligature-name", "\ufb01le.txt", "\ufb01le.txt"),
    ("dotted-name", "...", "..."),
    ("dotdot-prefix-name", "..foo", "..foo"),
    ("long-inside", "a/" * 1000 + "f", "a/" * 1000 + "f"),
    ("missing-file", "inside/new.txt", "inside/new.txt"),
    ("missing-then-dotdot-back", "nothere/../inside/x.txt", "inside/x.txt"),
    ("missing-dirs", "inside/new/deeper/f.txt", "inside/new/deeper/f.txt"),
]


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Any]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    root = tmp_path / "ws"
    (root / "inside" / "deep").mkdir(parents=True)
    (root / "inside" / "deep" / "file.txt").write_text("inside\n")
    (root / "inside" / "x.txt").write_text("x\n")
    (root / ".a3s").mkdir()
    (root / ".a3s" / "secret").write_text(SECRET)
    links = {
        "link_out": "../outside",
        "link_abs_out": str(outside),
        "link_passwd": "/etc/passwd",
        "link_dev_null": "/dev/null",
        "loop_a": "loop_b",
        "loop_b": "loop_a",
        "self_loop": "self_loop",
        "chain_leave": "../ws",
        "dangling_out": "../outside/nothing-here",
        "deep_link": "inside/deep",
        "inside/link_up": "../..",
        "root_link": ".",
        "a3s_link": ".a3s",
        "chain_a": "chain_b",
        "chain_b": "link_out",
        "abs_in": str(root / "inside"),
        "chain_in": "deep_link/file.txt",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    return {"root": root, "outside": outside, "links": links}


def _entry_points(ws: LocalWorkspace) -> list[Callable[[str], Any]]:
    return [ws.resolve, ws.normalize, ws.stat, ws.read_bytes, ws.list_dir, lambda p: list(ws.walk_files(p))]


@pytest.mark.parametrize(("case", "path"), OUTSIDE, ids=[c for c, _ in OUTSIDE])
def test_b6_local_outside_paths_are_refused_everywhere(layout: dict[str, Any], case: str, path: str) -> None:
    ws = LocalWorkspace(layout["root"])
    for call in _entry_points(ws):
        with pytest.raises(ToolError) as info:
            call(path)
        assert info.value.kind == "path_outside_workspace", (case, call)


@pytest.mark.parametrize(("case", "path", "physical"), INSIDE, ids=[c for c, _, _ in INSIDE])
def test_b6_local_inside_paths_resolve_within_the_root(
    layout: dict[str, Any], case: str, path: str, physical: str
) -> None:
    ws = LocalWorkspace(layout["root"])
    real = ws.resolve(path)
    assert real == ws.root / physical
    assert ws.root in real.parents or real == ws.root


def test_b6_corpus_is_large_enough() -> None:
    assert len(OUTSIDE) >= 30 and len(OUTSIDE) + len(INSIDE) >= 50


def test_b6_no_entry_point_ever_returns_outside_content(layout: dict[str, Any]) -> None:
    """Zero escapes: whatever a call returns, the secret outside (and in .a3s) never appears."""
    ws = LocalWorkspace(layout["root"])
    paths = [p for _, p in OUTSIDE] + [p for _, p, _ in INSIDE] + list(layout["links"])
    for path in paths:
        for call in _entry_points(ws):
            try:
                out = call(path)
            except ToolError:
                continue
            assert SECRET not in repr(out), (path, call)
    walked = [e.path for e in ws.walk_files()]
    assert all(not p.startswith(".a3s") for p in walked)
    for e in ws.walk_files():
        assert SECRET.encode() not in ws.read_bytes(e.path)


def test_b6_a_fifo_inside_is_refused_without_blocking(layout: dict[str, Any]) -> None:
    os.mkfifo(layout["root"] / "pipe")
    ws = LocalWorkspace(layout["root"])
    with pytest.raises(ToolError) as info:
        ws.read_bytes("pipe")
    assert info.value.kind == "invalid_argument"


def test_b6_over_long_inside_path_is_an_invalid_argument(layout: dict[str, Any]) -> None:
    ws = LocalWorkspace(layout["root"])
    with pytest.raises(ToolError) as info:
        ws.resolve("a/" * 3000)
    assert info.value.kind == "invalid_argument"


# --- the same corpus against a git tree ------------------------------------------------------------

TREE_LINKS = {
    "link_out": "../outside",
    "link_abs_out": "/tmp/outside",
    "link_passwd": "/etc/passwd",
    "link_dev_null": "/dev/null",
    "loop_a": "loop_b",
    "loop_b": "loop_a",
    "self_loop": "self_loop",
    "chain_leave": "../ws",
    "dangling_out": "../outside/nothing-here",
    "deep_link": "inside/deep",
    "inside/link_up": "../..",
    "root_link": ".",
    "a3s_link": ".a3s",
    "chain_a": "chain_b",
    "chain_b": "link_out",
    "chain_in": "deep_link/file.txt",
}
# Local-only cases: absolute-inside links and the outside tree have no meaning in a commit.
TREE_OUTSIDE = [(c, p) for c, p in OUTSIDE if c != "link-outside-then-dotdot-back"]
TREE_INSIDE = [(c, p, ph) for c, p, ph in INSIDE if c not in ("link-absolute-inside",)]


@pytest.fixture
def tree_ws(tmp_path: Path) -> GitTreeWorkspace:
    b = RepoBuilder(tmp_path / "tree-repo")
    files: dict[str, Any] = {
        "inside/deep/file.txt": "inside\n",
        "inside/x.txt": "x\n",
        ".a3s/secret": SECRET,
        "a\u2044b": "odd name\n",
        "\ufb01le.txt": "ligature\n",
        "...": "dots\n",
        "..foo": "dotdot prefix\n",
    }
    files.update({name: Link(target) for name, target in TREE_LINKS.items()})
    b.commit(files, "corpus")
    return GitTreeWorkspace(b.path, "HEAD")


def _tree_entry_points(ws: GitTreeWorkspace) -> list[Callable[[str], Any]]:
    return [ws.normalize, ws.stat, ws.read_bytes, ws.list_dir, lambda p: list(ws.walk_files(p))]


@pytest.mark.parametrize(("case", "path"), TREE_OUTSIDE, ids=[c for c, _ in TREE_OUTSIDE])
def test_b6_git_tree_outside_paths_are_refused(tree_ws: GitTreeWorkspace, case: str, path: str) -> None:
    for call in _tree_entry_points(tree_ws):
        with pytest.raises(ToolError) as info:
            call(path)
        assert info.value.kind == "path_outside_workspace", (case, call)


@pytest.mark.parametrize(("case", "path", "physical"), TREE_INSIDE, ids=[c for c, _, _ in TREE_INSIDE])
def test_b6_git_tree_inside_paths_stay_inside(
    tree_ws: GitTreeWorkspace, case: str, path: str, physical: str
) -> None:
    try:
        entry = tree_ws.stat(path)
    except ToolError as exc:
        assert exc.kind == "not_found", case  # a path missing from the commit, never an escape
        return
    assert entry.path == physical.rstrip("/")


def test_b6_git_tree_never_returns_the_internal_secret(tree_ws: GitTreeWorkspace) -> None:
    for e in tree_ws.walk_files():
        assert SECRET.encode() not in tree_ws.read_bytes(e.path)
    assert tree_ws.read_bytes("chain_in") == b"inside\n"
    assert tree_ws.read_bytes("deep_link/../x.txt") == b"x\n"
