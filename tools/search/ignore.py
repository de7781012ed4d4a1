"""Which files a search sees: ripgrep's default filters, re-implemented over the Workspace protocol.

Rules (those of ripgrep 13 with ``--no-require-git --no-ignore-parent --no-ignore-global
--no-ignore-exclude``, applied from the workspace root down):

- ``.gitignore``, ``.ignore`` and ``.rgignore`` files, in every directory, gitignore syntax (``!``
  negation, trailing ``/`` for directories, a ``/`` at the start or middle anchors the pattern to
  the file's directory, ``**``, ``{a,b}`` alternation as in ripgrep's globset). Within one file the
  last matching line wins. For each kind the deepest directory with a match decides; across kinds
  ``.rgignore`` beats ``.ignore`` beats ``.gitignore``. ``.gitignore`` files above a nested git
  repository (a directory holding ``.git``) do not apply inside it.
- hidden entries (a name starting with ``.``) are skipped unless an ignore file whitelists them;
- ``.git`` and ``.a3s`` (at any depth) are never searched; symlinks and special files are not
  followed; an ignored or hidden directory is not descended into (so a negation cannot re-include
  a file inside it, as in git).
- the search base itself (``path``) is never filtered; only what lies below it.

``GlobPattern`` is the glob language shared by ``include``, the glob mode and ignore files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Literal

from kernel.errors import InvalidArgument, NotFound, ToolError, Unsupported
from kernel.workspace import Entry, Workspace

IGNORE_FILES = (".rgignore", ".ignore", ".gitignore")  # highest precedence first
NEVER_SEARCHED = frozenset({".git", ".a3s"})
MAX_IGNORE_FILE_BYTES = 1024 * 1024
MAX_GLOB_NESTING = 32  # '{' groups inside each other (ripgrep's globset allows none)

Match = Literal["ignore", "whitelist"] | None


def glob_to_regex(glob: str, *, linear: bool = False) -> str:
    """Translate one gitignore/ripgrep glob body (no ``!``, no trailing ``/``) to a regex body.

    ``*`` and ``?`` never cross ``/``; ``**/`` matches zero or more directories, ``/**`` everything
    below, a lone ``**`` everything; ``[...]`` classes (``!`` or ``^`` negates) never match ``/``;
    ``{a,b}`` alternation; ``\\`` escapes the next character.

    ``linear``: the same language spelled for RE2 (``_re2_escape``; a class that must not match
    ``/`` has ``/`` cut out of its ranges instead of a lookahead RE2 does not have).
    """
    esc = _re2_escape if linear else re.escape
    out: list[str] = []
    i, n = 0, len(glob)
    depth = 0
    while i < n:
        c = glob[i]
        if c == "*":
            if glob.startswith("**", i):
                before_ok = i == 0 or glob[i - 1] == "/"
                after = i + 2
                if before_ok and after == n:
                    out.append(".*")
                    i = after
                    continue
                if before_ok and glob[after] == "/":
                    out.append("(?:.*/)?")
                    i = after + 1
                    continue
                out.append("[^/]*")
                i = after
                continue
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = glob.find("]", i + 2 if glob.startswith(("[!", "[^"), i) else i + 1)
            if end < 0:
                out.append(esc(c))
                i += 1
                continue
            body = glob[i + 1 : end]
            neg = body[:1] in ("!", "^")
            if neg:
                body = body[1:]
            if linear:
                out.append(_re2_class(body, neg))
                i = end + 1
                continue
            items = "".join("\\" + ch if ch in "\\^[]" else ch for ch in body)
            out.append(f"[^/{items}]" if neg else f"(?!/)[{items}]")
            i = end + 1
        elif c == "{":
            depth += 1
            if depth > MAX_GLOB_NESTING:
                # Python's re parser recurses per group: ~1000 nested '{' raised RecursionError,
                # and an ignore-file line like that failed every search of the workspace.
                raise InvalidArgument(f"glob nests '{{' more than {MAX_GLOB_NESTING} deep")
            out.append("(?:")
            i += 1
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
            i += 1
        elif c == "," and depth:
            out.append("|")
            i += 1
        elif c == "\\" and i + 1 < n:
            out.append(esc(glob[i + 1]))
            i += 2
        else:
            out.append(esc(c))
            i += 1
    if depth:
        raise InvalidArgument(f"glob {glob!r} has an unclosed '{{'")
    return "".join(out)


def _re2_escape(ch: str) -> str:
    """One literal character for RE2: ASCII other than letters and digits as ``\\x{..}``; anything
    else as itself (a lone surrogate is matched as its ``surrogatepass`` bytes, one rune to RE2)."""
    if ord(ch) < 128 and not ch.isalnum():
        return f"\\x{{{ord(ch):X}}}"
    return ch


def _re2_class(body: str, negated: bool) -> str:
    """A glob class body (literal characters and ``a-z`` ranges, read as Python ``re`` reads the
    escaped body) for RE2, never matching ``/``."""
    ranges: list[tuple[int, int]] = []
    j = 0
    while j < len(body):
        if j + 2 < len(body) and body[j + 1] == "-":
            lo, hi = ord(body[j]), ord(body[j + 2])
            j += 3
        else:
            lo = hi = ord(body[j])
            j += 1
        if lo > hi:
            raise InvalidArgument(f"invalid glob class [{body}]: bad character range")
        ranges.append((lo, hi))
    slash = ord("/")
    if negated:
        ranges.append((slash, slash))
    else:
        cut: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if lo <= slash <= hi:
                if lo < slash:
                    cut.append((lo, slash - 1))
                if hi > slash:
                    cut.append((slash + 1, hi))
            else:
                cut.append((lo, hi))
        ranges = cut
        if not ranges:
            return "[^\\x{0}-\\x{10FFFF}]"  # matches nothing, as (?!/)[/] does

    def one(c: int) -> str:
        return _re2_escape(chr(c))

    items = "".join(one(lo) if lo == hi else f"{one(lo)}-{one(hi)}" for lo, hi in ranges)
    return f"[^{items}]" if negated else f"[{items}]"


def _compile_linear(body_rx: str) -> object | None:
    """RE2 program of a glob's linear spelling (full match, bytes), or None (``re`` is used)."""
    try:
        import re2
    except ImportError:  # pragma: no cover - pinned dependency
        return None
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(("(?s)" + body_rx).encode("utf-8", "surrogatepass"), options)
    except re2.error:
        return None


@dataclass(frozen=True, slots=True)
class GlobPattern:
    """One gitignore-style line: anchored when it has a ``/`` before its end, else matches any depth."""

    source: str
    negated: bool
    dir_only: bool
    regex: re.Pattern[str]
    # RE2 (linear time) spelling of ``regex``. Python ``re`` backtracks: ``*a*a*a*a*b`` against a
    # 200-character name took 3.9 s with the GIL held (every session stopped), one more ``*a``
    # ~100x that. None only when RE2 cannot take it (``regex`` is used then).
    linear: object | None = None

    @classmethod
    def parse(cls, line: str, *, allow_negation: bool = True, comments: bool = True) -> GlobPattern | None:
        raw = line.rstrip("\n").rstrip("\r")
        # Trailing spaces are dropped unless escaped (git rules).
        while raw.endswith(" ") and not raw.endswith("\\ "):
            raw = raw[:-1]
        if not raw or (comments and raw.startswith("#")):
            return None
        negated = False
        if raw.startswith("!") and allow_negation:
            negated, raw = True, raw[1:]
        elif raw.startswith(("\\!", "\\#")):
            raw = raw[1:]
        dir_only = raw.endswith("/") and not raw.endswith("\\/")
        body = raw.rstrip("/") if dir_only else raw
        if not body:
            return None
        anchored = "/" in body
        body = body.lstrip("/")
        if not body:
            return None
        rx = glob_to_regex(body)
        prefix = "" if anchored or body.startswith("**") else "(?:.*/)?"
        try:
            compiled = re.compile(prefix + rx + r"\Z", re.DOTALL)
        except re.error as exc:
            raise InvalidArgument(f"invalid glob {line!r}: {exc}") from None
        lrx = prefix + glob_to_regex(body, linear=True)
        return cls(
            source=line, negated=negated, dir_only=dir_only, regex=compiled, linear=_compile_linear(lrx)
        )

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.linear is not None:
            return self.linear.fullmatch(rel.encode("utf-8", "surrogatepass")) is not None  # type: ignore[attr-defined]
        return self.regex.match(rel) is not None


def compile_glob(glob: str, what: str = "glob") -> GlobPattern:
    """A user-supplied glob (``include``, the glob mode's ``query``); ``!`` is not allowed here."""
    if not glob.strip():
        raise InvalidArgument(f"{what} must not be blank")
    if "\x00" in glob:
        raise InvalidArgument(f"{what} contains a NUL byte")
    pat = GlobPattern.parse(glob, allow_negation=False, comments=False)
    if pat is None:
        raise InvalidArgument(f"{what} {glob!r} matches nothing")
    return pat


def parse_ignore_file(text: str) -> list[GlobPattern]:
    out: list[GlobPattern] = []
    for line in text.split("\n"):
        try:
            pat = GlobPattern.parse(line)
        except InvalidArgument:
            continue  # ripgrep skips (and warns about) invalid lines
        if pat is not None:
            out.append(pat)
    return out


def _match_list(patterns: list[GlobPattern], rel: str, is_dir: bool) -> Match:
    for pat in reversed(patterns):
        if pat.matches(rel, is_dir):
            return "whitelist" if pat.negated else "ignore"
    return None


@dataclass(slots=True)
class DirRules:
    """The ignore files of one directory (``dir`` is workspace-relative, '' for the root)."""

    dir: str
    has_git: bool = False
    kinds: dict[str, list[GlobPattern]] = field(default_factory=dict)

    def match(self, kind: str, path: str, is_dir: bool) -> Match:
        pats = self.kinds.get(kind)
        if not pats:
            return None
        rel = path[len(self.dir) + 1 :] if self.dir else path
        return _match_list(pats, rel, is_dir)


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


class IgnoreRules:
    """Per-call cache of ``DirRules`` and the visibility decision for any workspace path."""

    def __init__(self, workspace: Workspace) -> None:
        self._ws = workspace
        self._dirs: dict[str, DirRules] = {}

    def rules_for(self, directory: str, names: set[str] | None = None) -> DirRules:
        """Load ``directory``'s ignore files; ``names`` (from a listing) avoids probing absent ones."""
        cached = self._dirs.get(directory)
        if cached is not None:
            return cached
        rules = DirRules(dir=directory)
        if names is not None:
            rules.has_git = ".git" in names
        else:
            rules.has_git = self._exists(_join(directory, ".git"))
        for kind in IGNORE_FILES:
            if names is not None and kind not in names:
                continue
            text = self._read_text(_join(directory, kind))
            if text is not None:
                rules.kinds[kind] = parse_ignore_file(text)
        self._dirs[directory] = rules
        return rules

    def _exists(self, path: str) -> bool:
        try:
            self._ws.stat(path)
        except (ToolError, OSError):
            return False
        return True

    def _read_text(self, path: str) -> str | None:
        # Only the first MAX_IGNORE_FILE_BYTES are used, so only they are read: a sparse 3 GiB
        # `.gitignore` a sandboxed command made was otherwise read whole into this process.
        open_file = getattr(self._ws, "open_file", None)
        try:
            if open_file is not None:
                with open_file(path) as fh:
                    data = _read_up_to(fh, MAX_IGNORE_FILE_BYTES)
            else:
                data = self._ws.read_bytes(path)
        except (ToolError, OSError):
            return None
        return data[:MAX_IGNORE_FILE_BYTES].decode("utf-8", "replace")

    def decide(self, path: str, is_dir: bool) -> Match:
        """The ignore-file verdict for ``path`` from the directories above it (deepest first)."""
        verdict: dict[str, Match] = dict.fromkeys(IGNORE_FILES)
        saw_git = False
        d = _parent(path)
        while True:
            rules = self.rules_for(d)
            for kind in IGNORE_FILES:
                if verdict[kind] is None and not (kind == ".gitignore" and saw_git):
                    verdict[kind] = rules.match(kind, path, is_dir)
            saw_git = saw_git or rules.has_git
            if not d:
                break
            d = _parent(d)
        for kind in IGNORE_FILES:
            if verdict[kind] is not None:
                return verdict[kind]
        return None

    def skipped(self, path: str, is_dir: bool) -> bool:
        """Would a walk skip this entry (never-searched, ignored, or hidden and not whitelisted)?"""
        name = path.rsplit("/", 1)[-1]
        if name in NEVER_SEARCHED:
            return True
        verdict = self.decide(path, is_dir)
        if verdict == "ignore":
            return True
        if verdict == "whitelist":
            return False
        return name.startswith(".")

    def visible_below(self, base: str, path: str) -> bool:
        """Is file ``path`` reached by a walk from ``base`` (every component below base kept)?"""
        if base and not path.startswith(base + "/"):
            return path == base
        rest = path[len(base) + 1 :] if base else path
        parts = rest.split("/")
        cur = base
        for i, part in enumerate(parts):
            cur = _join(cur, part)
            if self.skipped(cur, is_dir=i < len(parts) - 1):
                return False
        return True


class WalkReport:
    """What a walk learned besides its entries: ``truncated`` when the backend capped its scan (Q-3)."""

    __slots__ = ("truncated",)

    def __init__(self) -> None:
        self.truncated = False


def walk(
    workspace: Workspace,
    base: str,
    rules: IgnoreRules,
    should_stop: Callable[[], bool] = lambda: False,
    report: WalkReport | None = None,
) -> Iterator[Entry]:
    """Every visible regular file under directory ``base`` (walk order; symlinks are not followed).

    Uses ``list_dir`` to prune ignored directories; a workspace without ``list_dir`` falls back to
    ``walk_files`` plus a per-path visibility check (same answer, more reading). A backend whose
    scan is capped (the object store) marks its scan ``truncated``; that lands in ``report``.
    """
    try:
        if getattr(workspace, "flat_listing", False):
            raise Unsupported("flat listing: scan with walk_files")
        first = workspace.list_dir(base)
    except (Unsupported, NotImplementedError, AttributeError):
        scan = workspace.walk_files(base)
        entries = sorted(scan, key=lambda e: e.path)
        if report is not None and getattr(scan, "truncated", False):
            report.truncated = True
        for entry in entries:
            if should_stop():
                return
            if rules.visible_below(base, entry.path):
                yield entry
        return
    yield from _walk_dir(workspace, base, first, rules, should_stop)


def _walk_dir(
    workspace: Workspace,
    directory: str,
    entries: list[Entry],
    rules: IgnoreRules,
    should_stop: Callable[[], bool],
) -> Iterator[Entry]:
    rules.rules_for(directory, {e.name for e in entries})
    # Walk order only: callers that page or render sort the full paths themselves.
    for entry in entries:
        if should_stop():
            return
        if entry.kind == "dir":
            if rules.skipped(entry.path, is_dir=True):
                continue
            yield from _walk_sorted_dir(workspace, entry.path, rules, should_stop)
        elif entry.kind == "file":
            if not rules.skipped(entry.path, is_dir=False):
                yield entry


def _walk_sorted_dir(
    workspace: Workspace, directory: str, rules: IgnoreRules, should_stop: Callable[[], bool]
) -> Iterator[Entry]:
    try:
        entries = workspace.list_dir(directory)
    except (NotFound, InvalidArgument, ToolError, OSError):
        return
    yield from _walk_dir(workspace, directory, entries, rules, should_stop)


def _read_up_to(fh: BinaryIO, limit: int) -> bytes:
    parts: list[bytes] = []
    left = limit
    while left > 0 and (chunk := fh.read(left)):
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
