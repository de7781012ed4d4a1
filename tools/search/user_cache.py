"""Where search keeps data it can rebuild (indexes, the embedder's graph): the user's cache."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir(env_var: str, subfolder: str) -> Path:
    """``$env_var`` when set, else ``${XDG_CACHE_HOME:-~/.cache}/a3s-fleet/<subfolder>``."""
    explicit = os.environ.get(env_var)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "a3s-fleet" / subfolder
