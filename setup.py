"""Optional native extensions (everything else is in pyproject.toml).

Each extension is ``optional=True``: without a compiler the install still succeeds and
tracekit runs its pure-Python fallback, which gives identical results
(``TRACEKIT_PURE_PYTHON=1`` forces the fallback everywhere).
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c99"]
# every module includes parsers/arrow_abi.h, the Arrow C data interface's structs, written once
_ARROW = {"include_dirs": ["parsers"], "depends": ["parsers/arrow_abi.h"]}

setup(
    ext_modules=[
        # the Kineto reader's chunk scanner: JSON events straight into columns (parsers/kineto.py)
        Extension("tracekit.parsers._kineto_scan", ["parsers/_kineto_scan.c"], extra_compile_args=_FLAGS, optional=True, **_ARROW),
        # the Kineto reader's whole-file gunzip with libdeflate, opened at run time (parsers/_source.py)
        Extension("tracekit.parsers._inflate", ["parsers/_inflate.c"], extra_compile_args=_FLAGS, libraries=["dl"], optional=True),
        # the Kineto reader's flow endpoints bound to their slices (parsers/kineto.py, _bind_endpoints)
        Extension("tracekit.parsers._flowbind", ["parsers/_flowbind.c"], extra_compile_args=_FLAGS, optional=True, **_ARROW),
        # the critical path's longest paths of every step graph (tracekit/analysis/critical_path.py)
        Extension("tracekit.analysis._dag", ["tracekit/analysis/_dag.c"], extra_compile_args=_FLAGS, optional=True),
        # the cache's tables memory-mapped and handed to polars without a copy (tracekit/cache.py)
        Extension("tracekit._colmap", ["tracekit/_colmap.c"], extra_compile_args=_FLAGS, optional=True, **_ARROW),
        # the replay's longest-path sweeps and Kahn's order (tracekit/analysis/sweep.py)
        Extension("tracekit.analysis._sweep", ["tracekit/analysis/_sweep.c"], extra_compile_args=_FLAGS, optional=True, **_ARROW),
    ]
)
