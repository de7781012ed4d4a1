"""The safe HTTP transport every network call of every tool goes through (SPEC D-3, W-6).

Parts: ``addresses`` (IP literals in every spelling, blocked ranges), ``guard`` (the SSRF guard and
the ``A3S_NET_ALLOW`` allow list), ``resolver`` (injectable name resolution), ``urls`` (request
URLs and showable anchors), ``backend`` (connections pinned to verified addresses), ``client``
(``SafeHttp``: redirects by hand), ``proxy`` (proxies and their credentials), ``errors`` (HTTP failures as kernel errors) and
``runtime`` (``NetRuntime``, the per-process service; ``safe_http(ctx)`` for a tool call).
docs/network.md explains the guard and how to open it.
"""

from tools.net.addresses import blocked_reason, parse_ip
from tools.net.backend import GuardedBackend, RefusingBackend
from tools.net.client import MAX_REDIRECTS, Fetched, SafeHttp
from tools.net.errors import ProxyAuthFailed, map_http_error, retry_after_ms, status_error
from tools.net.guard import BlockedAddress, NetAllow, NetGuard
from tools.net.proxy import ProxySettings, ProxyUrl, parse_proxy, redact_proxy_arg
from tools.net.resolver import Resolver, StaticResolver, SystemResolver
from tools.net.runtime import NetRuntime, allow_of, read_body, runtime_of, safe_http
from tools.net.urls import SafeUrl, anchor_of, parse_url

__all__ = [
    "MAX_REDIRECTS",
    "BlockedAddress",
    "Fetched",
    "GuardedBackend",
    "NetAllow",
    "NetGuard",
    "NetRuntime",
    "ProxyAuthFailed",
    "ProxySettings",
    "ProxyUrl",
    "RefusingBackend",
    "Resolver",
    "SafeHttp",
    "SafeUrl",
    "StaticResolver",
    "SystemResolver",
    "allow_of",
    "anchor_of",
    "blocked_reason",
    "map_http_error",
    "parse_ip",
    "parse_proxy",
    "parse_url",
    "read_body",
    "redact_proxy_arg",
    "retry_after_ms",
    "runtime_of",
    "safe_http",
    "status_error",
]
