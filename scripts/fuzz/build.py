"""The fuzzer's builds of the extensions, each in a folder of its own under ``build/fuzz``
(the installed extensions are never touched), and their loading in place of the installed ones.

``asan``: AddressSanitizer, UndefinedBehaviorSanitizer and gcc's edge and compare hooks
(``sancov_shim.c`` hands the edges to libFuzzer); ``coverage``: gcov's counters.  Both come
from setup.py with ``TRACEKIT_NATIVE_BUILD`` set.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NATIVE_DIR = REPO / "tracekit" / "native"
SHIM = Path(__file__).resolve().with_name("sancov_shim.c")
BUILD_ROOT = REPO / "build" / "fuzz"
KINDS = ("asan", "coverage")
#: libFuzzer's hooks that tracekit_fuzz_attach takes, in its order (sancov_shim.c)
_HOOKS = (
    "__sanitizer_cov_8bit_counters_init", "__sanitizer_cov_pcs_init",
    "__sanitizer_cov_trace_cmp1", "__sanitizer_cov_trace_cmp2", "__sanitizer_cov_trace_cmp4", "__sanitizer_cov_trace_cmp8",
    "__sanitizer_cov_trace_const_cmp1", "__sanitizer_cov_trace_const_cmp2", "__sanitizer_cov_trace_const_cmp4",
    "__sanitizer_cov_trace_const_cmp8", "__sanitizer_cov_trace_switch",
)


def folder(kind: str) -> Path:
    return BUILD_ROOT / kind


def _built(kind: str) -> dict[str, Path]:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    sources = {c.stem[1:] for c in NATIVE_DIR.glob("_*.c")}  # (a module since removed is left out)
    out = {}
    for so in (folder(kind) / "tracekit" / "native").glob(f"_*{suffix}"):
        if so.name[1 : -len(suffix)] in sources:
            out[so.name[1 : -len(suffix)]] = so
    return out


def _stale(kind: str) -> bool:
    built = _built(kind)
    sources = sorted(NATIVE_DIR.glob("_*.c"))
    if {s.stem[1:] for s in sources} - set(built):
        return True
    newest = max(p.stat().st_mtime for p in [*sources, *NATIVE_DIR.glob("*.h"), SHIM, REPO / "setup.py"])
    return any(so.stat().st_mtime < newest for so in built.values())


def build(kind: str, *, quiet: bool = True) -> dict[str, Path]:
    """Build (when a source is newer than the build) and answer {module name: its .so}."""
    if kind not in KINDS:
        raise ValueError(f"no build {kind!r} (there are: {', '.join(KINDS)})")
    if _stale(kind):
        env = {**os.environ, "TRACEKIT_NATIVE_BUILD": kind}
        cmd = [
            sys.executable, "setup.py", "-q", "build_ext", "--force",
            "--build-lib", str(folder(kind)), "--build-temp", str(folder(kind).with_name(kind + ".tmp")),
        ]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=quiet, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the {kind} build failed:\n{done.stderr if quiet else ''}")
    return _built(kind)


def use(kind: str, attach: str | None = None) -> dict[str, Path]:
    """Load the ``kind`` build's modules in place of the installed ones (before anything
    imports those), and register module ``attach``'s edge counters with the libFuzzer that
    atheris loaded (call atheris.Setup first).  Answers the modules loaded."""
    import tracekit.native  # the package itself; its modules come from the build below

    built = _built(kind)
    if not built:
        raise SystemExit(f"no {kind} build: run `python scripts/fuzz build {kind}`")
    for name, so in built.items():
        full = f"tracekit.native._{name}"
        if full in sys.modules:
            raise RuntimeError(f"{full} was imported before the {kind} build could take its place")
        spec = importlib.util.spec_from_file_location(full, so)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[full] = module
        setattr(tracekit.native, f"_{name}", module)
    if attach is not None:
        _attach(built[attach])
    return built


def _attach(so: Path) -> int:
    """Hand one module's edge counters and compare hooks to atheris's libFuzzer."""
    import atheris

    # atheris loads its libFuzzer when fuzzing starts; loaded here first by the same path, it
    # is the same library then, and holds these counters from the first input on
    cores = sorted(Path(atheris.__file__).parent.glob("core_with_libfuzzer*.so"))
    if not cores:
        raise RuntimeError("this atheris has no libFuzzer core to attach the edge counters to")
    fuzzer = ctypes.CDLL(str(cores[0].resolve()))
    hooks = (ctypes.c_void_p * len(_HOOKS))(*[ctypes.cast(getattr(fuzzer, h), ctypes.c_void_p).value for h in _HOOKS])
    attach = ctypes.CDLL(str(so)).tracekit_fuzz_attach
    attach.restype = ctypes.c_uint
    return int(attach(hooks))
