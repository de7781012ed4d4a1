"""CLI start-up stays lazy (issue 13 item 7): what ``a3s-fleet`` imports before it does anything.

``a3s-fleet --version`` must cost about a ``python -c "import click"`` (bench/cli.py measures the
ratio; target <= 2x). That only holds while start-up imports click and a few small modules, so
these tests run the real command line in a fresh interpreter and check ``sys.modules`` afterwards:
a command someone adds (``run``, ``batch``…) that imports an SDK, a broker client or a parser at
module level fails here, not in a benchmark nobody ran. Commands in other modules are registered in
``orchestrator.cli.LAZY_COMMANDS`` and imported only when named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli

ROOT = Path(__file__).resolve().parents[2]

# Never loaded by a command that does not use them: brokers, model SDKs, parsers, native engines.
HEAVY = (
    "celery", "kombu", "redis", "billiard", "flower", "httpx", "httpcore", "anyio", "openai", "anthropic",
    "pygit2", "numpy", "pydantic", "pydantic_settings", "jsonschema", "lxml", "trafilatura", "tantivy",
    "quickjs", "mcp", "playwright", "msgspec", "yaml", "tokenizers", "safetensors", "asyncio",
)  # fmt: skip
# Loaded only when a session is built (never by --version or --help's parsing of the command line).
SDK = ("kernel.kernel", "tools", "flows", "workers", "config.settings", "orchestrator.agent")

PROBE = """
import json, sys
from orchestrator.cli import main
try:
    main(sys.argv[2:], prog_name="a3s-fleet")
except SystemExit:
    pass
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def _modules_after(tmp_path: Path, *argv: str, cwd: Path | None = None) -> set[str]:
    listing = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *argv],
        cwd=cwd or ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listing.exists(), proc.stderr[-2000:]
    return set(json.loads(listing.read_text()))


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_version_imports_click_and_nothing_of_the_sdk(tmp_path: Path) -> None:
    modules = _modules_after(tmp_path, "--version")
    assert "click" in modules
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, SDK) == []
    assert "importlib.metadata" not in modules  # the version is a constant, not a metadata scan


def test_help_lists_every_command_without_importing_them(tmp_path: Path) -> None:
    """--help shows the stored one-liners of the lazy commands: no command module, nothing heavy."""
    modules = _modules_after(tmp_path, "--help")
    assert _loaded(modules, HEAVY) == [] and _loaded(modules, SDK) == []
    assert not {m.partition(":")[0] for m in cli.LAZY_COMMANDS.values()} & modules


def test_the_stored_one_liners_are_the_commands_own() -> None:
    import click

    ctx = click.Context(cli.main)
    assert set(cli.LAZY_HELP) == set(cli.LAZY_COMMANDS)
    for name in cli.LAZY_COMMANDS:
        command = cli.main.get_command(ctx, name)
        assert command is not None
        for limit in (30, 45, 80, 200):
            expected = command.get_short_help_str(limit)
            stand_in = click.Command(name, help=cli.LAZY_HELP[name])
            assert stand_in.get_short_help_str(limit) == expected, name


@pytest.mark.parametrize("name", sorted(cli.LAZY_COMMANDS))
def test_naming_a_lazy_command_imports_its_module_only(name: str, tmp_path: Path) -> None:
    module = cli.LAZY_COMMANDS[name].partition(":")[0]
    modules = _modules_after(tmp_path, name, "--help")
    assert module in modules
    others = {m.partition(":")[0] for n, m in cli.LAZY_COMMANDS.items() if n != name} - {module}
    assert not (others & modules), sorted(others & modules)
    assert _loaded(modules, ("celery", "kombu", "redis", "httpx", "numpy", "pygit2", "openai")) == []


def test_tool_read_loads_only_what_a_read_needs(tmp_path: Path) -> None:
    """A host-direct ``read`` builds a whole session, but numpy (search), pygit2 (git), jsonschema
    (host tools), tantivy, QuickJS, MCP, Celery and Redis stay unloaded until a call needs them."""
    (tmp_path / "README.md").write_text("hello\n")
    modules = _modules_after(tmp_path, "tool", "read", '{"file_path": "README.md"}', cwd=tmp_path)
    assert "orchestrator.agent" in modules and "tools.read" in modules  # it did run the call
    never = ("celery", "kombu", "redis", "billiard", "flower", "openai", "anthropic", "pygit2", "numpy",
             "jsonschema", "tantivy", "quickjs", "mcp", "playwright", "trafilatura", "tokenizers")  # fmt: skip
    assert _loaded(modules, never) == []
    assert _loaded(modules, ("workers", "kernel.gittree", "tools.search.bm25")) == []


def test_every_command_is_reachable_and_the_lazy_table_names_real_commands() -> None:
    import click

    ctx = click.Context(cli.main)
    names = cli.main.list_commands(ctx)
    assert {"tool", "tools", "artifact", *cli.LAZY_COMMANDS} <= set(names)
    for name in names:
        command = cli.main.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
