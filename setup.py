"""Native extensions (optional: an install without a compiler falls back to pure Python).

Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # the critical path's longest paths of every step graph (tracekit/analysis/critical_path.py)
        Extension(
            "tracekit.analysis._dag",
            sources=["tracekit/analysis/_dag.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
    ],
)
