"""The ``web_fetch`` tool package (SPEC W-6): ``tool`` (flow, typed failures, metadata),
``extract`` (charset, kinds, main-content extraction, meta refresh), ``paging`` (Unicode-safe
character pages) and ``cache`` (per-session converted pages for consistent paging)."""

from tools.web_fetch.tool import TOOL

__all__ = ["TOOL"]
