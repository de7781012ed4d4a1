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
import os
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


def _modules_after_env(tmp_path: Path, env: dict[str, str], *argv: str, cwd: Path) -> set[str]:
    listing = tmp_path / "modules.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *argv],
        cwd=cwd, capture_output=True, text=True, timeout=60, env={**base, **env},
    )  # fmt: skip
    assert listing.exists(), proc.stderr[-2000:]
    return set(json.loads(listing.read_text()))


# What a one-tool `read`/`ls` call never loads (orchestrator.cli_direct): the SDK and session
# machinery, every other tool, settings, the HTTP stack, brokers, parsers and native engines.
DIRECT_NEVER = (
    "orchestrator.agent", "orchestrator.session", "flows.sessions", "flows.agent", "flows.task", "flows.workflow",
    "flows.providers", "flows.integrations", "flows.loop", "config.settings", "pydantic_settings", "tools.builtin",
    "tools.bash", "tools.batch", "tools.download", "tools.edit", "tools.git", "tools.mcp", "tools.net", "tools.patch",
    "tools.program", "tools.search", "tools.skills", "tools.web_fetch", "tools.web_search", "tools.write",
    "kernel.state", "kernel.gittree", "httpx", "httpcore", "anyio", "celery", "kombu", "redis", "billiard",
    "openai", "anthropic", "pygit2", "numpy", "jsonschema", "tantivy", "quickjs", "mcp", "lxml", "trafilatura",
    "yaml", "tokenizers", "playwright", "difflib", "msgspec", "kernel.projection.sample",
    # pydantic is ~110 ms of start-up: ordinary arguments pass the tool's quick validator, and the
    # model (tools.read_params / tools.ls_params) loads only for anything it leaves to it (K-3).
    "pydantic", "pydantic_core", "tools.read_params", "tools.ls_params",
)  # fmt: skip


@pytest.mark.parametrize("name", ["read", "ls"])
def test_tool_read_and_ls_load_only_their_own_tool(name: str, tmp_path: Path) -> None:
    """A host-direct ``read``/``ls`` with nothing configured is a one-tool session: it loads the kernel,
    the projection and that tool's module — nothing of the SDK, no other tool, no settings."""
    (tmp_path / "README.md").write_text("hello\n")
    args = '{"file_path": "README.md"}' if name == "read" else "{}"
    modules = _modules_after_env(tmp_path, {}, "tool", name, args, cwd=tmp_path)
    assert {"orchestrator.cli_direct", "flows.session_kernel", "kernel.kernel", f"tools.{name}"} <= modules
    assert _loaded(modules, DIRECT_NEVER) == []
    assert not {"tools.read", "tools.ls"} - {f"tools.{name}"} & modules  # not even the other one


def test_k4_tool_read_with_unusual_arguments_loads_the_model_for_its_error(tmp_path: Path) -> None:
    """What the quick validator leaves to the model (here a bool where an int goes) loads pydantic,
    and the error is the model's, naming the JSON path (K-4)."""
    (tmp_path / "README.md").write_text("hello\n")
    args = '{"file_path": "README.md", "limit": true}'
    modules = _modules_after_env(tmp_path, {}, "tool", "read", args, cwd=tmp_path)
    assert {"pydantic", "tools.read_params"} <= modules
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "tool", "read", args],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("A3S_")},
    )  # fmt: skip
    assert proc.returncode != 0 and "/limit" in proc.stdout + proc.stderr


def test_a_configured_tool_read_builds_the_whole_session_lazily(tmp_path: Path) -> None:
    """With any A3S_* setting the call builds a full session; numpy (search), pygit2 (git),
    jsonschema (host tools), tantivy, QuickJS, MCP, Celery and Redis still stay unloaded."""
    (tmp_path / "README.md").write_text("hello\n")
    env = {"A3S_EXTRA_TOOLS": ""}
    modules = _modules_after_env(tmp_path, env, "tool", "read", '{"file_path": "README.md"}', cwd=tmp_path)
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
