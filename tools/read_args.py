"""``read``'s arguments without pydantic: their limits, the parameters a call runs with
(``ReadArgs``/``FileArgs``), the quick validator of ordinary arguments and the cross-field rules
that ``tools.read_params.Params`` (the pydantic model, the schema's source) applies too
(``kernel.spec.DeferredParams``; CLI start-up, issue 13 item 7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools._quick_args import Defer, integer, only, optional, quick, string

if TYPE_CHECKING:
    from tools.read_params import Params as ParamsModel

MAX_LIMIT_LINES = 2000
MAX_BATCH_FILES = 32
MAX_PATH_CHARS = 4096
MIN_BATCH_OUTPUT_BYTES = 1024
MAX_BATCH_OUTPUT_BYTES = 98_304


@dataclass(frozen=True, slots=True)
class FileArgs:
    """One ``files`` item: what ``tools.read_params.FileRequest`` gives."""

    path: str
    offset: int = 0
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ReadArgs:
    """The parameters of a call: what ``tools.read_params.Params`` gives, field by field (``run``
    gets either one; ``kernel.spec.DeferredParams``)."""

    file_path: str | None = None
    files: list[FileArgs] | None = None
    offset: int | None = None
    limit: int | None = None
    max_output_bytes: int | None = None


_READ_KEYS = frozenset({"file_path", "files", "offset", "limit", "max_output_bytes"})
_FILE_KEYS = frozenset({"path", "offset", "limit"})


@quick
def quick_params(args: Mapping[str, Any]) -> ReadArgs:
    """``ReadArgs`` of ordinary arguments without pydantic (CLI start-up); the model decides the rest."""
    only(args, _READ_KEYS)
    files = args.get("files")
    if files is not None:
        if type(files) is not list or not 1 <= len(files) <= MAX_BATCH_FILES:
            raise Defer
        files = [_file_args(item) for item in files]
    parsed = ReadArgs(
        file_path=optional(args.get("file_path"), string, min_length=1),
        files=files,
        offset=optional(args.get("offset"), integer, ge=0),
        limit=optional(args.get("limit"), integer, ge=1),
        max_output_bytes=optional(
            args.get("max_output_bytes"), integer, ge=MIN_BATCH_OUTPUT_BYTES, le=MAX_BATCH_OUTPUT_BYTES
        ),
    )
    if exclusivity_error(parsed) is not None:
        raise Defer
    return parsed


def _file_args(item: Any) -> FileArgs:
    if type(item) is not dict:
        raise Defer
    only(item, _FILE_KEYS)
    if "path" not in item:
        raise Defer
    offset = integer(item["offset"], ge=0) if "offset" in item else 0
    return FileArgs(
        path=string(item["path"], min_length=1, max_length=MAX_PATH_CHARS),
        offset=offset,
        limit=optional(item.get("limit"), integer, ge=1, le=MAX_LIMIT_LINES),
    )


def request_json(item: FileArgs) -> dict[str, Any]:
    """A ``files`` item as the model would dump it, ``None`` left out (the continuation's items)."""
    out: dict[str, Any] = {"path": item.path, "offset": item.offset}
    if item.limit is not None:
        out["limit"] = item.limit
    return out


def exclusivity_error(params: ReadArgs | ParamsModel) -> str | None:
    """The cross-field rules of both forms (``Params`` raises this text)."""
    if (params.file_path is None) == (params.files is None):
        return "exactly one of file_path and files is required (they are mutually exclusive)"
    if params.files is not None and (params.offset is not None or params.limit is not None):
        return "offset and limit go inside each files item, not at the top level"
    if params.file_path is not None and params.max_output_bytes is not None:
        return "max_output_bytes applies only with files"
    return None
