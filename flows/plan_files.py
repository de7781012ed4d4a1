"""Reading verification plans from files: JSON or TOML, same shape (SPEC F-6).

JSON: ``{"title": …, "commands": [{id, kind, description, command, required, timeout_ms}]}``.
TOML: ``title = …`` and one ``[[commands]]`` table per command (stdlib ``tomllib``).

The format comes from the suffix (``.json`` / ``.toml``); any other suffix is sniffed (a document
starting with ``{`` is JSON, anything else TOML). Every failure — missing file, undecodable bytes,
syntax error, invalid plan — is one ``InvalidArgument``/``NotFound`` whose message names the file
and, for syntax errors, the line, so the CLI can print it as one line.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from flows.verify import VerificationPlan, build_plan
from kernel.errors import InvalidArgument, NotFound

MAX_PLAN_BYTES = 1024 * 1024

PlanFormat = Literal["json", "toml"]


def load_plan(path: str | os.PathLike[str]) -> VerificationPlan:
    file = Path(path)
    try:
        with file.open("rb") as fh:
            data = fh.read(MAX_PLAN_BYTES + 1)
    except FileNotFoundError:
        raise NotFound(f"plan file not found: {file}", path=str(file)) from None
    except IsADirectoryError:
        raise InvalidArgument(f"{file}: is a directory, not a plan file") from None
    except OSError as exc:
        raise InvalidArgument(f"{file}: cannot read plan file: {exc.strerror or exc}") from None
    if len(data) > MAX_PLAN_BYTES:
        raise InvalidArgument(f"{file}: plan file is larger than {MAX_PLAN_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{file}: plan file is not UTF-8 (byte {exc.start})") from None
    return parse_plan(text, _format_of(file, text), source=str(file))


def parse_plan(text: str, fmt: PlanFormat, *, source: str = "plan") -> VerificationPlan:
    return build_plan(_decode(text, fmt, source), source=source)


def _decode(text: str, fmt: PlanFormat, source: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{source}: invalid TOML: {exc}") from None


def _format_of(file: Path, text: str) -> PlanFormat:
    suffix = file.suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix == ".toml":
        return "toml"
    return "json" if text.lstrip().startswith("{") else "toml"
