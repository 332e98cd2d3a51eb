"""Native parts of tracekit; everything else is in pyproject.toml.

Each extension is optional: an install without a C compiler still works, and the pure
Python path it speeds up gives the same results (``TRACEKIT_PURE_PYTHON=1`` forces it).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.parsers._kineto_scan",
            sources=["parsers/_kineto_scan.c"],
            extra_compile_args=["-O2", "-std=c99"],
            optional=True,
        ),
    ]
)
