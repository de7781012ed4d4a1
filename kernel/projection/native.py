"""The optional C scans of ``kernel/projection/_scan.c``, or ``None`` where they were not built.

Callers look ``scan`` up at call time, so a test can set it to ``None`` and run the pure-Python
paths, which give the same results (tests/kernel/test_projection_native.py).
"""

from __future__ import annotations

try:
    from kernel.projection import _scan as scan
except ImportError:  # no C compiler at install time: the pure-Python paths run instead
    scan = None  # type: ignore[assignment]

__all__ = ["NOT_ARRAY", "UNDECIDED", "VALID", "scan"]

# json_array verdicts (see _scan.c)
VALID, NOT_ARRAY, UNDECIDED = 0, 1, 2
