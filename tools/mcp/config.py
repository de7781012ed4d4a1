"""MCP server configuration in the ``.mcp.json`` shape other agents use (SPEC M-1; issue 10).

A document is ``{"mcpServers": {NAME: SERVER, …}}`` (a bare ``{NAME: SERVER}`` mapping is accepted
too, for ``SessionOptions(mcp_servers=…)``). ``SERVER`` is either

- stdio: ``{"command": str, "args": [str], "env": {str: str}, "cwd": str}`` (``type`` ``"stdio"``), or
- streamable HTTP: ``{"url": "http(s)://…", "headers": {str: str}}`` (``type`` ``"http"``),

plus our optional ``timeout_ms`` (per call; the kernel's deadline), ``startup_timeout_ms`` (start,
handshake and tool listing) and ``trust_annotations`` (false: ignore the server's tool hints).
Keys other agents add are ignored, so one file serves several tools.

``${VAR}`` and ``${VAR:-default}`` are expanded from this process's environment in ``command``,
``args``, ``env`` values, ``cwd``, ``url`` and ``headers`` values — a secret stays in the
environment, never in the file. A relative ``cwd`` is taken from the directory of the file that
names it.

Invariants: parsing never starts anything and never reads beyond ``MAX_CONFIG_BYTES``. A document
that is not valid JSON of this shape is an ``invalid_argument`` (one clear line); a single server
that cannot be expressed (bad name, bad field, unset variable, unsupported ``sse`` transport) is
skipped with a warning naming it, and the others load. This module imports nothing of the ``mcp``
SDK (it is cheap to import).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernel.errors import InvalidArgument

MAX_CONFIG_BYTES = 1024 * 1024
MAX_SERVERS = 64
MAX_ARGS = 256
MAX_FIELD_CHARS = 32 * 1024
DEFAULT_STARTUP_TIMEOUT_MS = 60_000
MIN_TIMEOUT_MS = 100
MAX_TIMEOUT_MS = 24 * 3600 * 1000
WORKSPACE_CONFIG_NAME = ".mcp.json"
# Server names become the middle of ``mcp__<server>__<tool>``: one unambiguous segment (no "__").
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")
MAX_SERVER_NAME_CHARS = 48
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Transport = Literal["stdio", "http"]


@dataclass(frozen=True)
class McpServerConfig:
    """One server, validated. ``transport`` is ``stdio`` (command) or ``http`` (url)."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    timeout_ms: int | None = None
    startup_timeout_ms: int = DEFAULT_STARTUP_TIMEOUT_MS
    trust_annotations: bool = True
    source: str = "options"

    def describe(self) -> str:
        """What the server is, without secrets (no env values, no header values, no URL query)."""
        if self.transport == "stdio":
            return f"stdio: {self.command}"
        return f"http: {_url_without_secrets(self.url or '')}"


@dataclass
class McpConfig:
    """Servers by name, and the warnings for the entries that were skipped."""

    servers: dict[str, McpServerConfig] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def merged(self, later: McpConfig) -> McpConfig:
        """``later``'s servers replace ours of the same name (host config over workspace config)."""
        return McpConfig({**self.servers, **later.servers}, [*self.warnings, *later.warnings])


def parse_config(
    document: Any,
    *,
    source: str,
    base_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> McpConfig:
    """Validate a decoded ``.mcp.json`` document (see the module docstring)."""
    env = os.environ if environ is None else environ
    if not isinstance(document, Mapping):
        raise InvalidArgument(f"MCP config ({source}) must be a JSON object")
    servers_doc = document["mcpServers"] if "mcpServers" in document else document
    if not isinstance(servers_doc, Mapping):
        raise InvalidArgument(f"MCP config ({source}): mcpServers must be an object")
    if len(servers_doc) > MAX_SERVERS:
        raise InvalidArgument(
            f"MCP config ({source}) names {len(servers_doc)} servers; at most {MAX_SERVERS}"
        )
    out = McpConfig()
    for name, raw in servers_doc.items():
        try:
            out.servers[str(name)] = _server(str(name), raw, source, base_dir, env)
        except InvalidArgument as exc:
            out.warnings.append(exc.message)
    return out


def load_config_file(
    path: str | os.PathLike[str], *, source: str | None = None, environ: Mapping[str, str] | None = None
) -> McpConfig:
    """Read and validate a config file; a missing, oversized or malformed file is ``invalid_argument``."""
    p = Path(path)
    label = source or f"file {p}"
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise InvalidArgument(f"MCP config {p}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise InvalidArgument(f"MCP config {p} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"MCP config {p} is not valid JSON: {exc}") from None
    return parse_config(document, source=label, base_dir=p.resolve().parent, environ=environ)


def workspace_config(root: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> McpConfig:
    """``<root>/.mcp.json`` when it exists (the caller decided the user opted in); else empty."""
    path = Path(root) / WORKSPACE_CONFIG_NAME
    if not path.is_file() or path.is_symlink():
        return McpConfig()
    return load_config_file(path, source=f"workspace {path}", environ=environ)


def _server(
    name: str, raw: Any, source: str, base_dir: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> McpServerConfig:
    def bad(msg: str) -> InvalidArgument:
        return InvalidArgument(f"MCP server {name!r} ({source}) skipped: {msg}")

    if len(name) > MAX_SERVER_NAME_CHARS or not SERVER_NAME_RE.match(name) or name.endswith("_"):
        raise bad(
            f"a server name is 1-{MAX_SERVER_NAME_CHARS} letters, digits, '-' or single '_' "
            "(it becomes the middle of mcp__<server>__<tool>)"
        )
    if not isinstance(raw, Mapping):
        raise bad("its entry must be an object")
    kind = raw.get("type")
    if kind is not None and kind not in ("stdio", "http", "streamable-http", "streamable_http"):
        if kind == "sse":
            raise bad("the legacy SSE transport is not supported; use the streamable HTTP endpoint")
        raise bad(f"unknown transport type {kind!r}")
    has_command, has_url = "command" in raw, "url" in raw
    if has_command == has_url:
        raise bad("give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
    common: dict[str, Any] = {
        "name": name,
        "source": source,
        "timeout_ms": _timeout(raw.get("timeout_ms"), "timeout_ms", bad, None),
        "startup_timeout_ms": _timeout(
            raw.get("startup_timeout_ms"), "startup_timeout_ms", bad, DEFAULT_STARTUP_TIMEOUT_MS
        ),
        "trust_annotations": _bool(raw.get("trust_annotations", True), "trust_annotations", bad),
    }
    if has_command:
        if kind not in (None, "stdio"):
            raise bad(f"type {kind!r} needs a 'url', not a 'command'")
        command = _expand(_string(raw["command"], "command", bad), env, bad)
        if not command.strip():
            raise bad("'command' is empty")
        args_raw = raw.get("args", [])
        if not isinstance(args_raw, list) or len(args_raw) > MAX_ARGS:
            raise bad(f"'args' must be a list of at most {MAX_ARGS} strings")
        args = tuple(_expand(_string(a, "args[]", bad), env, bad) for a in args_raw)
        cwd = raw.get("cwd")
        if cwd is not None:
            cwd = _expand(_string(cwd, "cwd", bad), env, bad)
            if base_dir is not None and not os.path.isabs(cwd):
                cwd = os.path.normpath(os.path.join(os.fspath(base_dir), cwd))
        return McpServerConfig(
            transport="stdio",
            command=command,
            args=args,
            env=_pairs(raw.get("env"), "env", env, bad),
            cwd=cwd,
            **common,
        )
    if kind == "stdio":
        raise bad("type 'stdio' needs a 'command', not a 'url'")
    url = _expand(_string(raw["url"], "url", bad), env, bad)
    if not re.match(r"^https?://[^/?#\s]+", url):
        raise bad("'url' must be an http:// or https:// URL")
    return McpServerConfig(
        transport="http", url=url, headers=_pairs(raw.get("headers"), "headers", env, bad), **common
    )


def _string(value: Any, what: str, bad: Any) -> str:
    if not isinstance(value, str):
        raise bad(f"'{what}' must be a string")
    if len(value) > MAX_FIELD_CHARS or "\x00" in value:
        raise bad(f"'{what}' is longer than {MAX_FIELD_CHARS} characters or holds a NUL byte")
    return value


def _bool(value: Any, what: str, bad: Any) -> bool:
    if not isinstance(value, bool):
        raise bad(f"'{what}' must be true or false")
    return value


def _timeout(value: Any, what: str, bad: Any, default: int | None) -> Any:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_TIMEOUT_MS <= value <= MAX_TIMEOUT_MS:
        raise bad(f"'{what}' must be an integer between {MIN_TIMEOUT_MS} and {MAX_TIMEOUT_MS}")
    return value


def _pairs(value: Any, what: str, env: Mapping[str, str], bad: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or len(value) > MAX_ARGS:
        raise bad(f"'{what}' must be an object of at most {MAX_ARGS} string values")
    out = []
    for key, item in value.items():
        key = _string(key, f"{what} key", bad)
        if not key or (what == "env" and "=" in key):
            raise bad(f"invalid {what} name {key!r}")
        out.append((key, _expand(_string(item, f"{what}.{key}", bad), env, bad)))
    return tuple(out)


def _expand(text: str, env: Mapping[str, str], bad: Any) -> str:
    def sub(m: re.Match[str]) -> str:
        value = env.get(m.group(1))
        if value is not None and value != "":
            return value
        if m.group(2) is not None:
            return m.group(2)
        if value is not None:
            return value
        raise bad(f"environment variable {m.group(1)} is not set (and no ${{{m.group(1)}:-default}} given)")

    return _VAR_RE.sub(sub, text) if "${" in text else text


def _url_without_secrets(url: str) -> str:
    """Scheme, host and path only: no user info, query or fragment (they may carry tokens)."""
    m = re.match(r"^(https?://)(?:[^@/?#]*@)?([^/?#]*)([^?#]*)", url)
    return f"{m.group(1)}{m.group(2)}{m.group(3)}" if m else "<url>"
