"""The text view of a file's bytes for ``write``/``edit``/``patch``, and their change metadata (SPEC B-3).

Decoding rule (``edit`` and ``patch``; ``write`` stores exactly the UTF-8 of its ``content``):

- bytes starting with the UTF-8 BOM decode as UTF-8 after it, and the BOM is written back;
- otherwise strict UTF-8;
- otherwise latin-1. latin-1 maps every byte to one code point (U+0000..U+00FF) and back, so the
  bytes an edit does not touch are written back byte-exactly. Replacement text must then be
  encodable in latin-1, else the call fails with ``invalid_argument`` and nothing is written.

Line endings are kept per file: ``eol_style`` classifies a text as ``lf``, ``crlf``, ``mixed`` or
``none``; the tools convert the model's line breaks to the file's style (see ``tools/edit.py`` and
``tools/patch/apply.py``).

Change metadata carries the full ``before``/``after`` strings (the kernel's projection compacts
them above 64 KiB, REFERENCE §6.5), their SHA-256 and byte sizes, and a unified diff (context 3)
that is bounded here: skipped when before+after exceed ``MAX_DIFF_INPUT_BYTES``, otherwise cut to
a UTF-8-safe head and tail of at most ``MAX_DIFF_BYTES`` in total.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from kernel.errors import InvalidArgument

UTF8_BOM = b"\xef\xbb\xbf"
Encoding = Literal["utf-8", "utf-8-sig", "latin-1"]
EolStyle = Literal["lf", "crlf", "mixed", "none"]

DIFF_CONTEXT_LINES = 3
MAX_DIFF_INPUT_BYTES = 1024 * 1024  # before + after above this: no diff at all
DIFF_HEAD_BYTES = 24 * 1024
DIFF_TAIL_BYTES = 8 * 1024
MAX_DIFF_BYTES = DIFF_HEAD_BYTES + DIFF_TAIL_BYTES


@dataclass(frozen=True, slots=True)
class DecodedText:
    text: str
    encoding: Encoding

    def encode(self, text: str, *, path: str) -> bytes:
        return encode_text(text, self.encoding, path=path)


def decode_bytes(data: bytes) -> DecodedText:
    """Bytes → text under the decoding rule above (never fails)."""
    if data.startswith(UTF8_BOM):
        try:
            return DecodedText(data[len(UTF8_BOM) :].decode("utf-8"), "utf-8-sig")
        except UnicodeDecodeError:
            return DecodedText(data.decode("latin-1"), "latin-1")
    try:
        return DecodedText(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        return DecodedText(data.decode("latin-1"), "latin-1")


def encode_text(text: str, encoding: Encoding, *, path: str) -> bytes:
    if encoding == "utf-8-sig":
        return UTF8_BOM + text.encode("utf-8")
    if encoding == "latin-1":
        try:
            return text.encode("latin-1")
        except UnicodeEncodeError as exc:
            bad = text[exc.start]
            raise InvalidArgument(
                f"{path} is not UTF-8, so it is edited as latin-1 to keep its bytes exact; the new text "
                f"contains U+{ord(bad):04X}, which latin-1 cannot store. Use characters U+0000..U+00FF "
                "or convert the file to UTF-8 first."
            ) from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates from JSON
        raise InvalidArgument(
            f"text for {path} is not valid Unicode (lone surrogate at {exc.start})"
        ) from None


def eol_style(text: str) -> EolStyle:
    crlf = text.count("\r\n")
    bare_lf = text.count("\n") - crlf
    if crlf and bare_lf:
        return "mixed"
    if crlf:
        return "crlf"
    if bare_lf:
        return "lf"
    return "none"


def to_crlf(text: str) -> str:
    """Every bare LF becomes CRLF; existing CRLF stays."""
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def to_lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def split_keepends(text: str) -> list[str]:
    """Lines split on ``\\n`` only, ending kept (``str.splitlines`` also splits on ``\\r``, ``\\x0c``, U+2028…)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bounded_unified_diff(
    before: str, after: str, *, from_label: str, to_label: str, input_bytes: int
) -> tuple[str, bool, bool]:
    """``(diff, truncated, omitted)``: a context-3 unified diff, bounded as the module says."""
    if input_bytes > MAX_DIFF_INPUT_BYTES:
        return "", False, True
    lines = difflib.unified_diff(
        split_keepends(before),
        split_keepends(after),
        fromfile=from_label,
        tofile=to_label,
        n=DIFF_CONTEXT_LINES,
    )
    parts: list[str] = []
    for line in lines:
        if line.endswith("\n"):
            parts.append(line)
        else:  # the last line of a side without a final newline
            parts.append(line + "\n\\ No newline at end of file\n")
    text = "".join(parts)
    return (*bound_text(text), False)


def bound_text(text: str) -> tuple[str, bool]:
    """``(text, truncated)``: ``text`` cut to a UTF-8-safe head and tail of ``MAX_DIFF_BYTES``."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_DIFF_BYTES:
        return text, False
    head = data[:DIFF_HEAD_BYTES].decode("utf-8", "ignore")
    tail = data[-DIFF_TAIL_BYTES:].decode("utf-8", "ignore")
    omitted = (
        len(data) - len(head.encode("utf-8", "surrogatepass")) - len(tail.encode("utf-8", "surrogatepass"))
    )
    return f"{head}\n[... diff truncated: {omitted} bytes omitted from the middle ...]\n{tail}", True


def change_metadata(
    file_path: str,
    before: str,
    after: str,
    before_data: bytes | None,
    after_data: bytes | None,
) -> dict[str, Any]:
    """The shared metadata of one file change (``None`` data = the file does not exist on that side)."""
    before_bytes = len(before_data) if before_data is not None else 0
    after_bytes = len(after_data) if after_data is not None else 0
    diff, truncated, omitted = bounded_unified_diff(
        before,
        after,
        from_label=f"a/{file_path}" if before_data is not None else "/dev/null",
        to_label=f"b/{file_path}" if after_data is not None else "/dev/null",
        input_bytes=before_bytes + after_bytes,
    )
    return {
        "file_path": file_path,
        "before": before,
        "after": after,
        "before_sha256": sha256_hex(before_data) if before_data is not None else None,
        "after_sha256": sha256_hex(after_data) if after_data is not None else None,
        "before_bytes": before_bytes,
        "after_bytes": after_bytes,
        "diff": diff,
        "diff_truncated": truncated,
        "diff_omitted": omitted,
    }
