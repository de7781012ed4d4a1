"""Running the real ``git`` CLI in tests: a fixed identity and no user or system configuration, so
a developer's ``~/.gitconfig`` (hooks, signing, default branch) never changes what a test builds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(repo: Path, *args: str) -> str:
    """``git ARGS`` in ``repo``; its stripped stdout (a failure raises ``CalledProcessError``)."""
    done = subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True, text=True)
    return done.stdout.strip()
