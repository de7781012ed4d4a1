"""From response bytes to the text ``web_fetch`` returns (SPEC W-6, REFERENCE 4.9).

- **Kinds**: HTML (``text/html``, ``application/xhtml+xml``, or an untyped body that looks like
  HTML) is converted; other text (``text/*``, JSON, XML, JavaScript) is returned as it is; anything
  else (images, PDF, archives, octet streams) is refused as ``unsupported`` — ``download`` is the
  tool for files.
- **Charset**: the ``Content-Type`` charset, else a BOM, else a ``<meta charset>`` /
  ``http-equiv`` declaration in the first 4 KiB, else UTF-8; undecodable bytes become U+FFFD. A
  declared name that is no text charset (``base64``, ``zlib``, ``idna`` …) is ignored.
- **Main content first** (``body_only``, the default): trafilatura extracts the article/main
  text — boilerplate (navigation, sidebars, footers, cookie banners, comments) is dropped, tables,
  lists, code and links are kept — and the page title leads as a heading. docs/network.md records
  why trafilatura (measured against readability-lxml + markdownify/html2text). When it finds no
  main content, ``<main>`` (else ``<body>``) is converted whole. ``body_only=false`` converts the
  whole document (html2text for markdown).
- **Formats**: ``markdown``; ``text`` (no markup); ``html`` (the ``<main>``/``<body>`` element
  serialised, or the whole document with ``body_only=false``).
- trafilatura and html2text are imported on first use: importing trafilatura costs about a second,
  and every process that registers tools (CLI, workers) would pay it otherwise.
- **Meta refresh** (``meta_refresh``): the target of ``<meta http-equiv="refresh" content="N;
  url=…">`` when ``N`` ≤ ``META_REFRESH_MAX_DELAY_S``; the caller follows it as a redirect.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

import lxml.html
from lxml import etree

from kernel.errors import Unsupported

META_REFRESH_MAX_DELAY_S = 10
SNIFF_BYTES = 4096
DECODE_SLICE_BYTES = 128 * 1024  # at most ~16 ms of decoding while holding the GIL
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = (
    "application/json",
    "application/ld+json",
    "application/xml",
    "application/javascript",
    "application/x-javascript",
    "application/rss+xml",
    "application/atom+xml",
    "application/x-ndjson",
    "application/yaml",
    "application/toml",
)
# Text codecs Python knows that are no page charset: ``idna`` and ``undefined`` raise with
# "replace", ``punycode`` raises on non-ASCII, the escape codecs rewrite backslashes.
NOT_CHARSETS = frozenset({"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_\-:.]+)""", re.IGNORECASE)
_REFRESH = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:[;,]\s*(?:url\s*=\s*)?(.*))?$", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Page:
    kind: str  # "html" or "text"
    text: str  # the decoded body
    media_type: str


def media_type(content_type: str | None) -> tuple[str, str | None]:
    """``("text/html", "utf-8")`` from a ``Content-Type`` header (type lower-cased)."""
    if not content_type:
        return "", None
    parts = [p.strip() for p in content_type.split(";")]
    charset = None
    for part in parts[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return parts[0].lower(), charset


def _codec(name: str | None) -> str | None:
    """The codec a declared charset names, or None when it is no charset for a page: unknown, not
    a text encoding (``base64``, ``zlib``, ``rot13``: ``bytes.decode`` raises ``LookupError``), or
    one that fails or means something else on a body (``NOT_CHARSETS``)."""
    if not name:
        return None
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):  # ValueError: an embedded NUL
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in NOT_CHARSETS:
        return None
    return info.name


def decode(body: bytes, declared: str | None, html: bool) -> str:
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if body.startswith(bom):
            return body.decode(name, "replace")
    charset = _codec(declared)
    if charset is None and html:
        m = _META_CHARSET.search(body[:SNIFF_BYTES])
        charset = _codec(m.group(1).decode("ascii", "ignore")) if m else None
    try:
        return _sliced(body, charset or "utf-8")
    except (LookupError, UnicodeError):  # belt and braces: a page's charset never fails the call
        return _sliced(body, "utf-8")


def _sliced(body: bytes, codec: str) -> str:
    """``body.decode(codec, "replace")`` a slice at a time. One call holds the GIL throughout, and
    some codecs replace slowly: 5 MiB of bytes ISO-8859-7 leaves undefined took 0.64 s, which
    stalled the event loop even from a worker thread. Between slices other threads run."""
    # UTF-16/32 decode fast (0.16 s at worst) and their incremental decoders may replace invalid
    # units differently at a slice boundary: those decode at once.
    if len(body) <= DECODE_SLICE_BYTES or codecs.lookup(codec).name.startswith(("utf-16", "utf-32")):
        return body.decode(codec, "replace")
    decoder = codecs.getincrementaldecoder(codec)("replace")
    view = memoryview(body)
    parts = [
        decoder.decode(view[i : i + DECODE_SLICE_BYTES]) for i in range(0, len(body), DECODE_SLICE_BYTES)
    ]
    parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def classify(body: bytes, content_type: str | None) -> Page:
    """Decide what the body is and decode it; ``unsupported`` for binary content."""
    mtype, charset = media_type(content_type)
    if mtype in HTML_TYPES:
        return Page("html", decode(body, charset, True), mtype)
    if mtype.startswith("text/") or mtype in TEXT_TYPES or mtype.endswith(("+json", "+xml")):
        return Page("text", decode(body, charset, False), mtype)
    if mtype in ("", "application/octet-stream") and _looks_textual(body):
        head = body[:SNIFF_BYTES].lstrip().lower()
        kind = "html" if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head else "text"
        return Page(kind, decode(body, charset, kind == "html"), mtype or "text/plain")
    shown = mtype or "an untyped binary body"
    raise Unsupported(f"web_fetch reads web pages and text; {shown} is not text (use download for files)")


def _looks_textual(body: bytes) -> bool:
    sample = body[:SNIFF_BYTES]
    if b"\x00" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(sample) - 4  # a multi-byte character cut at the sample's end
    return True


def _tree(html: str) -> etree._Element | None:
    try:
        return lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return None


def meta_refresh(html: str) -> str | None:
    """The target of a prompt meta refresh, or None."""
    tree = _tree(html[:65536])
    if tree is None:
        return None
    for meta in tree.iter("meta"):
        if (meta.get("http-equiv") or "").strip().lower() != "refresh":
            continue
        m = _REFRESH.match(meta.get("content") or "")
        if not m or not m.group(2):
            continue
        if float(m.group(1)) > META_REFRESH_MAX_DELAY_S:
            return None
        target = m.group(2).strip().strip("\"'").strip()
        return target or None
    return None


def title_of(html: str) -> str | None:
    tree = _tree(html)
    if tree is None:
        return None
    found = tree.find(".//title")
    text = found.text_content().strip() if found is not None else ""
    return re.sub(r"\s+", " ", text)[:500] or None


def _main_element(tree: etree._Element) -> etree._Element:
    for xpath in ("//main", "//*[@role='main']", "//body"):
        found = tree.xpath(xpath)
        if found:
            node: etree._Element = found[0]
            return node
    return tree


def _html2text(html: str, links: bool = True) -> str:
    import html2text  # imported on first use: keeps tool registration (every process start) fast

    converter = html2text.HTML2Text()
    converter.body_width = 0
    converter.ignore_images = True
    converter.ignore_links = not links
    converter.unicode_snob = True
    return str(converter.handle(html)).strip()


def _plain(node: etree._Element) -> str:
    for bad in node.xpath(".//script|.//style|.//noscript|.//template"):
        bad.drop_tree()
    text = node.text_content()
    lines = [re.sub(r"[ \t\u00a0]+", " ", line).strip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def render(page: Page, fmt: str, body_only: bool, url: str) -> str:
    """The page as ``fmt`` (markdown | text | html); plain text bodies come back unchanged."""
    if page.kind == "text":
        return page.text
    html = page.text
    if fmt == "html":
        if not body_only:
            return html
        tree = _tree(html)
        if tree is None:
            return html
        return etree.tostring(_main_element(tree), encoding="unicode", method="html")
    if body_only:
        import trafilatura  # ~1 s to import (dateparser, courlan…): only when a page is converted

        extracted = trafilatura.extract(
            html,
            url=url,
            output_format="markdown" if fmt == "markdown" else "txt",
            include_tables=True,
            include_links=fmt == "markdown",
            include_formatting=fmt == "markdown",
            include_images=False,
            include_comments=False,
            deduplicate=False,
        )
        if extracted and extracted.strip():
            return _with_title(extracted.strip(), title_of(html), fmt)
    tree = _tree(html)
    if tree is None:
        return ""
    node = _main_element(tree) if body_only else tree
    if fmt == "markdown":
        return _html2text(etree.tostring(node, encoding="unicode", method="html"))
    return _plain(node)


def _with_title(text: str, title: str | None, fmt: str) -> str:
    if not title or title in text.split("\n", 1)[0]:
        return text
    return f"# {title}\n\n{text}" if fmt == "markdown" else f"{title}\n\n{text}"
