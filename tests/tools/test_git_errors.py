"""The pygit2 edge: every foreign failure becomes a typed kernel error (CONVENTIONS §9, SPEC K-8)."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from kernel.errors import ERROR_KINDS, NotFound, ToolError
from tools.git.errors import FOREIGN_ERRORS, git_errors, translate_git_error
from tools.git.testing import RepoBuilder

CASES: list[tuple[BaseException, str]] = [
    (pygit2.GitError("generic"), "tool_error"),
    (pygit2.NotFoundError("no ref"), "not_found"),
    (pygit2.AlreadyExistsError("exists"), "invalid_argument"),
    (pygit2.InvalidSpecError("bad spec"), "invalid_argument"),
    (pygit2.InvalidError("invalid"), "invalid_argument"),
    (pygit2.AmbiguousError("ambiguous"), "invalid_argument"),
    (pygit2.AuthError("auth"), "permission_denied"),
    (pygit2.CertificateError("cert"), "transport"),
    (KeyError("refs/heads/x"), "not_found"),
    (ValueError("bad value"), "invalid_argument"),
    (OSError("disk"), "tool_error"),
    (FileNotFoundError("gone"), "tool_error"),
]


@pytest.mark.parametrize(("exc", "kind"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_k8_pygit2_failures_map_to_typed_kinds(exc: BaseException, kind: str) -> None:
    err = translate_git_error(exc)
    assert isinstance(err, ToolError) and err.kind == kind
    assert kind == "tool_error" or kind in ERROR_KINDS


def test_k8_the_mapping_is_total_over_every_pygit2_error_class() -> None:
    classes = {getattr(pygit2, n) for n in pygit2.errors.__all__ if n != "Passthrough"}
    for cls in classes:
        assert issubclass(cls, FOREIGN_ERRORS)
        assert isinstance(translate_git_error(cls("x")), ToolError)
    with pytest.raises(TypeError):
        translate_git_error(RuntimeError("not git"))


def test_k8_typed_errors_pass_through_and_foreign_ones_chain(tmp_path: Path) -> None:
    typed = NotFound("already typed", path="p")
    assert translate_git_error(typed) is typed
    repo = RepoBuilder(tmp_path / "r").repo
    with pytest.raises(ToolError) as info, git_errors():
        repo.revparse_single("no-such-ref")
    assert info.value.kind == "not_found" and isinstance(info.value.__cause__, KeyError)
    with pytest.raises(ToolError) as bad, git_errors():
        repo.revparse_single("HEAD@{")
    assert bad.value.kind in ("invalid_argument", "not_found")
    with pytest.raises(ZeroDivisionError), git_errors():
        _ = 1 / 0  # bugs are not disguised as git failures
