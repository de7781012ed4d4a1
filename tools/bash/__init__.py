"""The ``bash`` tool package (SPEC B-2, K-6; REFERENCE 4.7).

- ``tool``: the ``ToolSpec`` (parameters, sandbox routing, session cwd, result shape);
- ``runner``: the process runtime (process group, one deadline over drain + exit, group kill);
- ``capture``: the bounded 64 KiB head + 36 KiB tail capture over both streams;
- ``sandbox``: the bubblewrap argv builder and its availability probe;
- ``changes``: ``changed_paths`` from git-status or mtime snapshots.
"""

from tools.bash.tool import TOOL, Params

__all__ = ["TOOL", "Params"]
