"""What a bash command line runs, as permission rules see it (SPEC K-3; issue 15 item 5).

``command_subjects(line)`` parses ``line`` with ``bashlex`` (a port of bash's own grammar) and
returns one ``Subject`` per command the line can run: every simple command of every list,
pipeline, subshell, group, loop, function body, command and process substitution, and the strings
that ``eval``, ``sh -c``/``bash -c``, ``trap``, ``alias``, ``env -S``, ``su -c``, ``watch``,
``find -exec`` and ``xargs`` run. A command is seen through its prefixes (``command``, ``builtin``,
``exec``, ``env`` with options and assignments, ``nohup``, ``nice``, ``timeout``, ``sudo``,
``stdbuf``, ``setsid``, ``chroot``, ``flock``, ``time``, ``busybox``…): each layer is a subject of
its own, so a rule can name the wrapper or the command inside it.

Words are read from the source after quote removal (``\\rm``, ``'rm'``, ``r""m`` are ``rm``);
anything bash would expand — parameters, command substitutions, globs, brace expansion, ``~``,
``$'…'`` — is an *unknown* segment (``None``) that can stand for any text. Fail closed:

- a command whose *name* is not a literal (``$RM``, ``$(echo rm)``, ``r[m]``) is ``OPAQUE``;
- so is a command that runs code this parser cannot see: a shell reading a script or stdin
  (``bash x.sh``, ``| sh``), ``source``/``.``, ``eval`` of a non-literal, an unknown option of a
  wrapper (it might take the command's place), a parameter expansion that hides a substitution;
- a line ``bashlex`` cannot parse (``case``, ``[[ ]]``, ``$(( ))``, the ``time`` keyword, arrays,
  quoted here-doc delimiters…) raises ``Unparseable``.

An ``OPAQUE`` subject matches every deny rule and no allow rule (``kernel.policy``). Rules here are
a guard on the command *as written*; code run from files (scripts, interpreters, copies of
binaries) is the sandbox's to contain, never a rule's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_COMMAND_CHARS = 256 * 1024
MAX_NESTING = 16  # eval / sh -c / trap strings inside each other

Segments = tuple[str | None, ...]  # literal text and unknown parts (None: any text)


@dataclass(frozen=True, slots=True)
class Subject:
    """One thing a rule specifier is matched against.

    ``forms``: a deny or ask rule matches when it can match *some* text of *any* form (unknown
    segments stand for any text). ``allow``: an allow rule matches when, for one of these forms,
    it matches *every* text the form can stand for (empty: no allow rule can match).
    """

    forms: tuple[Segments, ...]
    allow: tuple[Segments, ...]

    @classmethod
    def literal(cls, text: str) -> Subject:
        return cls(((text,),), ((text,),))


OPAQUE = Subject(((None,),), ())


class Unparseable(Exception):
    """The line is not something this parser reads exactly: callers fail closed."""


def command_subjects(line: str) -> list[Subject]:
    """Every command ``line`` can run (see the module docstring); raises ``Unparseable``."""
    out: list[Subject] = []
    _parse_into(line, out, 0)
    return out


def command_subjects_or_opaque(line: str) -> list[Subject]:
    """``command_subjects``, with an unparseable line read as one ``OPAQUE`` command (fail closed)."""
    try:
        return command_subjects(line)
    except Unparseable:
        return [OPAQUE]


def _parse_into(line: str, out: list[Subject], depth: int) -> None:
    if depth > MAX_NESTING or len(line) > MAX_COMMAND_CHARS or "\x00" in line:
        raise Unparseable("command is nested or sized beyond what the rules read")
    if not line.strip():
        return
    import bashlex  # lazy: its parser tables take a while to build, and most processes never need them

    try:
        trees = bashlex.parse(line)
    except Exception as exc:  # bashlex raises ParsingError, NotImplementedError, and worse
        raise Unparseable(f"{type(exc).__name__}: {exc}") from None
    walker = _Walker(line, out, depth)
    for tree in trees:
        walker.visit(tree)


# ---- the tree walk ------------------------------------------------------------------------------


class _Walker:
    def __init__(self, src: str, out: list[Subject], depth: int) -> None:
        self.src = src
        self.out = out
        self.depth = depth

    def visit(self, node: Any) -> None:
        kind = getattr(node, "kind", None)
        if kind == "command":
            self._command(node)
            return
        if kind == "parameter":
            self._parameter(node)
        elif kind == "heredoc":
            self._heredoc(node)
        for child in _children(node):
            self.visit(child)

    def _parameter(self, node: Any) -> None:
        value = getattr(node, "value", "") or ""
        if any(tok in value for tok in ("$(", "`", "<(", ">(")):
            self.out.append(OPAQUE)  # ${x:-$(cmd)}: bashlex does not parse inside, so we cannot see it

    def _heredoc(self, node: Any) -> None:
        body = getattr(node, "value", "") or ""
        if "$(" in body or "`" in body:
            self.out.append(OPAQUE)  # an unquoted here-doc runs its substitutions

    def _command(self, node: Any) -> None:
        assignments: list[Segments] = []
        words: list[Segments] = []
        for part in node.parts:
            kind = part.kind
            if kind == "assignment" and not words:
                assignments.append(self._segments(part))
            elif kind in ("word", "assignment"):
                words.append(self._segments(part))
            # redirections: only their nested substitutions matter (visited below)
            for child in _children(part):
                self.visit(child)
        if not words:
            for a in assignments:  # a bare assignment (PATH=…) is a subject of its own
                self.out.append(Subject((a,), (a,)))
            return
        prefix: Segments = ()
        for a in assignments:
            prefix = (*prefix, *a, " ")
        self._layers(words, prefix)

    def _segments(self, word: Any) -> Segments:
        start, end = word.pos
        unknown = [tuple(p.pos) for p in _descendants(word) if p.kind in _EXPANSIONS]
        return word_segments(self.src[start:end], [(s - start, e - start) for s, e in unknown])

    # ---- one simple command, layer by layer --------------------------------------------------

    def _layers(self, argv: list[Segments], prefix: Segments) -> None:
        for _ in range(32):  # wrappers inside wrappers; deeper is refused below
            name = argv[0]
            text = _literal(name)
            if text is None:
                self.out.append(OPAQUE)
                return
            base = os.path.basename(text) or text
            self.out.append(_subject(base, text, argv[1:], prefix))
            prefix = ()
            nxt = self._inner(base, argv)
            if nxt is None:
                return
            argv = nxt
        self.out.append(OPAQUE)

    def _inner(self, base: str, argv: list[Segments]) -> list[Segments] | None:
        """The command a wrapper runs (its argv), or None; opaque or nested cases recorded here."""
        args = argv[1:]
        if base in _SHELLS:
            self._shell(args)
            return None
        if base in ("source", ".") or (base == "exec" and not args):
            if base != "exec":
                self.out.append(OPAQUE)
            return None
        if base == "eval":
            self._string(_join(args))
            return None
        if base == "trap":
            self._trap(args)
            return None
        if base == "alias":
            for a in args:
                lit = _literal(a)
                if lit is None:
                    self.out.append(OPAQUE)
                elif "=" in lit:
                    self._string(lit.split("=", 1)[1])
            return None
        if base == "find":
            self._find(args)
            return None
        if base in _COMMAND_STRING_ONLY:
            # su USER -c CMD, runuser, script -c CMD: without -c they start an interactive shell
            lits = [_literal(a) for a in args]
            for k, lit in enumerate(lits):
                if lit in ("-c", "--command") and k + 1 < len(lits):
                    self._string(lits[k + 1])
                    return None
                if lit is not None and lit.startswith("--command="):
                    self._string(lit.split("=", 1)[1])
                    return None
            self.out.append(OPAQUE)
            return None
        spec = _WRAPPERS.get(base)
        if spec is None:
            return None
        return self._unwrap(base, spec, args)

    def _unwrap(self, base: str, spec: _Wrapper, args: list[Segments]) -> list[Segments] | None:
        i = 0
        while i < len(args):
            lit = _literal(args[i])
            if lit is None:
                self.out.append(OPAQUE)  # a non-literal option could be anything, even the command
                return None
            if lit == "--":
                i += 1
                break
            if spec.assignments and "=" in lit and not lit.startswith("-"):
                i += 1  # env NAME=VALUE
                continue
            if not lit.startswith("-") or (lit == "-" and not spec.dash_is_option):
                break
            opt, _, inline = lit.partition("=")
            if opt in spec.string_opts:  # env -S 'cmd args', flock -c 'cmd', su -c 'cmd'
                value = inline if inline else _literal(args[i + 1]) if i + 1 < len(args) else None
                if value is None:
                    self.out.append(OPAQUE)
                else:
                    self._string(value)
                return None
            if opt in spec.with_arg:
                i += 1 if inline else 2
                continue
            if not opt.startswith("--") and len(opt) > 2 and opt[:2] in spec.with_arg:
                i += 1  # -I{} / -n1: the value is attached
                continue
            if opt in spec.flags or (not opt.startswith("--") and _cluster_ok(opt, spec)):
                i += 1
                continue
            self.out.append(OPAQUE)  # an option we do not know: it might take the command's place
            return None
        i += spec.positionals
        rest = args[i:]
        if rest and spec.string_opts and _literal(rest[0]) in spec.string_opts:
            self._string(_literal(rest[1]) if len(rest) > 1 else None)  # flock FILE -c 'cmd'
            return None
        if not rest:
            if spec.needs_command:
                self.out.append(OPAQUE)  # e.g. sudo -s / sudo -i: an interactive shell
            return None
        if spec.joined:  # watch: its arguments are one shell command
            joined = _join(rest)
            if joined is None:
                self.out.append(OPAQUE)
            else:
                self._string(joined)
            return None
        if spec.appends_input:  # xargs / parallel: arguments arrive from input
            rest = [*rest, (None,)]
        return rest

    def _shell(self, args: list[Segments]) -> None:
        i = 0
        command_mode = False
        while i < len(args):
            lit = _literal(args[i])
            if lit is None:
                self.out.append(OPAQUE)
                return
            if lit in ("-c",) or (lit.startswith("-") and not lit.startswith("--") and "c" in lit[1:]):
                command_mode = True
                i += 1
                continue
            if lit in ("-o", "-O", "+o", "+O", "--rcfile", "--init-file"):
                i += 2
                continue
            if lit.startswith(("-", "+")) and lit not in ("-", "--"):
                if "s" in lit.lstrip("-+") and not lit.startswith("--"):
                    self.out.append(OPAQUE)  # -s: commands from stdin
                    return
                i += 1
                continue
            if lit == "--":
                i += 1
            break
        if not command_mode or i >= len(args):
            self.out.append(OPAQUE)  # a script or stdin: commands we cannot see
            return
        body = _literal(args[i])
        if body is None:
            self.out.append(OPAQUE)
        else:
            self._string(body)

    def _trap(self, args: list[Segments]) -> None:
        lits = [_literal(a) for a in args]
        if any(x is None for x in lits):
            self.out.append(OPAQUE)
            return
        rest = [x for x in lits if x is not None]
        while rest and rest[0].startswith("-") and rest[0] != "-":
            if rest[0] == "--":
                rest = rest[1:]
                break
            rest = rest[1:]
        if len(rest) >= 2 and rest[0] != "-":
            self._string(rest[0])

    def _find(self, args: list[Segments]) -> None:
        i = 0
        while i < len(args):
            lit = _literal(args[i])
            if lit in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                inner: list[Segments] = []
                while j < len(args) and _literal(args[j]) not in (";", "+"):
                    inner.append(args[j])
                    j += 1
                if inner:
                    self._layers(inner, ())
                i = j + 1
                continue
            i += 1

    def _string(self, text: str | None) -> None:
        """Code bash will parse again (eval, -c strings, traps…): parsed here the same way."""
        if text is None:
            self.out.append(OPAQUE)
            return
        _parse_into(text, self.out, self.depth + 1)


# ---- words ----------------------------------------------------------------------------------------

_EXPANSIONS = frozenset({"parameter", "commandsubstitution", "processsubstitution", "tilde"})
_GLOB = frozenset("*?")


def word_segments(src: str, unknown: list[tuple[int, int]]) -> Segments:
    """``src`` (one word as written) after quote removal; expansions become ``None``.

    ``unknown`` are the spans bashlex found expansions at; any other unquoted or double-quoted
    ``$``/backtick makes the rest of the word unknown (fail closed), as do ``$'…'``/``$"…"``, globs
    and brace expansions.
    """
    segs: list[str | None] = []
    buf: list[str] = []
    spans = sorted(unknown)

    def flush_unknown() -> None:
        if buf:
            segs.append("".join(buf))
            buf.clear()
        if not segs or segs[-1] is not None:
            segs.append(None)

    i, n = 0, len(src)
    quote = ""  # '' or '"'
    while i < n:
        span = next((sp for sp in spans if sp[0] <= i < sp[1]), None)
        if span is not None and not (src.startswith(("$'", '$"'), i) and not quote):
            flush_unknown()
            i = span[1]
            continue
        c = src[i]
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                buf.append(c)
            i += 1
            continue
        if quote == '"':
            if c == '"':
                quote = ""
                i += 1
            elif c == "\\" and i + 1 < n and src[i + 1] in '$`"\\\n':
                if src[i + 1] != "\n":
                    buf.append(src[i + 1])
                i += 2
            elif c in "$`":
                flush_unknown()
                return tuple(segs)  # an expansion bashlex did not report: the rest is unknown
            else:
                buf.append(c)
                i += 1
            continue
        if c == "\\":
            if i + 1 < n and src[i + 1] != "\n":
                buf.append(src[i + 1])
            i += 2
            continue
        if c == "'":
            quote = "'"
            i += 1
            continue
        if c == '"':
            quote = '"'
            i += 1
            continue
        if src.startswith(("$'", '$"'), i):
            end = _quoted_end(src, i + 2, src[i + 1])
            flush_unknown()
            i = end
            continue
        if c in "$`":
            flush_unknown()
            return tuple(segs)
        if c in _GLOB:
            flush_unknown()
            i += 1
            continue
        if c == "[":
            close = src.find("]", i + 2)
            if close > 0:
                flush_unknown()
                i = close + 1
                continue
        if c == "{":
            close = src.find("}", i + 1)
            inner = src[i + 1 : close] if close > 0 else ""
            if "," in inner or ".." in inner:
                flush_unknown()
                i = close + 1
                continue
        buf.append(c)
        i += 1
    if buf:
        segs.append("".join(buf))
    return tuple(segs) if segs else ("",)


def _quoted_end(src: str, i: int, quote: str) -> int:
    while i < len(src):
        if src[i] == "\\":
            i += 2
            continue
        if src[i] == quote:
            return i + 1
        i += 1
    return len(src)


def _literal(word: Segments) -> str | None:
    if any(s is None for s in word):
        return None
    return "".join(s for s in word if s is not None)


def _join(words: list[Segments]) -> str | None:
    lits = [_literal(w) for w in words]
    if any(x is None for x in lits):
        return None
    return " ".join(x for x in lits if x is not None)


def _subject(base: str, written: str, args: list[Segments], prefix: Segments) -> Subject:
    tail: list[str | None] = []
    for a in args:
        tail.extend((" ", *a))
    by_base: Segments = (base, *tail)
    by_path: Segments = (written, *tail)
    plain = (by_base,) if base == written else (by_base, by_path)
    # "rm *" also covers a bare "rm": each form is offered with a trailing space too.
    forms = tuple(f for form in plain for f in (form, (*form, " ")))
    allow: Segments = (*prefix, *by_path)
    return Subject(forms, (allow, (*allow, " ")))


def _children(node: Any) -> Iterator[Any]:
    for attr in ("parts", "list", "command", "output", "heredoc"):
        value = getattr(node, attr, None)
        if isinstance(value, list):
            yield from (v for v in value if hasattr(v, "kind"))
        elif hasattr(value, "kind"):
            yield value


def _descendants(node: Any) -> Iterator[Any]:
    """Expansion nodes inside a word, not looking into the commands they run."""
    for child in _children(node):
        yield child
        if child.kind not in ("commandsubstitution", "processsubstitution"):
            yield from _descendants(child)


# ---- wrappers: what runs the command after their options ------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wrapper:
    """How a wrapper command (``env``, ``timeout``, ``nice``…) takes its options before the command it runs."""

    flags: frozenset[str] = frozenset()
    with_arg: frozenset[str] = frozenset()
    string_opts: frozenset[str] = frozenset()
    short_flags: str = ""  # letters that may be clustered (-iv)
    positionals: int = 0  # arguments before the command (timeout DURATION, chroot DIR)
    assignments: bool = False  # env NAME=VALUE
    needs_command: bool = False
    appends_input: bool = False
    joined: bool = False
    dash_is_option: bool = False


def _cluster_ok(opt: str, spec: _Wrapper) -> bool:
    letters = opt[1:]
    return bool(letters) and all(ch in spec.short_flags for ch in letters)


def _w(**kw: Any) -> _Wrapper:
    for key in ("flags", "with_arg", "string_opts"):
        if key in kw:
            kw[key] = frozenset(kw[key].split())
    return _Wrapper(**kw)


_COMMAND_STRING_ONLY = frozenset({"su", "runuser", "script"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "rbash", "fish"})

_WRAPPERS: dict[str, _Wrapper] = {
    "command": _w(short_flags="pvV"),
    "builtin": _w(),
    "exec": _w(short_flags="cl", with_arg="-a"),
    "nohup": _w(flags="--help --version"),
    "time": _w(
        short_flags="pvaq",
        with_arg="-f -o --format --output",
        flags="--portability --verbose --append --quiet",
    ),
    "env": _w(
        short_flags="iv0",
        flags="--ignore-environment --null --debug -",
        with_arg="-u -C --unset --chdir",
        string_opts="-S --split-string",
        assignments=True,
        dash_is_option=True,
    ),
    "nice": _w(with_arg="-n --adjustment"),
    "ionice": _w(short_flags="t", with_arg="-c -n --class --classdata", flags="--ignore"),
    "timeout": _w(
        short_flags="v",
        flags="--preserve-status --foreground --verbose",
        with_arg="-s -k --signal --kill-after",
        positionals=1,
    ),
    "stdbuf": _w(with_arg="-i -o -e --input --output --error"),
    "setsid": _w(short_flags="cfw", flags="--ctty --fork --wait"),
    "chroot": _w(with_arg="--userspec --groups", flags="--skip-chdir", positionals=1),
    "flock": _w(
        short_flags="sxnuoFe",
        flags="--shared --exclusive --nonblock --unlock --close --no-fork --verbose",
        with_arg="-w -E --timeout --conflict-exit-code",
        string_opts="-c --command",
        positionals=1,
    ),
    "sudo": _w(
        short_flags="AbEHnPSkKBN",
        flags="--preserve-env --non-interactive --stdin --background --askpass --set-home --reset-timestamp",
        with_arg="-u -g -h -p -C -D -r -t -T -U --user --group --host --prompt --chdir --role --type --close-from --other-user --command-timeout",
        needs_command=True,
    ),
    "doas": _w(short_flags="ns", with_arg="-u -C", needs_command=True),
    "xargs": _w(
        short_flags="0prtxo",
        flags="--null --interactive --no-run-if-empty --verbose --exit --open-tty",
        with_arg="-a -d -E -I -L -n -P -s --arg-file --delimiter --eof --replace --max-lines --max-args --max-procs --max-chars --process-slot-var",
        appends_input=True,
    ),
    "parallel": _w(short_flags="kqv", with_arg="-j -S --jobs", appends_input=True),
    "watch": _w(
        short_flags="bcdeghpstx",
        with_arg="-n --interval",
        flags="--beep --color --differences --errexit --chgexit --precise --no-title --exec",
        joined=True,
    ),
    "strace": _w(short_flags="fqvc", with_arg="-e -o -p -s -u"),
    "ltrace": _w(short_flags="fSc", with_arg="-e -o -p -s -u"),
    "taskset": _w(short_flags="ac", flags="--all-tasks --cpu-list", positionals=1),
    "unbuffer": _w(),
    "busybox": _w(),
    "caffeinate": _w(short_flags="dimsu"),
}
