"""Output sanitisation by the default secret redactor (SPEC K-3)."""

from __future__ import annotations

import pytest

from kernel.redact import REDACTED, DefaultSecretRedactor

SECRETS = [
    "AKIAABCDEFGHIJKLMNOP",
    "ghp_" + "a" * 36,
    "github_pat_" + "b" * 30,
    "sk-proj-" + "c" * 30,
    "xoxb-1234567890-abc",
    "AIza" + "d" * 35,
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_k3_known_credential_shapes_are_redacted(secret: str) -> None:
    out = DefaultSecretRedactor().redact(f"before {secret} after")
    assert secret not in out and REDACTED in out and out.startswith("before ") and out.endswith(" after")


def test_k3_bearer_header_keeps_its_name() -> None:
    out = DefaultSecretRedactor().redact("Authorization: Bearer abcdefghijklmnop1234")
    assert out == f"Authorization: Bearer {REDACTED}"


def test_k3_extra_patterns_and_plain_text_untouched() -> None:
    r = DefaultSecretRedactor(extra_patterns=[r"tok_[0-9]{6}"])
    assert r.redact("x tok_123456 y") == f"x {REDACTED} y"
    text = "github issue: the gh cli and sk- prefixes alone are not secrets\n" * 1000
    assert r.redact(text) == text
