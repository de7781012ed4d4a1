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


def test_k3_url_userinfo_password_is_redacted() -> None:
    """K-3: a token in a URL's userinfo (a git remote: ``git`` remote, ``read .git/config``) of any
    shape — ``glpat-…`` passed through before; the user name and host stay readable."""
    r = DefaultSecretRedactor()
    text = "o2\thttps://oauth2:glpat-SECRETSECRETSECRET12@gitlab.com/x/y.git\nurl = http://u:p@h:8080/z"
    assert (
        r.redact(text)
        == f"o2\thttps://oauth2:{REDACTED}@gitlab.com/x/y.git\nurl = http://u:{REDACTED}@h:8080/z"
    )
    plain = "see https://example.com:8443/a@b and ssh://git@host:22/repo and a://b:c d@e"
    assert r.redact(plain) == plain


def test_k3_extra_patterns_and_plain_text_untouched() -> None:
    r = DefaultSecretRedactor(extra_patterns=[r"tok_[0-9]{6}"])
    assert r.redact("x tok_123456 y") == f"x {REDACTED} y"
    text = "github issue: the gh cli and sk- prefixes alone are not secrets\n" * 1000
    assert r.redact(text) == text
