"""The ``web_search`` tool package (SPEC W-1…W-5): ``tool`` (parameters, coalescing, bulkhead),
``cascade`` (tiers, budgets, breakers), ``engines`` (the engine table and one engine request),
``parsers`` (result pages, feeds, API JSON), ``results`` (cleaning and merging), ``gate`` (the
structural retrieval requirements), ``render`` (rows, envelope, metadata), ``browser`` (Playwright
+ Debian Chromium with no network of its own) and ``config`` (engine settings and keys)."""

from tools.web_search.tool import TOOL

__all__ = ["TOOL"]
