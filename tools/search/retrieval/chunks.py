"""Chunks and symbols of one file version, shared by every retrieval channel (SPEC Q-6).

Chunks are the bm25 mode's own (``tools.search.bm25``): 80-line windows, at most 128 per file,
lines split on ``\\n`` with a trailing empty line dropped — so a chunk is identified by
``(path, start_line)`` in every channel and fusion lines them up exactly.

Symbols are definitions found by a per-language regex (no tree-sitter here): Python ``def``/``class``,
JS/TS ``function``/``class``/``const|let|var``/``interface``/``type``/``enum``, Go ``func``/``type``,
Rust ``fn``/``struct``/``enum``/``trait``/``impl``/``mod``, Java/C#/Kotlin classes, interfaces, records
and methods, C/C++ functions/structs/classes, Ruby/PHP/Swift/Scala definitions, shell functions.
A definition regex matches at the start of a line (after indentation and modifiers), so a call is
never taken for a definition.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from tools.search import bm25

CHUNK_LINES = bm25.CHUNK_LINES
MAX_CHUNKS_PER_FILE = bm25.MAX_CHUNKS_PER_FILE
MAX_SYMBOLS_PER_FILE = 2_000
MAX_EMBED_CHARS = 4_000  # chars of a chunk handed to the embedder; MiniLM reads ≤ 256 tokens anyway


def digest(data: bytes) -> str:
    """The version stamp of a file's bytes (compared before any indexed hit is returned)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int
    text: str


def split_lines(text: str) -> list[str]:
    return [line[:-1] if line.endswith("\r") else line for line in bm25.split_lines(text)]


def chunk_lines(lines: list[str]) -> list[Chunk]:
    n = len(lines)
    out: list[Chunk] = []
    for c in range(min(-(-n // CHUNK_LINES), MAX_CHUNKS_PER_FILE)):
        s = c * CHUNK_LINES
        e = min(s + CHUNK_LINES, n)
        out.append(Chunk(s + 1, e, "\n".join(lines[s:e])))
    return out


def chunk_start(line: int) -> int | None:
    """The start line of the chunk holding 1-based ``line``, or None past the last chunk."""
    c = (line - 1) // CHUNK_LINES
    return c * CHUNK_LINES + 1 if 0 <= c < MAX_CHUNKS_PER_FILE else None


def embed_text(path: str, chunk: Chunk) -> str:
    """What the embedder sees: the path (a strong topical hint) and the chunk's text."""
    return f"{path}\n{chunk.text[:MAX_EMBED_CHARS]}"


# --- symbols -------------------------------------------------------------------------------------

_IDENT = r"[A-Za-z_$][\w$]*"
_MODS = r"(?:(?:export|default|public|private|protected|internal|static|final|abstract|sealed|open|override|virtual|async|unsafe|extern|inline|partial|readonly|pub(?:\([^)]*\))?|const|data|suspend|declare)\s+)*"

_PY = [re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+({_IDENT})")]
_JS = [
    re.compile(rf"^\s*{_MODS}(?:function\*?|class|interface|type|enum|namespace)\s+({_IDENT})"),
    re.compile(
        rf"^\s*{_MODS}(?:const|let|var)\s+({_IDENT})\s*(?::[^=]+)?=\s*(?:async\s+)?(?:function|\(|{_IDENT}\s*=>|class)"
    ),
    re.compile(
        rf"^\s*{_MODS}(?:get\s+|set\s+)?(?!(?:if|for|while|switch|catch|return|function|with)\b)({_IDENT})\s*\([^)]*\)\s*(?::\s*[^{{]+)?\{{\s*$"
    ),  # class methods
]
_GO = [
    re.compile(rf"^func\s+(?:\([^)]*\)\s*)?({_IDENT})"),
    re.compile(rf"^(?:type)\s+({_IDENT})\s+(?:struct|interface|func|\w)"),
]
_RUST = [
    re.compile(rf"^\s*{_MODS}(?:fn|struct|enum|trait|union|mod|type|macro_rules!)\s+({_IDENT})"),
    re.compile(rf"^\s*{_MODS}impl(?:<[^>]*>)?\s+(?:{_IDENT}(?:<[^>]*>)?\s+for\s+)?({_IDENT})"),
]
_JAVA_LIKE = [
    re.compile(rf"^\s*(?:@\w+\s+)*{_MODS}(?:class|interface|enum|record|struct|object|trait)\s+({_IDENT})"),
    # method: modifiers, a return type, name, '(' — and no keyword that would make it a call
    re.compile(rf"^\s*(?:@\w+\s+)*{_MODS}(?!return\b|new\b|else\b)[\w<>\[\],.?]+\s+({_IDENT})\s*\([^;]*$"),
    re.compile(rf"^\s*{_MODS}fun\s+(?:<[^>]*>\s*)?(?:{_IDENT}\.)?({_IDENT})"),  # Kotlin
]
_C_LIKE = [
    re.compile(rf"^(?:struct|class|union|enum|namespace)\s+({_IDENT})"),
    re.compile(rf"^(?!return\b|else\b|if\b)[\w:*&<>\s]+?[\s*&]({_IDENT}(?:::{_IDENT})*)\s*\([^;]*$"),
    re.compile(rf"^#define\s+({_IDENT})"),
]
_RUBY = [re.compile(rf"^\s*(?:def\s+(?:self\.)?|class\s+|module\s+)({_IDENT}[?!]?)")]
_PHP = [re.compile(rf"^\s*{_MODS}(?:function|class|interface|trait|enum)\s+({_IDENT})")]
_SWIFT = [re.compile(rf"^\s*{_MODS}(?:func|class|struct|enum|protocol|extension)\s+({_IDENT})")]
_SHELL = [re.compile(rf"^\s*(?:function\s+)?({_IDENT})\s*\(\)\s*\{{?")]

_BY_EXT: dict[str, list[re.Pattern[str]]] = {}
for exts, pats in (
    (("py", "pyi"), _PY),
    (("js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts"), _JS),
    (("go",), _GO),
    (("rs",), _RUST),
    (("java", "cs", "kt", "kts", "scala"), _JAVA_LIKE),
    (("c", "h", "cc", "cpp", "cxx", "hpp", "hh", "m", "mm"), _C_LIKE),
    (("rb",), _RUBY),
    (("php",), _PHP),
    (("swift",), _SWIFT),
    (("sh", "bash", "zsh"), _SHELL),
):
    for ext in exts:
        _BY_EXT[ext] = pats


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    line: int  # 1-based definition line
    terms: frozenset[str]  # the bm25 tokens of the name (camel/snake parts, lowercased)


def language_patterns(path: str) -> list[re.Pattern[str]] | None:
    name = path.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return _BY_EXT.get(ext)


def find_symbols(path: str, lines: list[str]) -> list[Symbol]:
    """Definitions in ``lines`` by the per-language regex; [] for a language we do not know."""
    pats = language_patterns(path)
    if not pats:
        return []
    out: list[Symbol] = []
    limit = CHUNK_LINES * MAX_CHUNKS_PER_FILE  # lines past the last chunk cannot be returned
    for i, line in enumerate(lines[:limit]):
        if len(line) > 400 or not line.strip():
            continue
        for rx in pats:
            m = rx.match(line)
            if m:
                name = m.group(1)
                out.append(Symbol(name, i + 1, frozenset(bm25.tokenize(name))))
                break
        if len(out) >= MAX_SYMBOLS_PER_FILE:
            break
    return out
