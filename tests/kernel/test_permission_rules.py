"""Rules match what a call really touches (SPEC K-3, S-4, B-6; issue 15 item 5).

Path rules are matched on the resolved workspace-relative path (lexical and physical forms), and
every file a call touches must pass; bash rules on every command the line runs, through a real
shell parser. The deny corpus runs through ``session.model_tool_call`` and ``governed_tool`` and
asserts the command never ran (the canary file stays).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kernel import PermissionPolicy, SessionOptions
from kernel.policy import Allow, Ask, Deny
from kernel.shell_commands import OPAQUE, command_subjects, command_subjects_or_opaque
from orchestrator import Agent

C = "canary.txt"

# Every spelling tries to delete the canary; a `bash(rm *)` deny rule must stop all of them.
DENY_SPELLINGS = [
    f"rm {C}",
    f"rm -f {C}",
    f"/bin/rm {C}",
    f"/usr/bin/rm {C}",
    f"command rm {C}",
    f"command -p rm {C}",
    f"builtin rm {C}",
    f"exec rm {C}",
    f"true; rm {C}",
    f"true && rm {C}",
    f"false || rm {C}",
    f"echo hi | rm {C}",
    f"! rm {C}",
    f"rm {C} &",
    f"\\rm {C}",
    f"'rm' {C}",
    f'"rm" {C}',
    f'r""m {C}',
    f"r''m {C}",
    f"r\\m {C}",
    f"env rm {C}",
    f"env -i rm {C}",
    f"env -i PATH=/bin:/usr/bin rm {C}",
    f"env -u HOME -- rm {C}",
    f"env -S 'rm {C}'",
    f"FOO=1 rm {C}",
    f"RM=rm; $RM {C}",
    f"$RM {C}",
    f"${{RM}} {C}",
    f"$(echo rm) {C}",
    f"`echo rm` {C}",
    f"r[m] {C}",
    f"rm{{,}} {C}",
    f"$'\\x72m' {C}",
    f"nohup rm {C}",
    f"nice rm {C}",
    f"nice -n 5 rm {C}",
    f"timeout 5 rm {C}",
    f"timeout -s KILL 5 rm {C}",
    f"timeout --signal KILL 5 rm {C}",
    f"stdbuf -o0 rm {C}",
    f"setsid rm {C}",
    f"ionice -c 3 rm {C}",
    f"sudo rm {C}",
    f"sudo -u root rm {C}",
    f"doas rm {C}",
    f"chroot / rm {C}",
    f"flock /tmp/a3s-lock rm {C}",
    f"flock /tmp/a3s-lock -c 'rm {C}'",
    f"busybox rm {C}",
    f"command time rm {C}",
    f"time rm {C}",
    f"echo {C} | xargs rm",
    f"echo {C} | xargs -I{{}} rm {{}}",
    f"find . -name {C} -exec rm {{}} \\;",
    f"find . -name {C} -execdir rm {{}} +",
    f"(rm {C})",
    f"{{ rm {C}; }}",
    f"echo $(rm {C})",
    f"echo `rm {C}`",
    f'echo "$(rm {C})"',
    f"cat <(rm {C})",
    f"echo >(rm {C})",
    f"X=$(rm {C}) true",
    f"ls > $(rm {C})",
    f"echo ${{X:-$(rm {C})}}",
    f"cat <<EOF\n$(rm {C})\nEOF\n",
    f"f() {{ rm {C}; }}; f",
    f"function g {{ rm {C}; }}; g",
    f"if true; then rm {C}; fi",
    f"for i in 1; do rm {C}; done",
    f"while rm {C}; do :; done",
    f"until rm {C}; do :; done",
    f"case x in x) rm {C};; esac",
    f"[[ -f {C} ]] && rm {C}",
    f"eval rm {C}",
    f"eval 'rm {C}'",
    f'eval "r""m {C}"',
    f"sh -c 'rm {C}'",
    f"bash -c 'rm {C}'",
    f"bash -lc 'rm {C}'",
    f'bash -c "echo hi; rm -f {C}"',
    f"sh -c 'sh -c \"rm {C}\"'",
    f"su root -c 'rm {C}'",
    f"watch -n 1 rm {C}",
    f"trap 'rm {C}' EXIT",
    f"alias x='rm {C}'",
    f"echo rm {C} | sh",
    f"echo rm {C} | bash",
    f"bash <<< 'rm {C}'",
    "sh < script.sh",
    "bash script.sh",
    "source script.sh",
    ". script.sh",
    f"rm\\\n {C}",
    "rm",
]


@pytest.fixture()
def tree(workspace: Path) -> Path:
    (workspace / C).write_text("still here\n")
    (workspace / "script.sh").write_text(f"rm {C}\n")
    (workspace / "secret.txt").write_text("TOP SECRET\n")
    (workspace / "secret.d").mkdir()
    (workspace / "secret.d" / "key").write_text("KEY\n")
    os.symlink("../secret.txt", workspace / "src" / "innocent.txt")
    (workspace / ".git" / "hooks").mkdir(parents=True)
    return workspace


class Recorder:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, req: Any) -> bool:
        self.asked.append(req.args.get("command") or req.args.get("file_path") or req.tool)
        return False


def test_k3_bash_deny_corpus_never_runs_the_command(agent: Agent, tree: Path) -> None:
    opts = SessionOptions(
        permission_policy=PermissionPolicy(allow=["bash"], deny=["bash(rm *)"]), confirmation=Recorder()
    )
    s = agent.session(tree, opts)
    missed: list[str] = []
    for line in DENY_SPELLINGS:
        for call in (s.model_tool_call, s.governed_tool):
            res = call("bash", {"command": line})
            kind = res.error_kind or {}
            if kind.get("type") != "permission_denied" or kind.get("reason") != "permission_policy":
                missed.append(f"{line!r}: {kind or res.output[:80]}")
            assert (tree / C).exists(), f"{line!r} deleted the canary"
    assert not missed, "\n".join(missed)
    assert (tree / C).read_text() == "still here\n"
    s.close()


ALLOW = ["bash(git *)", "bash(ls *)", "bash(echo *)", "bash(cat *)"]
ALLOWED = [
    "git status",
    "git status && ls -la",
    "git log --oneline -3; ls",
    "echo 'rm -rf /'",
    "git commit -m 'rm stuff' --dry-run",
    "echo $(git status)",
    'echo "$(ls)" > out.txt',
    "git add *.py --dry-run",
    "ls 2>/dev/null",
    "ls",
    "cat <<EOF\nplain text $HOME\nEOF\n",
    "git $(echo status)",  # an argument the rule cannot see: `git *` covers any argument; echo is allowed
]
MUST_ASK = [
    "git status | head",  # head is not allowed
    "cd src && git diff",  # cd is not allowed
    "FOO=1 git status",  # an assignment changes what runs (PATH=., GIT_DIR=…)
    "PATH=. git status",
    "./git status",  # a workspace file named git is not git
    "/tmp/git status",
    "$CMD status",  # not a literal: no allow rule
    "g\\it status; curl example.invalid",
    "[[ -d src ]] && ls",  # unparseable here: never allowed
    "bash -c 'git status'",
    "rmdir x",
]


def test_k3_bash_allow_rules_need_every_command_allowed(agent: Agent, tree: Path) -> None:
    rec = Recorder()
    s = agent.session(tree, SessionOptions(permission_policy=PermissionPolicy(allow=ALLOW), confirmation=rec))
    policy = PermissionPolicy(allow=ALLOW)
    for line in ALLOWED:
        assert isinstance(policy.decide("bash", command_subjects(line)), Allow), line
        rec.asked.clear()
        res = s.model_tool_call("bash", {"command": line})
        assert rec.asked == [], f"{line!r} should not need confirmation"
        assert (res.error_kind or {}).get("type") not in ("permission_denied", "confirmation_rejected"), line
    for line in MUST_ASK:
        assert isinstance(policy.decide("bash", command_subjects_or_opaque(line)), Ask), line
        rec.asked.clear()
        res = s.model_tool_call("bash", {"command": line})
        assert rec.asked == [line], line
        assert res.error_kind == {"type": "confirmation_rejected", "reason": "rejected"}, line
    s.close()


def test_k3_unknown_parts_match_deny_rules_that_could_match_and_no_allow_rule() -> None:
    p = PermissionPolicy(
        deny=["bash(rm -rf *)", "bash(git push --force*)"], allow=["bash(git *)", "bash(ls *)"]
    )
    assert isinstance(p.decide("bash", command_subjects("rm $FLAGS /")), Deny)
    assert isinstance(p.decide("bash", command_subjects("rm -r$X /")), Deny)
    assert isinstance(p.decide("bash", command_subjects("git push $F origin")), Deny)
    assert isinstance(p.decide("bash", command_subjects("git push origin main")), Allow)
    assert isinstance(p.decide("bash", command_subjects("ls $DIR")), Allow)  # ls * covers any argument
    assert isinstance(p.decide("bash", command_subjects("rm -i x")), Ask)  # not rm -rf: unmatched
    assert command_subjects_or_opaque("echo $((1 + 2))") == [OPAQUE]  # bashlex cannot read it: fail closed
    assert isinstance(p.decide("bash", [OPAQUE]), Deny)
    assert isinstance(PermissionPolicy(allow=["bash"]).decide("bash", [OPAQUE]), Allow)  # no specifier
    assert isinstance(PermissionPolicy(allow=["bash(*)"]).decide("bash", [OPAQUE]), Allow)
    assert isinstance(PermissionPolicy(allow=["bash(? *)"]).decide("bash", [OPAQUE]), Ask)


def test_k3_path_rules_match_the_resolved_path_of_every_file(agent: Agent, tree: Path) -> None:
    rec = Recorder()
    policy = PermissionPolicy(
        allow=["write(src/*)", "read", "patch(src/*)", "edit(src/*)", "ls"],
        deny=["read(secret*)", "ls(secret*)"],
    )
    s = agent.session(tree, SessionOptions(permission_policy=policy, confirmation=rec))
    readme = (tree / "README.md").read_text()

    def kind(res: Any) -> dict[str, Any]:
        return res.error_kind or {}

    # write(src/*) does not allow what src/.. reaches
    for path in ("src/../README.md", "src/../.git/hooks/pre-commit", "src/./../README.md"):
        for call in (s.model_tool_call, s.governed_tool):
            res = call("write", {"file_path": path, "content": "pwned\n"})
            assert kind(res).get("type") in ("confirmation_rejected", "permission_denied"), (path, res.output)
    assert (tree / "README.md").read_text() == readme and not (tree / ".git/hooks/pre-commit").exists()
    ok = s.model_tool_call("write", {"file_path": "src/ok.txt", "content": "fine\n"})
    assert ok.exit_code == 0 and (tree / "src/ok.txt").read_text() == "fine\n"

    # deny read(secret*): every spelling of the path, and symlinks to it, are denied
    for path in (
        "secret.txt",
        "./secret.txt",
        "src/../secret.txt",
        "src/innocent.txt",
        "secret.d/key",
        ".//secret.txt",
    ):
        res = s.model_tool_call("read", {"file_path": path})
        assert kind(res) == {"type": "permission_denied", "reason": "permission_policy"}, (path, res.output)
        assert "TOP SECRET" not in res.output
    batch_read = s.model_tool_call("read", {"files": [{"path": "README.md"}, {"path": "./secret.txt"}]})
    assert kind(batch_read).get("type") == "permission_denied" and "TOP SECRET" not in batch_read.output
    assert s.model_tool_call("read", {"file_path": "README.md"}).exit_code == 0
    assert kind(s.model_tool_call("ls", {"path": "./secret.d"})).get("type") == "permission_denied"

    # a path that does not resolve is refused, never matched loosely
    for path in ("../outside.txt", "src/../../outside.txt", "/etc/passwd"):
        res = s.model_tool_call("read", {"file_path": path})
        assert kind(res).get("type") == "path_outside_workspace", (path, res.output)
    os.symlink("/etc", tree / "src" / "etc")
    res = s.model_tool_call("read", {"file_path": "src/etc/passwd"})
    assert kind(res).get("type") == "path_outside_workspace", res.output

    # a patch passes only when every file it touches is allowed (both sides of renames, deletes, creates)
    two_files = (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-import os\n+import sys\n"
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+# pwned\n"
    )
    rename_out = "diff --git a/src/app.py b/moved.py\nsimilarity index 100%\nrename from src/app.py\nrename to moved.py\n"
    delete_out = "*** Begin Patch\n*** Delete File: README.md\n*** End Patch"
    create_out = "*** Begin Patch\n*** Add File: src/../new.txt\n+x\n*** End Patch"
    app = (tree / "src/app.py").read_text()
    for diff in (two_files, rename_out, delete_out, create_out):
        rec.asked.clear()
        res = s.model_tool_call("patch", {"diff": diff})
        assert kind(res).get("type") == "confirmation_rejected", res.output
        assert rec.asked, "the patch was not silently allowed"
    assert (tree / "README.md").read_text() == readme and (tree / "src/app.py").read_text() == app
    assert not (tree / "moved.py").exists() and not (tree / "new.txt").exists()
    inside = "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-import os\n+import sys\n"
    assert s.model_tool_call("patch", {"diff": inside}).exit_code == 0
    s.close()


@pytest.mark.parametrize(
    ("rules", "command"),
    [
        ({"deny": ["bash(*curl*|*sh*)"]}, "echo '" + "curl|" * 8000 + "'"),
        ({"allow": ["bash(*a*a*a*a*a*b)"]}, "echo " + "a" * 20000),
        ({"deny": ["bash(*a*a*a*a*a*b)"]}, "echo " + "a" * 20000 + " $(x)"),  # with an unknown part
    ],
    ids=["deny-3-stars", "allow-6-stars", "deny-with-unknown"],
)
def test_k3_k8_rule_matching_is_linear_in_the_models_command(
    agent: Agent, tree: Path, rules: dict[str, list[str]], command: str
) -> None:
    """K-3/K-8: the model chooses the command; the host's rules have a few ``*``. Matched as a
    backtracking regex, ``bash(*curl*|*sh*)`` against 16 KB of ``curl|`` took 49.5 s (≈ n^3.5),
    holding the GIL before the call even started — no deadline applies there. Globs are matched
    with one remembered ``*`` (O(n·m)): 40 KB and six stars answer at once."""
    import time

    s = agent.session(tree, SessionOptions(permission_policy=PermissionPolicy(**rules)))
    started = time.monotonic()
    res = s.model_tool_call("bash", {"command": command})
    assert time.monotonic() - started < 5
    assert res.error_kind is not None and res.error_kind["type"] == "permission_denied", res.error_kind


def test_k3_linear_globs_agree_with_fnmatch_on_known_text() -> None:
    """The linear matcher is fnmatch's glob (``*`` crosses ``/``; ``?`` and ``[...]`` one character)."""
    import fnmatch
    import itertools

    from kernel.policy import Rule

    patterns = ["*", "a*", "*b", "a*b", "*a*b*", "a?c", "[ab]*", "[!a]?", "*[0-9]", "a*a*a", "**a", "a[]]b"]
    texts = ["", "a", "b", "ab", "abc", "aab", "ba", "a1", "b9", "aaa", "a/b", "a]b", "x"]
    for pattern, text in itertools.product(patterns, texts):
        rule = Rule.parse(f"t({pattern})")
        expected = fnmatch.fnmatchcase(text, pattern) if pattern not in ("*", "**") else True
        assert rule.matches("t", text) is expected, (pattern, text)
