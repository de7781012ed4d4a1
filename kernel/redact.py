"""Output sanitisation (SPEC K-3 "security provider"): a pluggable secret redactor.

The default redacts well-known credential shapes (private keys, cloud and SaaS tokens, bearer
headers) from tool output and error text before anything leaves the kernel. Hosts plug their own
``SecretRedactor`` (anything with ``redact(text) -> str``) through ``SessionOptions``.
"""

from __future__ import annotations

import re
from typing import Protocol

REDACTED = "[REDACTED]"


class SecretRedactor(Protocol):
    def redact(self, text: str) -> str: ...


# (marker, pattern): a pattern runs only when its literal marker occurs, so ordinary output costs a
# few substring scans rather than a full regex pass (the kernel redacts every result).
_PATTERNS: list[tuple[str | None, str]] = [
    ("PRIVATE KEY", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    ("AKIA", r"\bAKIA[0-9A-Z]{16}\b"),
    ("gh", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    ("github_pat_", r"\bgithub_pat_[A-Za-z0-9_]{22,}\b"),
    ("sk-", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}\b"),
    ("xox", r"\bxox[baprs]-[A-Za-z0-9\-]{10,}\b"),
    ("AIza", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    ("authorization", r"\b((?i:authorization):\s*(?i:bearer)\s+)[A-Za-z0-9._\-]{16,}"),
    # The password of a URL's userinfo (``https://user:TOKEN@host``, as git remotes store tokens):
    # matched from the literal ``://``, so a long run of letters before it costs nothing.
    ("://", r"(://[^\s/:@]*:)[^\s/@]+(?=@)"),
]
_GH_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")


class DefaultSecretRedactor:
    def __init__(self, extra_patterns: list[str] | None = None) -> None:
        self._rules = [(marker, re.compile(p)) for marker, p in _PATTERNS]
        self._rules += [(None, re.compile(p)) for p in extra_patterns or []]

    def redact(self, text: str) -> str:
        folded: str | None = None
        for marker, pattern in self._rules:
            if marker == "gh":
                if not any(prefix in text for prefix in _GH_PREFIXES):
                    continue
            elif marker == "authorization":
                # Case-insensitive marker: one lower() instead of a regex pass over every position
                # (16 KiB: ~20x faster). Non-ASCII text keeps the full pass (Unicode case folding).
                if text.isascii():
                    folded = text.lower() if folded is None else folded
                    if marker not in folded:
                        continue
            elif marker is not None and marker not in text:
                continue
            text = pattern.sub(_replace, text)
        return text


def _replace(m: re.Match[str]) -> str:
    prefix = m.group(1) if m.re.groups and m.group(1) else ""
    return prefix + REDACTED


class NoRedaction:
    def redact(self, text: str) -> str:
        return text
