"""Optional native extensions (everything else is in pyproject.toml).

Each extension is ``optional=True``: without a compiler the install still succeeds and
tracekit runs its pure-Python fallback, which gives identical results
(``TRACEKIT_PURE_PYTHON=1`` forces the fallback everywhere).
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c99"]

setup(
    ext_modules=[
        # the replay's longest-path sweeps and Kahn's order (tracekit/analysis/sweep.py)
        Extension("tracekit.analysis._sweep", ["tracekit/analysis/_sweep.c"], extra_compile_args=_FLAGS, optional=True),
    ]
)
