"""The layout is the architecture (ARCHITECTURE.md; CONVENTIONS §1): imports flow one way."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "kernel": {"celery", "redis", "kombu", "tools", "workers", "orchestrator", "flows"},
    "tools": {"celery", "redis", "kombu", "workers", "orchestrator", "flows"},
    "flows": {"celery", "redis", "kombu", "workers", "orchestrator"},
    "config": {"kernel", "tools", "flows", "workers", "orchestrator", "celery", "redis"},
}


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


def test_every_module_starts_with_a_docstring() -> None:
    missing = []
    for layer in ("kernel", "tools", "flows", "orchestrator", "workers", "config"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            if path.name == "__init__.py" and not path.read_text().strip():
                continue
            if ast.get_docstring(ast.parse(path.read_text())) is None:
                missing.append(str(path.relative_to(ROOT)))
    assert missing == []
