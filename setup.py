"""Optional native extensions (everything else is in pyproject.toml).

Every C source is in ``tracekit/native/`` and loaded by ``tracekit.native.load``.  Each extension
is ``optional=True``: without a compiler the install still succeeds and tracekit runs its
pure-Python implementation of the same concept, which gives identical results
(``TRACEKIT_PURE_PYTHON=1`` forces it everywhere).
"""

from setuptools import Extension, setup

_DIR = "tracekit/native"
_FLAGS = ["-O2", "-std=c99"]
# the Arrow C data interface's structs, written once, shared by the modules that export columns
_ARROW = {"include_dirs": [_DIR], "depends": [f"{_DIR}/arrow_abi.h"]}


def _native(name: str, **extra: object) -> Extension:
    return Extension(f"tracekit.native._{name}", [f"{_DIR}/_{name}.c"], extra_compile_args=_FLAGS, optional=True, **extra)  # type: ignore[arg-type]


setup(
    ext_modules=[
        _native("kineto_scan", **_ARROW),  # the Kineto reader's chunk scanner
        _native("inflate", libraries=["dl"]),  # whole-file gunzip with libdeflate, opened at run time
        _native("flowbind", **_ARROW),  # flow endpoints, correlation links, canonical order
        _native("dag"),  # the critical path's longest paths
        _native("sweep", **_ARROW),  # the replay's sweeps and Kahn's order
    ]
)
