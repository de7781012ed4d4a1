"""Only the optional C extension lives here; everything else is in pyproject.toml.

``kernel.projection._scan`` runs the projection's whole-input scans with the GIL released
(docs/kernel.md, "Projection speed"). ``optional=True``: where no C compiler is found (a slim
container image), the install goes on and the projection takes its pure-Python paths, which give
the same results, only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kernel.projection._scan", ["kernel/projection/_scan.c"], optional=True),
    ]
)
