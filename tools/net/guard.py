"""The SSRF guard: which hosts and addresses a tool may connect to (SPEC D-3, REFERENCE 4.9).

Two checks, both before any byte is sent:

- ``check_literal(host)`` — on the URL alone, before any request (and on every redirect hop):
  invalid hosts are refused; an address literal in any spelling must not be in a blocked range;
  local names (``localhost``, ``*.localhost``, single labels …) are refused. This is the only
  check when a proxy resolves names for us.
- ``addresses(host, port)`` — at connection time, for direct connections: the name is resolved
  through the injectable ``Resolver``; *every* answer must be allowed (a mix of public and private
  answers is refused, so a rebinding name cannot pick the private one later); the caller connects
  to one of exactly these verified addresses — the connection is pinned to what was checked.

``NetAllow`` is the only way to open the guard (``A3S_NET_ALLOW``, per session
``SessionOptions.net_allow``): a comma/space separated list of host names (``intranet.corp``,
``*.corp`` for subdomains) and addresses or CIDRs (``127.0.0.1``, ``10.0.0.0/8``, ``::1``).
An allowed name may resolve anywhere; an allowed network admits its addresses whatever name led
there. It is empty by default; it exists for tests on loopback and for private deployments.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from kernel.errors import InvalidArgument
from tools.net.addresses import (
    InvalidHost,
    IPAddress,
    blocked_reason,
    local_name_reason,
    normalize_name,
    parse_ip,
)
from tools.net.resolver import Resolver

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOCALHOST_V4 = ipaddress.IPv4Address("127.0.0.1")


class BlockedAddress(InvalidArgument):
    """The guard refused a host or address; the kind stays ``invalid_argument`` (the model can fix it)."""


@dataclass(frozen=True)
class NetAllow:
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()
    source: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def parse(cls, entries: str | Iterable[str] | None) -> NetAllow:
        """``"127.0.0.1, 10.0.0.0/8 intranet.corp *.corp"`` or a list of such entries."""
        if entries is None:
            return cls()
        items = entries.replace(",", " ").split() if isinstance(entries, str) else list(entries)
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for raw in items:
            entry = str(raw).strip()
            if not entry:
                continue
            try:
                if "/" in entry:
                    networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                    continue
                ip = parse_ip(entry)
                if ip is not None:
                    networks.append(ipaddress.ip_network(ip))
                elif entry.startswith("*."):
                    suffixes.append("." + normalize_name(entry[2:]))
                else:
                    names.add(normalize_name(entry))
            except (InvalidHost, ValueError) as exc:
                raise InvalidArgument(
                    f"net allow entry {entry!r} is neither a host nor a CIDR: {exc}"
                ) from exc
        return cls(frozenset(names), tuple(suffixes), tuple(networks), tuple(str(i) for i in items))

    def __bool__(self) -> bool:
        return bool(self.names or self.suffixes or self.networks)

    def allows_name(self, name: str) -> bool:
        return name in self.names or any(name.endswith(s) for s in self.suffixes)

    def allows_ip(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)

    def to_json(self) -> list[str]:
        return list(self.source)


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """What the URL's host is: an address literal (already checked) or a name (to resolve)."""

    host: str  # normalised: lower-case name without trailing dot, or the canonical address
    ip: IPAddress | None
    allowed_name: bool = False  # the allow list names it: resolution answers are not range-checked


class NetGuard:
    def __init__(self, allow: NetAllow, resolver: Resolver) -> None:
        self.allow = allow
        self.resolver = resolver

    def check_literal(self, host: str) -> HostVerdict:
        """Refuse blocked literals and local names; never touches DNS or the network."""
        try:
            ip = parse_ip(host)
            if ip is not None:
                self._check_ip(ip, host)
                return HostVerdict(str(ip), ip)
            name = normalize_name(host)
        except InvalidHost as exc:
            raise InvalidArgument(f"invalid URL host: {exc}") from None
        if self.allow.allows_name(name):
            return HostVerdict(name, None, allowed_name=True)
        reason = local_name_reason(name)
        if reason is not None:
            # RFC 6761: localhost names are loopback; an allowed loopback network admits them.
            if name == "localhost" or name.endswith(".localhost"):
                if self.allow.allows_ip(LOCALHOST_V4):
                    return HostVerdict(name, LOCALHOST_V4)
            raise BlockedAddress(_refusal(host, reason))
        return HostVerdict(name, None)

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The verified addresses to connect to for ``host`` (all answers checked; mixed refused)."""
        verdict = self.check_literal(host)
        if verdict.ip is not None:
            return [verdict.ip]
        answers = await self.resolver.resolve(verdict.host, port)
        if not answers:
            raise InvalidArgument(f"host {verdict.host} resolved to no address")
        ips: list[IPAddress] = []
        for answer in answers:
            ip = ipaddress.ip_address(answer.split("%", 1)[0])
            if not verdict.allowed_name:
                reason = blocked_reason(ip)
                if reason is not None and not self.allow.allows_ip(ip):
                    kind = "one of the addresses" if len(answers) > 1 else "the address"
                    raise BlockedAddress(
                        _refusal(verdict.host, f"{kind} it resolves to ({ip}) is {reason}")
                        + ("; mixed public/private answers are refused" if len(answers) > 1 else "")
                    )
            if ip not in ips:
                ips.append(ip)
        return ips

    def _check_ip(self, ip: IPAddress, host: str) -> None:
        reason = blocked_reason(ip)
        if reason is not None and not self.allow.allows_ip(ip):
            raise BlockedAddress(_refusal(host, f"{ip} is {reason}"))


def _refusal(host: str, reason: str) -> str:
    return (
        f"refusing to connect to {host}: {reason}. Only public addresses are reachable "
        "(the SSRF guard; operators open it with A3S_NET_ALLOW)"
    )
