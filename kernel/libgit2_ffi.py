"""cffi bindings (ABI mode) into the libgit2 pygit2 loaded: calls made without the GIL (SPEC K-6).

cffi releases the GIL around every C call, pygit2 does not: ``kernel/gitstatus.py`` and
``kernel/gitdiff.py`` make libgit2's long calls through a binding from here. The library is the one
already in this process (found in ``/proc/self/maps``), so pygit2's objects can be handed to it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()


def loaded_libgit2() -> str | None:
    """The path of the libgit2 this process has loaded (pygit2's bundled one, or the system's)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.startswith("/") and os.path.basename(path).startswith("libgit2"):
                    return path
    except OSError:
        pass
    return None


def bind(cdef: str, symbols: tuple[str, ...]) -> tuple[Any, Any] | None:
    """``(ffi, lib)`` for ``cdef`` with every one of ``symbols`` present, or None when cffi, the
    loaded libgit2 or a symbol is missing (the caller then uses pygit2's own call)."""
    with _lock:
        try:
            import cffi
            import pygit2  # noqa: F401  (loads libgit2 and initialises it)

            path = loaded_libgit2()
            if path is None:
                return None
            ffi = cffi.FFI()
            ffi.cdef(cdef)
            lib = ffi.dlopen(path)
            for name in symbols:
                getattr(lib, name)  # a missing symbol fails here, not mid-call
        except Exception:
            return None
        return ffi, lib
