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


_PATTERNS = [
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}\b",
    r"\bxox[baprs]-[A-Za-z0-9\-]{10,}\b",
    r"\bAIza[0-9A-Za-z_\-]{35}\b",
    r"\b((?i:authorization):\s*(?i:bearer)\s+)[A-Za-z0-9._\-]{16,}",
]
# Cheap pre-check: only run the full regex when a marker substring is present.
_MARKERS = ("PRIVATE KEY", "AKIA", "gh", "github_pat_", "sk-", "xox", "AIza", "earer")


class DefaultSecretRedactor:
    def __init__(self, extra_patterns: list[str] | None = None) -> None:
        self._re = re.compile("|".join(f"(?:{p})" for p in [*_PATTERNS, *(extra_patterns or [])]))
        self._extra = bool(extra_patterns)

    def redact(self, text: str) -> str:
        if not self._extra and not any(m in text for m in _MARKERS):
            return text
        return self._re.sub(_replace, text)


def _replace(m: re.Match[str]) -> str:
    prefix = (
        m.group(1) if m.lastindex and m.group(1) and m.group(1).lower().startswith("authorization") else ""
    )
    return prefix + REDACTED


class NoRedaction:
    def redact(self, text: str) -> str:
        return text
