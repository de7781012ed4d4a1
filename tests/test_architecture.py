"""The layout is the architecture (ARCHITECTURE.md; CONVENTIONS §1): imports flow one way.

kernel ← tools ← flows ← orchestrator, and workers import kernel, tools and flows — never the
orchestrator. The orchestrator reaches the workers only through its dispatcher (jobs out, results
and events in) and the commands that run or inspect workers: no cycle across the fleet boundary.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "kernel": {"celery", "redis", "kombu", "tools", "workers", "orchestrator", "flows"},
    "tools": {"celery", "redis", "kombu", "workers", "orchestrator", "flows"},
    "flows": {"celery", "redis", "kombu", "workers", "orchestrator"},
    "config": {"kernel", "tools", "flows", "workers", "orchestrator", "celery", "redis"},
    "workers": {"orchestrator"},
}
# The orchestrator's only doors to workers/: the dispatcher, the event-stream client, and the CLI
# commands that start or inspect workers (`worker`, `status`, `events`).
ORCHESTRATOR_TO_WORKERS = {"dispatch.py", "event_stream.py", "cli_fleet.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_layers_import_only_downwards() -> None:
    violations = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / layer).rglob("*.py")):
            bad = _imports(path) & forbidden
            if bad:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


def test_the_orchestrator_reaches_workers_only_through_the_dispatcher() -> None:
    """Issue 13 item 9: no cycle between orchestrator/ and workers/."""
    violations = []
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        if path.name in ORCHESTRATOR_TO_WORKERS or path.name.startswith("dispatch_"):
            continue
        if "workers" in _imports(path):
            violations.append(str(path.relative_to(ROOT)))
    assert violations == []


def test_every_module_starts_with_a_docstring() -> None:
    missing = []
    for layer in ("kernel", "tools", "flows", "orchestrator", "workers", "config"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path.name == "__init__.py" and not path.read_text().strip():
                continue
            if ast.get_docstring(ast.parse(path.read_text())) is None:
                missing.append(str(path.relative_to(ROOT)))
    assert missing == []
