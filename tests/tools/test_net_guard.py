"""The SSRF guard at resolution level (SPEC D-3, REFERENCE 4.9): decided before any connection.

Every private, link-local, reserved or transition-form address is refused where the name is
resolved (a ``StaticResolver`` decides the answers) or where the URL literal is read — no packet
is ever sent to those addresses. Public answers pass the guard; ``RefusingBackend`` records that
the connection *would* go there and opens nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import socket
import threading

import pytest

from kernel.errors import InvalidArgument, Timeout
from tools.net import (
    BlockedAddress,
    NetAllow,
    NetGuard,
    NetRuntime,
    RefusingBackend,
    StaticResolver,
    SystemResolver,
    parse_ip,
    parse_url,
)
from tools.net.addresses import InvalidHost, blocked_reason

LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "2130706433",
    "0x7f000001",
    "0x7f.1",
    "0177.0.0.1",
    "0177.1",
    "017700000001",
    "127.0.0.1.",
    "127.255.255.254",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::127.0.0.1]",
    "[2002:7f00:1::]",
    "[64:ff9b::127.0.0.1]",
    "[::ffff:0:127.0.0.1]",  # IPv4-translated (SIIT, RFC 6052 §2.1 / RFC 2765)
    "[::ffff:0:7f00:1]",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_d3_every_loopback_spelling_parses_to_a_blocked_address(host: str) -> None:
    ip = parse_ip(host)
    assert ip is not None
    assert blocked_reason(ip) is not None
    with pytest.raises(BlockedAddress):
        NetGuard(NetAllow(), StaticResolver({})).check_literal(host.strip("[]"))


@pytest.mark.parametrize(
    ("answer", "range_name"),
    [
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("0.0.0.0", "this-network"),
        ("0.1.2.3", "this-network"),
        ("198.18.0.1", "fake-IP"),
        ("192.0.0.8", "IETF"),
        ("192.0.2.1", "documentation"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fd00::1", "unique-local"),
        ("fc00::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:a00:1::1", "private"),  # 6to4 of 10.0.0.1
        ("2002:c0a8:101::", "private"),  # 6to4 of 192.168.1.1
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("64:ff9b:1::1", "NAT64 local-use"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ("2001:db8::1", "documentation"),
        ("100::1", "discard"),
        ("::ffff:0:a9fe:a9fe", "link-local"),  # IPv4-translated 169.254.169.254 (SIIT)
        ("::ffff:0:a00:1", "private"),
        ("3fff::1", "documentation"),  # RFC 9637
        ("5f00::1", "SRv6"),  # RFC 9602
    ],
)
async def test_d3_names_resolving_to_blocked_ranges_are_refused_before_connecting(
    answer: str, range_name: str
) -> None:
    resolver = StaticResolver({"internal.example.com": [answer]})
    guard = NetGuard(NetAllow(), resolver)
    with pytest.raises(BlockedAddress) as info:
        await guard.addresses("internal.example.com", 443)
    assert range_name in str(info.value)
    assert resolver.asked == ["internal.example.com"]


@pytest.mark.parametrize(
    "answers",
    [
        ["93.184.216.34", "10.0.0.1"],
        ["10.0.0.1", "93.184.216.34"],
        ["2606:2800:220:1:248:1893:25c8:1946", "::1"],
        ["93.184.216.34", "::ffff:127.0.0.1"],
    ],
)
async def test_d3_mixed_public_and_private_answers_are_refused(answers: list[str]) -> None:
    guard = NetGuard(NetAllow(), StaticResolver({"rebind.example.com": answers}))
    with pytest.raises(BlockedAddress, match="mixed public/private"):
        await guard.addresses("rebind.example.com", 80)


async def test_d3_public_answers_pass_and_the_connection_is_pinned_to_them() -> None:
    """The socket layer is asked for exactly the verified addresses, never for the name."""
    inner = RefusingBackend()
    runtime = NetRuntime(
        resolver=StaticResolver({"public.example.com": ["93.184.216.34", "2606:2800:220:1::1"]}),
        inner_backend=inner,
    )
    async with runtime.client() as http:
        with pytest.raises(Exception, match="no connection"):
            async with http.open(parse_url("https://public.example.com/x?sig=secret"), op="t"):
                pass
    assert inner.attempts == [("93.184.216.34", 443), ("2606:2800:220:1::1", 443)]


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "a.localhost",
        "x.y.localhost.",
        "localhost.localdomain",
        "ip6-localhost",
        "printer.local",
        "metadata.google.internal",
        "router.home.arpa",
        "redis",
    ],
)
def test_d3_local_names_are_refused_without_asking_dns(host: str) -> None:
    resolver = StaticResolver({})
    with pytest.raises(BlockedAddress):
        NetGuard(NetAllow(), resolver).check_literal(host)
    assert resolver.asked == []


@pytest.mark.parametrize(
    "host", ["1.2.3.4.5", "999.1.1.1", "127.0.0.08", "0x", "a..b", "-bad.example.com", "ex ample.com"]
)
def test_d3_malformed_hosts_are_invalid_never_resolved(host: str) -> None:
    with pytest.raises(InvalidArgument):
        NetGuard(NetAllow(), StaticResolver({})).check_literal(host)


def test_d3_whatwg_ipv4_forms() -> None:
    assert parse_ip("0x7f.1") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip("10.1.1") == ipaddress.ip_address("10.1.0.1")
    assert parse_ip("3232235777") == ipaddress.ip_address("192.168.1.1")
    assert parse_ip("example.com") is None
    assert parse_ip("1e1.com") is None
    with pytest.raises(InvalidHost):
        parse_ip("[fe80::1%eth0]")


def test_d3_public_addresses_are_not_blocked() -> None:
    for text in [
        "93.184.216.34",
        "8.8.8.8",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "2002:808:808::1",
        "::ffff:0:808:808",
    ]:
        assert blocked_reason(ipaddress.ip_address(text)) is None, text


async def test_d3_allow_list_opens_exactly_what_it_names() -> None:
    allow = NetAllow.parse("10.0.0.0/8, intranet.corp *.svc.corp ::1")
    resolver = StaticResolver(
        {
            "intranet.corp": ["192.168.7.7"],
            "api.svc.corp": ["172.16.0.9"],
            "other.corp": ["192.168.7.8"],
            "ten.example.com": ["10.1.2.3"],
        }
    )
    guard = NetGuard(allow, resolver)
    assert [str(a) for a in await guard.addresses("intranet.corp", 80)] == ["192.168.7.7"]
    assert [str(a) for a in await guard.addresses("api.svc.corp", 80)] == ["172.16.0.9"]
    assert [str(a) for a in await guard.addresses("ten.example.com", 80)] == ["10.1.2.3"]
    assert [str(a) for a in await guard.addresses("::1", 80)] == ["::1"]
    with pytest.raises(BlockedAddress):
        await guard.addresses("other.corp", 80)
    with pytest.raises(BlockedAddress):
        guard.check_literal("127.0.0.1")


def test_d3_allow_list_rejects_garbage_entries() -> None:
    with pytest.raises(InvalidArgument):
        NetAllow.parse("not a host!")
    assert not NetAllow.parse("")
    assert NetAllow.parse(["127.0.0.1"]).allows_ip(ipaddress.ip_address("127.0.0.1"))


async def test_d3_lookups_that_never_answer_do_not_starve_the_default_executor(monkeypatch) -> None:
    """D-3: ``getaddrinfo`` cannot be interrupted, so a lookup past its timeout holds its thread until
    the C library gives up. It ran in the loop's default executor (6 threads on 2 cores): six
    lookups of names the model chose, against a name server that never answers, stopped every
    ``to_thread`` of the process (git, bash, search, conversions) — measured: a ``to_thread`` still
    waiting after 5 s. Lookups now have threads of their own; the stalled ones delay only lookups.
    No packet is sent: ``socket.getaddrinfo`` is replaced."""
    release = threading.Event()

    def fake_getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if host.startswith("stall"):
            release.wait(60)
            raise socket.gaierror(socket.EAI_NONAME, "gave up")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(2))
    resolver = SystemResolver(timeout_s=0.5)
    try:
        outcomes = await asyncio.gather(
            *(resolver.resolve(f"stall{i}.example.com", 443) for i in range(2)), return_exceptions=True
        )
        assert all(isinstance(o, Timeout) and o.data.get("op") == "dns" for o in outcomes), outcomes
        # the two stalled lookups still hold their threads; the default executor is free
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 7), 10) == 7
        assert await resolver.resolve("public.example.com", 443) == ["93.184.216.34"]
    finally:
        release.set()
