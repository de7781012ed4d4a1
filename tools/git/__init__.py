"""The ``git`` tool package: ``tool`` (schema, capabilities, dispatch), ``read_ops`` / ``write_ops``
(the forms), ``view`` (which repository a workspace means), ``errors`` (the pygit2 edge)."""

from tools.git.tool import TOOL

__all__ = ["TOOL"]
