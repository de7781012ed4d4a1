"""The ``download`` tool package (SPEC D-1…D-5): ``tool`` (parameters, flow, result), ``transfer``
(probe, Range segments, sequential stream), ``staging`` (temp file and atomic promotion relative to
a verified directory fd) and ``names`` (safe file names from untrusted headers and URLs)."""

from tools.download.tool import TOOL

__all__ = ["TOOL"]
