"""Optional native extensions (everything else is in pyproject.toml).

Every C source is in ``tracekit/native/`` and loaded by ``tracekit.native.load``.  Each extension
is ``optional=True``: without a compiler the install still succeeds and tracekit runs its
pure-Python implementation of the same concept, which gives identical results
(``TRACEKIT_PURE_PYTHON=1`` forces it everywhere).

``TRACEKIT_NATIVE_BUILD`` chooses a build for the fuzzer (``scripts/fuzz``, which sets it and
builds into a folder of its own, never over the installed extensions): ``asan`` adds
AddressSanitizer and UndefinedBehaviorSanitizer and gcc's edge and compare hooks, answered by
``scripts/fuzz/sancov_shim.c`` for the fuzzer; ``coverage`` adds gcov's counters.  Unset, the
normal optimised build.
"""

import os

from setuptools import Extension, setup

_DIR = "tracekit/native"
_BUILD = os.environ.get("TRACEKIT_NATIVE_BUILD", "")
_FLAGS = {
    "": ["-O2", "-std=c99"],
    # every buffer from malloc (KINETO_SCAN_MALLOC_ONLY), so that ASan guards them all; sibling
    # calls kept so that the shim's compare hooks pass the caller's address on to libFuzzer
    "asan": [
        "-O1", "-g", "-std=c99", "-fno-omit-frame-pointer", "-foptimize-sibling-calls",
        "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fsanitize-coverage=trace-pc,trace-cmp",
        "-DKINETO_SCAN_MALLOC_ONLY",
    ],
    "coverage": ["-O0", "-g", "-std=c99", "--coverage"],
}[_BUILD]
_LINK = {"": [], "asan": ["-fsanitize=address,undefined"], "coverage": ["--coverage"]}[_BUILD]
_SHIM = ["scripts/fuzz/sancov_shim.c"] if _BUILD == "asan" else []
# the Arrow C data interface's structs, written once, shared by the modules that export columns
_ARROW = {"include_dirs": [_DIR], "depends": [f"{_DIR}/arrow_abi.h"]}


def _native(name: str, **extra: object) -> Extension:
    return Extension(  # type: ignore[arg-type]
        f"tracekit.native._{name}", [f"{_DIR}/_{name}.c", *_SHIM], extra_compile_args=_FLAGS,
        extra_link_args=_LINK, optional=not _BUILD, **extra,
    )


setup(
    ext_modules=[
        _native("kineto_scan", **_ARROW),  # the Kineto reader's chunk scanner
        _native("dag"),  # the critical path's longest paths
        _native("sweep", **_ARROW),  # the replay's sweeps and Kahn's order
    ]
)
