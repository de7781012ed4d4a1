"""Address literals in every spelling, and the ranges the SSRF guard blocks (SPEC D-3, REFERENCE 4.9).

``parse_ip(host)`` reads a URL host the way the WHATWG URL standard and ``inet_aton`` do, so the
spellings a browser, curl or glibc would connect to are the ones we check: dotted quads, short
forms (``127.1``, ``10.1.1``), one 32-bit number (``2130706433``), hex (``0x7f000001``,
``0x7f.1``), octal (``0177.0.0.1``), a trailing dot, and IPv6 with or without brackets (a zone id
is refused). A host whose last label is numeric but which is not a valid IPv4 address
(``1.2.3.4.5``, ``999.1.1.1``) is *invalid*, never a name: parsers disagree about such hosts.

``blocked_reason(ip)`` names the range an address falls in, or None for a public address.
Blocked: loopback, RFC 1918, CGNAT 100.64/10, link-local, this-network 0/8, the IETF/benchmark/
documentation nets (192.0.0/24, 198.18/15 — fake-IP DNS —, TEST-NETs), multicast, reserved 240/4,
broadcast; IPv6 unspecified, loopback, unique-local fc00::/7, link-local fe80::/10, site-local
fec0::/10, multicast, discard, documentation (2001:db8::/32, 3fff::/20), SRv6 SIDs 5f00::/16,
Teredo, NAT64 local-use. IPv6 forms that embed an
IPv4 address — v4-mapped ``::ffff:a.b.c.d``, v4-translated (SIIT) ``::ffff:0:a.b.c.d``,
v4-compatible ``::a.b.c.d``, 6to4 ``2002:AABB:CCDD::`` and NAT64 ``64:ff9b::a.b.c.d`` — are judged by
the IPv4 address inside them.

``LOCAL_NAMES`` / ``local_name_reason(host)``: names that mean "this machine or this network"
without asking DNS (``localhost``, ``*.localhost``, ``.local``, ``.internal``, single labels …).
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class InvalidHost(ValueError):
    """A host that is neither a valid name nor a valid address (refused, never resolved)."""


_V4_BLOCKED: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(net), name)
    for net, name in (
        ("0.0.0.0/8", "this-network"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking / fake-IP"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)

_V6_BLOCKED: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), name)
    for net, name in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("100::/64", "discard"),
        ("64:ff9b:1::/48", "NAT64 local-use"),
        ("2001::/32", "Teredo"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),  # RFC 9637 (newer than Python 3.11's table)
        ("5f00::/16", "SRv6 SIDs"),  # RFC 9602
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT ::ffff:0:a.b.c.d (RFC 2765)
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")

# Names that never need DNS to mean "here" (RFC 6761 localhost, mDNS .local, the ICANN-reserved
# private-use .internal, home networks) plus what Debian's /etc/hosts maps to loopback.
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan")

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_V4_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$")
_NUMERIC_LIKE = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")


def _v4_number(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part[0] == "0":
        return int(part, 8)
    return int(part)


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """WHATWG/inet_aton IPv4 parsing; None when ``host`` is a name; ``InvalidHost`` when broken."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()  # one trailing dot is allowed
    if not parts or not _NUMERIC_LIKE.match(parts[-1]):
        return None  # the last label is not a number: a domain name
    if len(parts) > 4 or any(not _V4_PART.match(p) for p in parts):
        raise InvalidHost(f"{host!r} looks like an IPv4 address but is not a valid one")
    numbers = [_v4_number(p) for p in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise InvalidHost(f"{host!r} looks like an IPv4 address but is out of range")
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` spells, in any form; None for a name; ``InvalidHost`` for garbage."""
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        if "%" in h:
            raise InvalidHost(f"IPv6 zone identifiers are not allowed: {host!r}")
        try:
            return ipaddress.IPv6Address(h)
        except ValueError as exc:
            raise InvalidHost(f"invalid IPv6 address {host!r}") from exc
    return parse_ipv4(h)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 transition form carries (mapped, translated, compatible, 6to4, NAT64)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _V4_TRANSLATED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _V4_COMPATIBLE and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def blocked_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address (a short range name), or None when it is public."""
    if isinstance(ip, ipaddress.IPv4Address):
        for net, name in _V4_BLOCKED:
            if ip in net:
                return f"{name} {net}"
        if ip == ipaddress.IPv4Address("255.255.255.255"):
            return "broadcast"
        # Belt and braces: anything the stdlib knows is not globally routable.
        return None if ip.is_global else "not globally routable"
    inner = embedded_ipv4(ip)
    if inner is not None:
        reason = blocked_reason(inner)
        return f"{reason} (embedded in {ip})" if reason else None
    for net, name in _V6_BLOCKED:
        if ip in net:
            return f"{name} {net}"
    return None if ip.is_global else "not globally routable"


def normalize_name(host: str) -> str:
    """A DNS name lower-cased, one trailing dot dropped; ``InvalidHost`` unless it is LDH labels."""
    name = host.strip().lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > 253:
        raise InvalidHost(f"invalid host name {host!r}")
    labels = name.split(".")
    if any(not _LABEL.match(label) for label in labels):
        raise InvalidHost(f"invalid host name {host!r}")
    return name


def local_name_reason(name: str) -> str | None:
    """Why a (normalised) name means a local or private host without DNS, or None."""
    if name in LOCAL_NAMES:
        return "local host name"
    for suffix in LOCAL_SUFFIXES:
        if name.endswith(suffix):
            return f"local host name (*{suffix})"
    if "." not in name:
        return "single-label host name (resolved through local search domains)"
    return None
