"""The ``search`` tool package (SPEC Q-1…Q-5): grep, glob and bm25 over the session workspace.

``TOOL`` serves grep/glob/bm25 (a workspace with ``search`` and ``read``); sessions build their own
with ``build_search_tool(workspace_caps, retrieval_enabled, extra_runners)`` so the ``mode`` enum
lists only what they can serve.
"""

from tools.search.tool import available_modes, build_search_tool

TOOL = build_search_tool(("search", "read"))
assert TOOL is not None

__all__ = ["TOOL", "available_modes", "build_search_tool"]
