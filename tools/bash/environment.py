"""The environment a bash command sees (issue 15, item 2): an allow-list, never the host's whole environment.

Which policy applies:

- **minimal** — every sandboxed call, and every governed (model-side) call even when it runs on
  the host after ``require_escalated`` (a human approving a command line is not approving the
  host's secrets). Only ``ALLOWED_NAMES`` and ``LC_*`` are copied from the host, plus the names
  the session lists in ``SessionOptions.bash_env_passthrough`` (exact names, or a prefix ending in
  ``*``), then ``TOOL_ENV`` is set on top. ``PATH`` defaults to ``DEFAULT_PATH`` when the host
  has none.
- **host** — trusted host-direct calls that run unsandboxed: the host process's environment plus
  ``TOOL_ENV`` (the trusted control plane is the host itself; K-7).

Like Codex's ``shell_environment_policy`` with ``inherit = "core"``, but narrower: no ``USER``,
``LOGNAME``, ``SHELL`` or ``TMPDIR`` (the sandbox runs as another uid and has its own ``/tmp``).
Values are copied verbatim; names are never logged or returned to the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

ALLOWED_NAMES = ("PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ")
ALLOWED_PREFIXES = ("LC_",)
# Set by the tool on every call: no interactive prompts, no pager waiting for a terminal.
TOOL_ENV = {"CI": "1", "GIT_TERMINAL_PROMPT": "0", "PAGER": "cat", "GIT_PAGER": "cat"}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


def passthrough_names(value: object) -> tuple[str, ...]:
    """The valid entries of a ``bash_env_passthrough`` setting (anything else is ignored)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        return ()
    return tuple(v for v in value if isinstance(v, str) and _NAME_RE.fullmatch(v))


def minimal_environment(host: Mapping[str, str], passthrough: Iterable[str] = ()) -> dict[str, str]:
    names = set(ALLOWED_NAMES)
    prefixes = list(ALLOWED_PREFIXES)
    for entry in passthrough_names(passthrough):
        if entry.endswith("*"):
            prefixes.append(entry[:-1])
        else:
            names.add(entry)
    env = {
        key: value
        for key, value in host.items()
        if key in names or any(key.startswith(p) for p in prefixes if p)
    }
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(TOOL_ENV)
    return env


def host_environment(host: Mapping[str, str]) -> dict[str, str]:
    env = dict(host)
    env.update(TOOL_ENV)
    return env
