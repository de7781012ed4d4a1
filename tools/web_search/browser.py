"""The headless tier's browser: Playwright driving Debian's Chromium (SPEC W-1, W-4; DEPENDENCIES §7).

Invariants:

- **Lazy, per call.** A ``BrowserPool`` belongs to one ``web_search`` call and launches Chromium
  only when the first headless engine runs (``/usr/bin/chromium`` by default,
  ``A3S_CHROMIUM_PATH``; never ``playwright install``). ``aclose`` closes it within
  ``CLOSE_BUDGET_S`` (2 s) and then kills whatever is left.
- **No orphan process.** Chromium runs with its profile, HOME, config and cache in a fresh
  ``a3s-chromium-*`` directory, so every process of it (browser, zygotes, renderers, utility
  processes, crashpad handlers) carries that path on its command line. After closing, every
  process whose command line names the directory is killed (``SIGKILL``) and the directory is
  removed. This also runs when the call is cancelled or times out (``finally``), including while
  Chromium is still starting.
- **No network of its own.** Chromium runs in a network namespace of its own (``netns.py``:
  ``bwrap --unshare-net``; the tier is ``unsupported`` where that cannot be made), because a page's
  WebRTC reaches past everything below. Within it, nothing is resolved or reached either:
  ``--host-resolver-rules=MAP * ~NOTFOUND`` fails every name *and* address it would connect to,
  background networking, component updates, sync, crash upload and DNS prefetch are off, service
  workers are blocked and WebSockets closed. Every request the page makes is intercepted
  (``context.route``) and, if wanted at all (documents, scripts, XHR — not images, fonts, media or
  styles), fetched through the safe transport (``SafeHttp``: SSRF guard, pinned connections, the
  request-level proxy) and fulfilled from there; redirects come back to Chromium as 3xx answers, so
  each hop is intercepted and checked again.
- **Bounded fetching per page.** Each request's body is read up to ``MAX_ROUTED_BODY_BYTES``
  (5 MiB), and all the requests of one page together up to ``PAGE_BYTE_BUDGET`` (``route_budget``);
  past it further requests are aborted. Requests of a page this pool did not open (a popup) share
  one more budget of the same size.
- The rendered HTML is measured in the browser and handed over only up to ``MAX_RENDERED_CHARS``
  (a page's script can grow its DOM past any body limit): a larger page fails the engine.
- The environment handed to Chromium is minimal (PATH, HOME and XDG dirs in the temp directory):
  no API key or other secret of this process reaches the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from typing import Any

from kernel.errors import InvalidArgument, ToolError, Transport, Unsupported
from tools.net import ProxyAuthFailed, SafeHttp, parse_url
from tools.net.runtime import read_body
from tools.web_search.netns import launcher
from tools.web_search.route_budget import ByteBudget

CLOSE_BUDGET_S = 2.0
LAUNCH_GRACE_S = 10.0  # a launch interrupted by a cancel is waited for (and failed) this long
MAX_ROUTED_BODY_BYTES = 5 * 1024 * 1024
# All the requests of one page together: a results page with its scripts is 1-3 MiB, while a
# hostile page's hundreds of sub-resources of 5 MiB each were all read.
PAGE_BYTE_BUDGET = 16 * 1024 * 1024
MARKER_PREFIX = "a3s-chromium-"
# A page's script may build any DOM (the fetched body is capped, the DOM is not): its HTML is
# measured in the browser, as ``page.content()`` builds it, and handed over only when it fits.
MAX_RENDERED_CHARS = 5 * 1024 * 1024
BOUNDED_HTML_JS = """(limit) => {
  let html = document.doctype ? new XMLSerializer().serializeToString(document.doctype) : "";
  if (document.documentElement) html += document.documentElement.outerHTML;
  return html.length > limit ? null : html;
}"""
BLOCKED_RESOURCES = frozenset(
    {"image", "font", "media", "stylesheet", "manifest", "texttrack", "beacon", "ping"}
)
FORWARDED_HEADERS = ("accept", "accept-language", "content-type", "user-agent", "referer")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--dns-prefetch-disable",
    "--no-pings",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


class _TooLarge(Exception):
    pass


def marked_processes(marker: str) -> list[int]:
    """Pids whose command line names ``marker`` (our pool's private directory)."""
    found: list[int] = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry))
    return found


def kill_marked(marker: str) -> int:
    killed = 0
    for pid in marked_processes(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


class BrowserPool:
    def __init__(self, http: SafeHttp, chromium_path: str) -> None:
        self.http = http
        self.chromium_path = chromium_path
        self.dir: str | None = None
        self.launches = 0
        self.proxy_refused: ProxyAuthFailed | None = None
        self._playwright: Any = None
        self._context: Any = None
        self._launch: asyncio.Future[Any] | None = None
        self._driver_pid: int | None = None
        self._lock = asyncio.Lock()
        self._budgets: dict[Any, ByteBudget] = {}  # by Playwright page
        self._stray = ByteBudget(PAGE_BYTE_BUDGET)  # requests of pages render() did not open

    async def _ensure(self) -> Any:
        """The browser context, launching it on first use. The launch runs as its own task so a
        cancelled caller never leaves a half-started driver or browser without an owner:
        ``aclose`` waits for (or fails) the launch, then closes what it made."""
        async with self._lock:
            if self._launch is None:
                self._launch = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._launch)

    async def _start(self) -> Any:
        if not _installed(self.chromium_path):
            raise Unsupported(
                f"the headless tier needs Chromium at {self.chromium_path} (apt-get install chromium)"
            )
        try:
            from playwright.async_api import async_playwright
        except ImportError as exc:
            raise Unsupported("the headless tier needs the playwright package (the 'browser' extra)") from exc
        self.dir = tempfile.mkdtemp(prefix=MARKER_PREFIX)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.dir,
            "TMPDIR": self.dir,
            "XDG_CONFIG_HOME": os.path.join(self.dir, "config"),
            "XDG_CACHE_HOME": os.path.join(self.dir, "cache"),
        }
        executable = await asyncio.to_thread(launcher, self.dir, self.chromium_path)
        self.launches += 1
        self._playwright = await async_playwright().start()
        self._context = await self._playwright.chromium.launch_persistent_context(
            os.path.join(self.dir, "profile"),
            executable_path=executable,
            args=list(CHROMIUM_ARGS),
            headless=True,
            env=env,
            service_workers="block",
        )
        self._driver_pid = _driver_of(self.dir)
        await self._context.route("**/*", self._route)
        with contextlib.suppress(Exception):
            await self._context.route_web_socket("**/*", lambda ws: ws.close())
        return self._context

    async def _route(self, route: Any, request: Any) -> None:
        """Every request of every page: refused, or fetched through the safe transport."""
        if request.resource_type in BLOCKED_RESOURCES:
            await route.abort("blockedbyclient")
            return
        budget = self.budget_of(request)
        cap = await budget.reserve(MAX_ROUTED_BODY_BYTES)
        if cap == 0:  # the page has had its bytes
            with contextlib.suppress(Exception):
                await route.abort("blockedbyclient")
            return
        used = 0
        try:
            url = parse_url(request.url)
            headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
            method = request.method if request.method in ("GET", "POST", "HEAD") else "GET"
            async with self.http.open(
                url, method=method, headers=headers, follow_redirects=False, op="web_search"
            ) as got:
                try:
                    body = (
                        b"" if method == "HEAD" else await read_body(got.response, cap, "web_search", got.url)
                    )
                except InvalidArgument:  # larger than it may read: the reservation is spent
                    used = cap
                    raise
                finally:
                    used = max(used, got.response.num_bytes_downloaded)
                keep = {
                    k: v
                    for k, v in got.response.headers.items()
                    if k.lower()
                    not in ("content-encoding", "content-length", "transfer-encoding", "connection")
                }
                used = max(used, len(body))
                await route.fulfill(status=got.response.status_code, headers=keep, body=body)
        except ProxyAuthFailed as exc:  # render() reports it as it is: not a transient failure
            self.proxy_refused = exc
            await route.abort("addressunreachable")
        except ToolError:
            await route.abort("addressunreachable")
        except Exception:  # the page is going away (closed, cancelled): nothing to fulfil
            with contextlib.suppress(Exception):
                await route.abort("failed")
        finally:
            budget.settle(cap, used)

    def budget_of(self, request: Any) -> ByteBudget:
        """The byte budget of the page that made ``request`` (a shared one for pages we did not open)."""
        try:
            page = request.frame.page
        except Exception:  # a worker's request has no frame
            return self._stray
        return self._budgets.get(page, self._stray)

    async def render(self, url: str, wait_for: str | None, timeout_s: float) -> bytes:
        """The DOM of ``url`` after it loaded (and, if given, once ``wait_for`` appeared)."""
        context = await self._ensure()
        page = await context.new_page()
        self._budgets[page] = ByteBudget(PAGE_BYTE_BUDGET)
        try:
            ms = max(1.0, timeout_s) * 1000
            try:
                await page.goto(url, wait_until="domcontentloaded", timeout=ms)
                if wait_for:
                    with contextlib.suppress(Exception):  # no match: the parser reports empty
                        await page.wait_for_selector(wait_for, timeout=min(ms, 3000), state="attached")
                html = await page.evaluate(BOUNDED_HTML_JS, MAX_RENDERED_CHARS)
                if html is None:  # measured in the browser: the oversized DOM never reaches us
                    raise _TooLarge
            except _TooLarge:
                raise Transport(
                    f"web_search: the rendered page is larger than {MAX_RENDERED_CHARS} characters",
                    op="web_search",
                ) from None
            except Exception as exc:
                if self.proxy_refused is not None:
                    raise self.proxy_refused from None
                if type(exc).__name__ == "TimeoutError":
                    raise TimeoutError(str(exc)) from None
                raise Transport(
                    f"web_search: the browser could not load the page: {str(exc)[:200]}", op="web_search"
                ) from None
            # A page's script may put a lone surrogate in the DOM ("\uD800"): UTF-8 cannot encode
            # it, and the UnicodeEncodeError failed the whole search. It becomes "?".
            return html.encode("utf-8", "replace")
        finally:
            self._budgets.pop(page, None)
            with contextlib.suppress(Exception):
                await page.close()

    async def aclose(self) -> None:
        """Close within ``CLOSE_BUDGET_S``, then kill every process of this pool and remove its files."""
        launch = self._launch
        if launch is not None and not launch.done():
            # Cancelled while Chromium was starting: kill what already runs so the launch fails
            # fast, and wait for it, so the driver it started is stopped below.
            if self.dir is not None:
                kill_marked(self.dir)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(launch), LAUNCH_GRACE_S)
        if launch is not None and launch.done() and not launch.cancelled():
            launch.exception()  # retrieved: a failed launch was already reported to its caller
        context, playwright = self._context, self._playwright
        self._context = self._playwright = None
        with contextlib.suppress(Exception, asyncio.CancelledError):
            async with asyncio.timeout(CLOSE_BUDGET_S):
                if context is not None:
                    with contextlib.suppress(Exception):
                        await context.close()
                if playwright is not None:
                    await playwright.stop()
        if self.dir is not None:
            kill_marked(self.dir)
            shutil.rmtree(self.dir, ignore_errors=True)
        if self._driver_pid is not None and _child_alive(self._driver_pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._driver_pid, signal.SIGKILL)


def _installed(path: str) -> bool:
    return os.path.exists(path)


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _driver_of(marker: str) -> int | None:
    """The Playwright driver that launched the pool's browser: the parent of its main process."""
    marked = set(marked_processes(marker))
    for pid in marked:
        stat = _stat(pid)
        if stat is not None and int(stat[1]) not in marked:
            return int(stat[1])
    return None


def _child_alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and int(stat[1]) == os.getpid()
