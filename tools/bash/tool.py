"""The ``bash`` tool: parameters, sandbox routing, session cwd and the result (SPEC B-2, K-6; REFERENCE 4.7).

Parameters: ``command`` (required), ``timeout`` (ms, default ``DEFAULT_TIMEOUT_MS``; below
``MIN_TIMEOUT_MS`` clamped up), ``sandbox_permissions`` (``use_default`` | ``require_escalated``),
``justification`` (required with ``require_escalated``; checked at validation, so before
confirmation). ``require_escalated`` always asks for confirmation and runs on the host.

Sandbox routing (``ctx.settings.bash_sandbox``: ``auto`` default | ``always`` | ``never``):

- governed calls (model-side origins) run inside the sandbox; with none available (not installed,
  probe failed, ``never``, or ``ctx.services["sandbox"].available`` false) they fail closed with
  "bash requires a configured sandbox" and ``sandbox_available:false, sandboxed:false`` — the
  command never starts. ``never`` therefore never *weakens* a governed call; it only keeps
  host-direct calls out of the sandbox.
- host-direct calls run unsandboxed, unless the setting is ``always`` (then they need the sandbox
  exactly like governed calls).
- ``require_escalated`` + ``justification`` skips the sandbox in every case (after confirmation).

Result: ``ToolResult.exit_code`` keeps the kernel's 0/1 meaning (1 when the command exited
non-zero); the real process exit code is ``metadata.exit_code`` (128+N for signal N) and is named
in the output. A timeout is an error ``Command timed out after Nms`` with
``timeout{op:"bash", duration_ms:N}`` (N = the effective deadline: the clamped ``timeout``, or
less when the invocation's own deadline is sooner), still carrying the captured output and
metadata. Cancellation kills the group and re-raises (the kernel reports ``cancelled``).
Metadata: ``exit_code, sandboxed, sandbox_available (when consulted), output{total_bytes,
captured_bytes, truncated, timed_out, stdout{…,text}, stderr{…,text}, full_output_uri (when
truncated)}, timeout_ms, changed_paths, changed_paths_source, cwd, duration_ms``.

Evidence (SPEC R-6): when capture cut the output, the result declares it
(``kernel.projection.bounded``): ``original_bytes`` = every byte the command printed,
``content_digest`` = SHA-256 of both streams merged line by line in arrival order, ``loss_mode: head_tail``.
That original is kept as an artifact (``content_ref``, and a ``[Full output artifact: …]`` line
ends the output) when it is at most 1 MiB; bigger ones are not retained and ``content_ref``
names the inline capture by its own digest.

Environment (``tools/bash/environment.py``): sandboxed and governed calls get an allow-listed
environment (plus ``SessionOptions.bash_env_passthrough``); trusted host-direct calls that run on
the host get the host's.

Session cwd: ``ctx.session_state["bash"]["cwd"]`` holds a workspace-relative directory. Each call
starts there (falling back to the root if it vanished or now resolves outside), and keeps the
directory the shell reported at exit only if it is inside the workspace and not internal
(``.a3s``). A killed (timed-out) shell reports nothing, so its ``cd`` is not kept either.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import PermissionDenied, Timeout, Unsupported
from kernel.projection.bounded import BoundedOutput
from kernel.projection.bounded import declare as declare_bounded
from kernel.projection.transform import artifact_line
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools.bash import rootgit
from tools.bash.capture import OUTPUT_MAX_BYTES, OutputCapture, Stream
from tools.bash.changes import changed_paths, reported_paths, take_snapshot
from tools.bash.environment import host_environment, minimal_environment
from tools.bash.runner import run_shell
from tools.bash.sandbox import BwrapSandbox, Sandbox, SandboxCommand, default_sandbox
from tools.bash.workdir import open_cwd, relative_inside

NAME = "bash"
DEFAULT_TIMEOUT_MS = 120_000
MIN_TIMEOUT_MS = 1_000
SANDBOX_MODES = ("auto", "always", "never")
SANDBOX_REQUIRED = "bash requires a configured sandbox"
# A command ending holds the workspace lock only to remove the .git placeholder (microseconds).
ROOT_GIT_LOCK_WAIT_S = 2.0


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        min_length=1, description="The shell command, run with `bash -c` in the session's cwd."
    )
    timeout: int = Field(
        default=DEFAULT_TIMEOUT_MS,
        ge=0,
        description=f"Timeout in milliseconds (default {DEFAULT_TIMEOUT_MS}; values below {MIN_TIMEOUT_MS} are raised to {MIN_TIMEOUT_MS}). Covers reading all output and the exit.",
    )
    sandbox_permissions: Literal["use_default", "require_escalated"] = Field(
        default="use_default",
        description="`require_escalated` runs outside the sandbox on the host, after human confirmation; needs `justification`.",
    )
    justification: str | None = Field(
        default=None,
        description="Why the command must run outside the sandbox (required with require_escalated).",
    )

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise PydanticCustomError("nul_byte", "command must not contain NUL bytes")
        return value

    @model_validator(mode="after")
    def _justified(self) -> Params:
        if self.sandbox_permissions == "require_escalated" and not (self.justification or "").strip():
            raise PydanticCustomError("justification_required", "justification is required")
        return self


DESCRIPTION = (
    "Run a shell command with `bash -c` in the workspace. The working directory persists between "
    "calls of a session (a `cd` outside the workspace is not kept). stdin is /dev/null; CI=1, "
    "GIT_TERMINAL_PROMPT=0 and PAGER=cat are set. Output of both streams is capped at 100 KiB "
    "(first 64 KiB + last 36 KiB, with exact byte counts); stdout and stderr are reported "
    "separately. The timeout (ms) covers the whole run; on timeout or cancellation every process "
    "the command started is killed. Model-initiated commands run in a sandbox as an unprivileged "
    "user: read-only system, writable workspace (.git and .a3s read-only), private /tmp, no network "
    "and no Unix sockets, a minimal environment (PATH, HOME, LANG, LC_*, TERM, TZ). Use "
    "sandbox_permissions=require_escalated with a justification only when the command truly needs "
    "the host (asks a human first)."
)


def capabilities(_params: Params) -> ToolCapabilities:
    return ToolCapabilities.conservative()


def requires_confirmation(params: Params) -> bool:
    return params.sandbox_permissions == "require_escalated"


def subject(params: Params) -> str:
    return params.command


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    root = ctx.workspace.root
    if root is None or "exec" not in ctx.workspace.capabilities:
        raise Unsupported("bash needs a local workspace with the exec capability")
    root = _physical(root)
    timeout_ms = max(params.timeout, MIN_TIMEOUT_MS)
    escalated = params.sandbox_permissions == "require_escalated"

    sandbox: Sandbox | None = None
    sandbox_available: bool | None = None
    if not escalated and _wants_sandbox(ctx):
        sandbox, sandbox_available = await _sandbox_for(ctx)
        if not sandbox_available:
            return _fail_closed(timeout_ms)

    state = ctx.session_state.setdefault(NAME, {})
    # Checked and held as a descriptor the command starts in: a directory swapped for a symlink
    # after the check cannot move the command (escalated: on the host) out of the workspace.
    cwd_dir, cwd_rel = await asyncio.to_thread(open_cwd, root, state.get("cwd", ""))
    try:
        return await _run_in(ctx, params, root, cwd_dir.fd, cwd_rel, sandbox, sandbox_available, timeout_ms)
    finally:
        cwd_dir.close()


async def _run_in(
    ctx: ToolContext,
    params: Params,
    root: Path,
    cwd_fd: int,
    cwd_rel: str,
    sandbox: Sandbox | None,
    sandbox_available: bool | None,
    timeout_ms: int,
) -> ToolResult:
    state = ctx.session_state.setdefault(NAME, {})
    cwd = root / cwd_rel if cwd_rel else root

    effective_ms = max(0, min(timeout_ms, int(ctx.remaining_s() * 1000)))
    capture = OutputCapture()
    before = await take_snapshot(root)
    prepare = None
    root_git: rootgit.Guard | None = None
    if sandbox is not None:
        chosen = sandbox
        root_git = await _enter_root_git(root)

        def prepare(argv: list[str]) -> SandboxCommand:
            return chosen.prepare(argv, root, cwd)

    quarantined: str | None = None
    try:
        outcome = await run_shell(
            params.command,
            cwd=str(cwd),
            cwd_fd=cwd_fd,
            env=_environment(ctx, minimal=sandbox is not None or ctx.governed),
            timeout_s=effective_ms / 1000,
            capture=capture,
            prepare=prepare,
            on_output=lambda stream, data: _emit(ctx, stream, data),
        )
    finally:
        # Every sandboxed process is dead here (also on cancel): take back a planted `.git`.
        if root_git is not None:
            quarantined = _take_back_root_git(root, root_git)
    # A workspace too big to snapshot before is too big after: skip the second 400 ms attempt.
    after = await take_snapshot(root) if before is not None else None

    if outcome.final_cwd is not None:
        reported = relative_inside(root, outcome.final_cwd)
        if reported is not None:
            cwd_rel = reported
    state["cwd"] = cwd_rel

    changed = changed_paths(before, after)
    shown, cut = reported_paths(changed) if changed is not None else (None, False)
    metadata: dict[str, Any] = {
        "exit_code": outcome.exit_code,
        "sandboxed": sandbox is not None,
        "output": capture.summary(timed_out=outcome.timed_out),
        "timeout_ms": timeout_ms,
        "changed_paths": shown,
        "changed_paths_source": before.kind if changed is not None and before is not None else None,
        "cwd": cwd_rel or ".",
        "duration_ms": outcome.duration_ms,
    }
    if cut:
        metadata["changed_paths_truncated"] = True
    if sandbox_available is not None:
        metadata["sandbox_available"] = sandbox_available
    if outcome.returncode is not None and outcome.returncode < 0:
        metadata["signal"] = -outcome.returncode
    full_line = await _declare_bounded(ctx, capture, metadata)
    budget = OUTPUT_MAX_BYTES - len(full_line.encode("utf-8"))

    if quarantined is not None:
        metadata["quarantined_git"] = quarantined
        error = PermissionDenied(
            "The command created or replaced .git at the workspace root, or moved the git directory "
            "it names; sandboxed commands may not change repository metadata (the user's next git "
            f"command would honour its config and hooks). .git was moved to {quarantined}. Nested "
            "repositories (sub/.git) are allowed.",
            reason="protected_path",
            path=".git",
        )
        prefix = error.message + "\n"
        text = capture.render(budget - len(prefix))
        output = prefix + text + full_line
        return ToolResult(NAME, output, exit_code=1, metadata=metadata, error_kind=error.to_kind())
    if outcome.timed_out:
        error = Timeout(f"Command timed out after {effective_ms}ms", op=NAME, duration_ms=effective_ms)
        prefix = error.message + "\n"
        text = capture.render(budget - len(prefix))
        output = error.message + (f"\n{text}" if text else "") + full_line
        return ToolResult(NAME, output, exit_code=1, metadata=metadata, error_kind=error.to_kind())
    if outcome.exit_code != 0:
        suffix = f"\n[exit code {outcome.exit_code}]"
        text = capture.render(budget - len(suffix))
        sep = "" if not text or text.endswith("\n") else "\n"
        output = f"{text}{sep}{suffix.lstrip()}{full_line}"
        return ToolResult(NAME, output, exit_code=1, metadata=metadata)
    text = capture.render(budget)
    return ToolResult.success(NAME, text + full_line, metadata)


async def _declare_bounded(ctx: ToolContext, capture: OutputCapture, metadata: dict[str, Any]) -> str:
    """When capture cut the output, tell the projector the truth about the original (SPEC R-6).

    The original (both streams merged line by line in arrival order) is stored as an artifact when it stayed
    within ``RETAIN_FULL_MAX_BYTES``; the returned line (``[Full output artifact: …]``) then goes
    at the end of the output. Bigger originals are described by size and SHA-256 only.
    """
    digest = "sha256:" + capture.end()
    if not capture.truncated:
        return ""
    uri: str | None = None
    full = capture.full_output
    if full is not None:
        try:
            uri = await asyncio.to_thread(ctx.artifacts.put, NAME, full)
        except Exception:  # a full or failing store: the evidence then names what is retained
            uri = None
    metadata["output"]["full_output_uri"] = uri
    declare_bounded(metadata, BoundedOutput(capture.total_bytes, digest, "head_tail", uri))
    return artifact_line(uri).decode("utf-8") if uri is not None else ""


async def _enter_root_git(root: Path) -> rootgit.Guard:
    """``rootgit.enter``; while a command that just ended holds the workspace's lock to remove the
    ``.git`` placeholder, retried (each try is non-blocking) for at most ``ROOT_GIT_LOCK_WAIT_S``."""
    deadline = time.monotonic() + ROOT_GIT_LOCK_WAIT_S
    while True:
        try:
            return rootgit.enter(str(root))
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Timeout(
                    "another sandboxed command in this workspace kept its .git placeholder locked; "
                    "nothing ran, retry",
                    op=NAME,
                    duration_ms=int(ROOT_GIT_LOCK_WAIT_S * 1000),
                ) from None
            await asyncio.sleep(0.01)
        except OSError as exc:  # e.g. a read-only workspace without .a3s: nothing ran
            raise Unsupported(f"the sandbox could not prepare the command: {exc}") from exc


def _take_back_root_git(root: Path, guard: rootgit.Guard) -> str | None:
    """``rootgit.leave``; a planted ``.git`` that cannot be taken back fails the call loudly."""
    try:
        return rootgit.leave(guard)
    except OSError as exc:
        raise PermissionDenied(
            f"The command created or replaced .git at the workspace root and it could not be removed "
            f"({exc.strerror or exc}); remove {root / '.git'} before running git there.",
            reason="protected_path",
            path=".git",
        ) from None


def _wants_sandbox(ctx: ToolContext) -> bool:
    mode = getattr(ctx.settings, "bash_sandbox", "auto")
    if mode not in SANDBOX_MODES:
        mode = "auto"
    return ctx.governed or mode == "always"


async def _sandbox_for(ctx: ToolContext) -> tuple[Sandbox | None, bool]:
    """The sandbox to use and whether it is available (``never`` counts as unavailable)."""
    if getattr(ctx.settings, "bash_sandbox", "auto") == "never":
        return None, False
    sandbox = ctx.services.get("sandbox")
    if sandbox is None:
        sandbox = default_sandbox()
    if isinstance(sandbox, BwrapSandbox) and not sandbox.probed:
        # The first probe runs bwrap once: keep it off the event loop.
        await asyncio.to_thread(sandbox.probe)
    available = bool(sandbox.available)
    return (sandbox if available else None), available


def _fail_closed(timeout_ms: int) -> ToolResult:
    error = Unsupported(
        f"{SANDBOX_REQUIRED}, and none is available here. To run this command on the host, call again "
        'with sandbox_permissions="require_escalated" and a justification (a human will be asked).'
    )
    metadata = {"exit_code": None, "sandboxed": False, "sandbox_available": False, "timeout_ms": timeout_ms}
    return ToolResult.failure(NAME, error, metadata)


def _environment(ctx: ToolContext, *, minimal: bool) -> dict[str, str]:
    """The allow-listed environment for sandboxed and model-side calls; the host's for the rest."""
    if minimal:
        return minimal_environment(os.environ, getattr(ctx.settings, "bash_env_passthrough", ()))
    return host_environment(os.environ)


def _emit(ctx: ToolContext, stream: Stream, data: bytes) -> None:
    ctx.emit_delta({"stream": stream, "text": data.decode("utf-8", "replace")})


def _physical(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


TOOL = ToolSpec(
    name=NAME,
    description=DESCRIPTION,
    params=Params,
    run=run,
    capabilities=capabilities,
    requires=frozenset({"exec"}),
    requires_confirmation=requires_confirmation,
    subject=subject,
    subject_kind="command",
    builtin=True,
    examples=(
        {"command": "ls -la"},
        {"command": "pytest -q tests/test_api.py", "timeout": 300000},
    ),
)
