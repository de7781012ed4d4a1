"""The page-conversion child process behind ``convert.py`` (SPEC W-6, K-6).

Started as ``python -I convert_child.py PROJECT_ROOT`` with a minimal environment and ``/`` as its
working directory. It imports the converters once (trafilatura costs about a second), then serves
jobs until its stdin ends: one frame in (``{"html", "fmt", "body_only", "url", "max_chars"}``: a longer text is cut there, with a
notice), one frame out
(``{"ok": true, "text", "title"}`` or ``{"ok": false, "error"}``). A frame is a 4-byte big-endian
length and that much UTF-8 JSON.

Invariants:

- it never outlives its purpose: EOF on stdin (the host closed it or died) ends an idle child, and
  each job may use at most ``JOB_CPU_S`` more CPU seconds (``RLIMIT_CPU``, raised job by job), so
  even a child whose host vanished mid-job stops; the host kills it at the call's deadline anyway;
- its address space is capped (``AS_LIMIT_BYTES``): a page that makes a parser balloon fails the
  job with ``MemoryError`` (or kills the child), never the host;
- a child whose peak memory passed ``RETIRE_RSS_BYTES`` answers with ``"retire": true`` and exits,
  so an idle child never sits on a heap a big page grew.
"""

import json
import os
import resource
import struct
import sys

HEADER = struct.Struct("!I")
JOB_CPU_S = 150  # web_fetch's longest timeout (120 s) plus slack: the host kills it before that
AS_LIMIT_BYTES = 2 * 1024 * 1024 * 1024  # a 5 MiB page of links peaked at 1 GiB
RETIRE_RSS_BYTES = 384 * 1024 * 1024  # a big page's heap is not kept idle
CUT_NOTICE = "\n\n[... the converted page was cut at {n} characters]"  # as convert.CUT_NOTICE


def _read_exact(n: int) -> bytes | None:
    chunks = []
    while n:
        data = os.read(0, min(n, 1 << 20))
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _write(obj: object) -> None:
    data = json.dumps(obj).encode("utf-8")
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(1, view) :]


def _peak_rss_bytes() -> int:
    """This process's own peak resident memory (``VmHWM``). Not ``ru_maxrss``: Linux carries the
    peak of the process that forked us across ``exec``, so a child of a host over the limit would
    retire after every job."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _limit_next_job() -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = spent + JOB_CPU_S
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    try:
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_BYTES, AS_LIMIT_BYTES))
    except (ValueError, OSError):
        pass
    import html2text  # noqa: F401  (warm: the first job should not pay the imports)
    import trafilatura  # noqa: F401

    from tools.web_fetch.extract import Page, render, title_of

    while True:
        head = _read_exact(HEADER.size)
        if head is None:
            return
        body = _read_exact(HEADER.unpack(head)[0])
        if body is None:
            return
        _limit_next_job()
        try:
            job = json.loads(body)
            page = Page("html", job["html"], "text/html")
            text = render(page, job["fmt"], job["body_only"], job["url"])
            max_chars = int(job["max_chars"])
            if len(text) > max_chars:  # converters amplify (every nested list line indented)
                text = text[:max_chars] + CUT_NOTICE.format(n=max_chars)
            reply = {"ok": True, "text": text, "title": title_of(job["html"])}
        except MemoryError:
            reply = {"ok": False, "error": "the page needs more memory to convert than is allowed"}
        except Exception as exc:  # reported to the host as a failed conversion
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        del body
        if _peak_rss_bytes() > RETIRE_RSS_BYTES:
            reply["retire"] = True  # the host reaps us instead of keeping our grown heap idle
            _write(reply)
            return
        _write(reply)


if __name__ == "__main__":
    main()
