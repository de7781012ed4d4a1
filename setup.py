"""Only the optional C extensions live here; everything else is in pyproject.toml.

``kernel.projection._scan`` runs the projection's whole-input scans with the GIL released
(docs/kernel.md, "Projection speed"). ``kernel._throttle`` is the work-tree diff's progress
callback, asking Python whether to stop at most once per 10 ms instead of per file
(docs/workspace-tools.md, ``kernel/gitdiff.py``). ``optional=True``: where no C compiler is found
(a slim container image), the install goes on and the pure-Python paths run, which give the same
results, only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kernel.projection._scan", ["kernel/projection/_scan.c"], optional=True),
        Extension("kernel._throttle", ["kernel/_throttle.c"], optional=True),
    ]
)
