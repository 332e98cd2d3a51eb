"""What the program built: the facts ``tracekit capture`` records about a training process.

:class:`ProgramRecorder` watches, without changing anything the program sees:

* every ``DataLoader`` constructed (its arguments as the loader holds them, where the user's
  code constructed it, how often it was iterated and how many batches it gave);
* every optimizer constructed (class, ``foreach``/``fused``, parameters, steps taken);
* ``torch.autocast`` regions entered (device type, dtype), ``torch.compile`` calls (mode,
  backend, what was compiled, where) and CUDA graph captures and replays;
* the math flags (TF32 for matmuls and cuDNN, the float32 matmul precision, cudnn.benchmark,
  deterministic algorithms), the parameters of the top-level modules, the device memory
  (peak and total) and the caching allocator's settings.

:meth:`ProgramRecorder.snapshot` gives the ``program`` section of the process report (a JSON
object, :data:`PROGRAM_VERSION`); ``tracekit capture`` merges the sections of every process
into ``metadata.json`` and :mod:`tracekit.reading.program` reads them back as typed data.

Like :mod:`tracekit.capture.torch_hooks`, everything here receives the ``torch`` module as an
argument, so tests hand in small fakes.  Every hook is a thin wrapper that calls torch's own
function first (or only, while ``torch.compiler.is_compiling()``) and records afterwards;
a recording that fails is dropped silently, never raised into the user's program.  Nothing
here initialises CUDA: device facts are read only once the program has done so itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

#: version of the ``program`` section (bumped when a field changes meaning)
PROGRAM_VERSION = 1
#: distinct entries kept per list (DataLoaders, optimizers, autocast, compile calls); the rest are counted
MAX_ENTRIES = 32
#: environment variables of the CUDA caching allocator, recorded as they were at start-up
ALLOCATOR_VARIABLES = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

AddUndo = Callable[[Callable[[], None]], None]


# ---------------------------------------------------------------------- where the user's code is


class SiteFinder:
    """The innermost frame of the user's code: outside torch, the standard library and tracekit.

    A frame is skipped when its file is a frozen module, lies in torch's package or in this
    package, or lies in the standard library's folder but not in a ``site-packages`` (or
    ``dist-packages``) folder below it (where other packages, the user's libraries, live).
    Paths under the current folder are written relative to it, so a capture names
    ``train.py:42`` as the user would.
    """

    def __init__(self, *, stdlib: str, skipped: Iterable[str]) -> None:
        self._stdlib = os.path.join(os.path.abspath(stdlib), "")
        self._skipped = tuple(os.path.join(os.path.abspath(p), "") for p in skipped if p)
        self._user: dict[str, bool] = {}

    @classmethod
    def for_torch(cls, torch: Any) -> SiteFinder:
        ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        where = getattr(torch, "__file__", None)
        theirs = os.path.dirname(where) if isinstance(where, str) else ""
        return cls(stdlib=os.path.dirname(os.__file__), skipped=(ours, theirs))

    def is_user(self, filename: str) -> bool:
        """Whether a code object's file is the user's (cached per file name)."""
        known = self._user.get(filename)
        if known is None:
            path = os.path.abspath(filename)
            if filename.startswith("<frozen") or path.startswith(self._skipped):
                known = False
            elif path.startswith(self._stdlib):
                known = any(f"{os.sep}{folder}{os.sep}" in path for folder in ("site-packages", "dist-packages"))
            else:
                known = True
            self._user[filename] = known
        return known

    def site(self, frame: FrameType | None, constructing: Any = None) -> dict[str, Any] | None:
        """``{file, line, function}`` of the innermost user frame from ``frame`` outwards; with
        ``constructing``, the ``__init__`` frames of that object (a user's subclass calling
        ``super().__init__``) are passed over too, so the site is where it was constructed."""
        while frame is not None:
            code = frame.f_code
            if constructing is not None and code.co_name == "__init__" and frame.f_locals.get("self") is constructing:
                frame = frame.f_back
                continue
            if self.is_user(code.co_filename):
                return {"file": _shown_path(code.co_filename), "line": frame.f_lineno, "function": code.co_name}
            frame = frame.f_back
        return None


def _shown_path(filename: str) -> str:
    if filename.startswith("<"):
        return filename
    path = os.path.abspath(filename)
    try:
        here = os.getcwd()
    except OSError:
        return path
    rel = os.path.relpath(path, here)
    return path if rel.startswith(os.pardir) else rel


# ---------------------------------------------------------------------- small helpers


class _IdentityTable:
    """Objects (by identity, held weakly) → a value; for objects that may be unhashable."""

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def put(self, obj: Any, value: Any) -> None:
        key = id(obj)
        items = self._items

        def gone(ref: weakref.ref[Any], key: int = key) -> None:
            held = items.get(key)
            if held is not None and held[0] is ref:
                del items[key]

        with contextlib.suppress(TypeError):  # not weakly referenceable: not tracked
            items[key] = (weakref.ref(obj, gone), value)

    def get(self, obj: Any) -> Any:
        held = self._items.get(id(obj))
        if held is None or held[0]() is not obj:
            return None
        return held[1]


def _name(obj: Any) -> str | None:
    if obj is None:
        return None
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "__qualname__", None) or getattr(cls, "__name__", None)


def _scalar(value: Any) -> Any:
    """``value`` when JSON has it exactly (None, bool, int, float, str), else None."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return None


def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    text = str(dtype)
    return text.removeprefix("torch.")


class _Entries:
    """Distinct records (by key) with a count each; at most :data:`MAX_ENTRIES`."""

    def __init__(self, count_field: str) -> None:
        self._by_key: dict[Any, dict[str, Any]] = {}
        self._count_field = count_field
        self.dropped = 0

    def add(self, key: Any, record: dict[str, Any]) -> dict[str, Any] | None:
        entry = self._by_key.get(key)
        if entry is None:
            if len(self._by_key) >= MAX_ENTRIES:
                self.dropped += 1
                return None
            entry = self._by_key[key] = {**record, self._count_field: 0}
        entry[self._count_field] += 1
        return entry

    def records(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self._by_key.values()]


#: DataLoader attributes recorded as the loader holds them after construction
LOADER_ARGUMENTS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "drop_last", "timeout")
#: optimizer defaults recorded (None: torch picks the implementation)
OPTIMIZER_DEFAULTS = ("foreach", "fused", "capturable", "differentiable", "lr")


def _iterable_dataset(torch: Any, loader: Any) -> bool | None:
    cls = getattr(getattr(getattr(torch, "utils", None), "data", None), "IterableDataset", None)
    dataset = getattr(loader, "dataset", None)
    return None if cls is None or dataset is None else isinstance(dataset, cls)


def _context_name(context: Any) -> str | None:
    """A multiprocessing context's start method (fork, spawn, forkserver), or the string given."""
    if context is None or isinstance(context, str):
        return context
    method = getattr(context, "get_start_method", None)
    try:
        return str(method()) if callable(method) else _name(context)
    except Exception:
        return _name(context)


def _callable_name(obj: Any) -> str | None:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or _name(obj)


def _target_name(target: Any) -> str | None:
    """What ``torch.compile`` was given: a module's class, a function's qualified name."""
    if target is None:
        return None
    owner = getattr(target, "__self__", None)  # Module.compile() hands in the module's bound _call_impl
    for candidate in (target, owner):
        if candidate is not None and callable(getattr(candidate, "forward", None)) and hasattr(candidate, "parameters"):
            return _name(candidate)
    return _callable_name(target)


#: the math flags recorded, and where torch keeps each (``()``: a function to call)
MATH_FLAGS = {
    "matmul_allow_tf32": "backends.cuda.matmul.allow_tf32",
    "matmul_fp32_precision": "backends.cuda.matmul.fp32_precision",
    "float32_matmul_precision": "get_float32_matmul_precision()",
    "cudnn_allow_tf32": "backends.cudnn.allow_tf32",
    "cudnn_benchmark": "backends.cudnn.benchmark",
    "cudnn_deterministic": "backends.cudnn.deterministic",
    "deterministic_algorithms": "are_deterministic_algorithms_enabled()",
}


def _read_torch(torch: Any, path: str) -> Any:
    """The value at ``path`` under ``torch`` (None where this torch has none); warnings that
    reading a deprecated flag may give are kept from the program's output."""
    call = path.endswith("()")
    obj = torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for part in path.removesuffix("()").split("."):
                obj = getattr(obj, part)
            return _scalar(obj() if call else obj)
    except Exception:
        return None


def _wrap_method(cls: Any, name: str, after: Callable[[Any, Any, FrameType], None], add_undo: AddUndo) -> None:
    """Replace ``cls.name`` by a wrapper that calls it and then ``after(self, its result, the
    caller's frame)``; the undo puts the class back as it was (a method it inherited is inherited
    again)."""
    own = name in vars(cls)
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        after(self, result, sys._getframe(1))
        return result

    setattr(cls, name, wrapper)

    def undo() -> None:
        if own:
            setattr(cls, name, original)
        else:
            delattr(cls, name)

    add_undo(undo)


def _site_key(site: dict[str, Any] | None) -> tuple[Any, ...]:
    return (None,) if site is None else (site["file"], site["line"])


# ---------------------------------------------------------------------- the recorder


class ProgramRecorder:
    """Records what the program built (see the module docstring)."""

    def __init__(self, torch: Any, compiling: Callable[[], bool] = lambda: False) -> None:
        self._torch = torch
        self._compiling = compiling
        self._sites = SiteFinder.for_torch(torch)
        self._lock = threading.RLock()  # re-entrant: a SIGTERM handler may report mid-record
        self.dataloaders = _Entries("constructed")
        self.optimizers = _Entries("constructed")
        self.autocast = _Entries("entered")
        self.compiles = _Entries("calls")
        self.graph_captures = 0
        self.graph_replays = 0
        self._loaders = _IdentityTable()  # DataLoader → its entry
        self._iterators = _IdentityTable()  # DataLoader iterator → its loader's entry
        self._optimizer_entries = _IdentityTable()  # optimizer → its entry
        self._modules: Callable[[], list[Any]] = list
        self._math: dict[str, Any] | None = None
        self._model: dict[str, Any] | None = None
        self._memory: dict[str, Any] | None = None
        self._allocator_env = {k: os.environ.get(k) for k in ALLOCATOR_VARIABLES}
        self.notes: list[str] = []

    # ------------------------------------------------------------------ installation

    def install(self, add_undo: AddUndo) -> None:
        """Wrap torch's constructors and entry points; each piece this torch lacks is skipped."""
        for name, install in (
            ("DataLoader", self._install_dataloader),
            ("optimizers", self._install_optimizer),
            ("autocast", self._install_autocast),
            ("torch.compile", self._install_compile),
            ("CUDA graphs", self._install_cuda_graphs),
        ):
            try:
                install(add_undo)
            except (AttributeError, ImportError, TypeError) as exc:
                self.notes.append(f"{name} not recorded: {type(exc).__name__}: {exc}")

    def watch_modules(self, modules: Callable[[], list[Any]]) -> None:
        """Where the top-level modules come from (the forward hooks find them during step 0)."""
        self._modules = modules

    def _install_dataloader(self, add_undo: AddUndo) -> None:
        cls = self._torch.utils.data.DataLoader
        _wrap_method(cls, "__init__", lambda loader, _, caller: self._record(self._loader_constructed, loader, caller), add_undo)
        _wrap_method(cls, "__iter__", lambda loader, iterator, _: self._record(self._loader_iterated, loader, iterator), add_undo)

    def _install_optimizer(self, add_undo: AddUndo) -> None:
        _wrap_method(self._torch.optim.Optimizer, "__init__",
                     lambda opt, _, caller: self._record(self._optimizer_constructed, opt, caller), add_undo)

    def _install_autocast(self, add_undo: AddUndo) -> None:
        def entered(region: Any, result: Any, caller: FrameType) -> None:
            if not self._compiling():
                self._record(self._autocast_entered, region)

        _wrap_method(self._torch.amp.autocast_mode.autocast, "__enter__", entered, add_undo)

    def _install_compile(self, add_undo: AddUndo) -> None:
        torch = self._torch
        original = torch.compile
        recorder = self

        @functools.wraps(original)
        def compile(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if not recorder._compiling():
                recorder._record(recorder._compile_called, args, kwargs, sys._getframe(1))
            return result

        torch.compile = compile
        add_undo(lambda: setattr(torch, "compile", original))

    def _install_cuda_graphs(self, add_undo: AddUndo) -> None:
        cls = self._torch.cuda.graphs.CUDAGraph
        _wrap_method(cls, "capture_begin", lambda graph, _, __: self._count_graph(captures=1), add_undo)
        _wrap_method(cls, "replay", lambda graph, _, __: self._count_graph(replays=1), add_undo)

    def _count_graph(self, *, captures: int = 0, replays: int = 0) -> None:
        self.graph_captures += captures
        self.graph_replays += replays

    # ------------------------------------------------------------------ what the hooks record

    def _record(self, what: Callable[..., None], *args: Any) -> None:
        try:
            with self._lock:
                what(*args)
        except Exception:  # a fact that cannot be read is not recorded; the program goes on
            pass

    def _loader_constructed(self, loader: Any, caller: FrameType) -> None:
        site = self._sites.site(caller, constructing=loader)
        record = {
            "site": site,
            **{name: _scalar(getattr(loader, name, None)) for name in LOADER_ARGUMENTS},
            "dataset": _name(getattr(loader, "dataset", None)),
            "sampler": _name(getattr(loader, "sampler", None)),
            "batch_sampler": _name(getattr(loader, "batch_sampler", None)),
            "iterable_dataset": _iterable_dataset(self._torch, loader),
            "multiprocessing_context": _context_name(getattr(loader, "multiprocessing_context", None)),
        }
        key = (_site_key(site), *(v for k, v in record.items() if k != "site"))
        entry = self.dataloaders.add(key, {**record, "iterations": 0, "fetches": 0})
        if entry is not None:
            self._loaders.put(loader, entry)

    def _loader_iterated(self, loader: Any, iterator: Any) -> None:
        entry = self._loaders.get(loader)
        if entry is not None:
            entry["iterations"] += 1
            self._iterators.put(iterator, entry)

    def fetched(self, iterator: Any) -> None:
        """A batch came out of ``iterator`` (called by the DataLoader fetch hook; no lock: the
        training thread is the only one that counts)."""
        entry = self._iterators.get(iterator)
        if entry is not None:
            entry["fetches"] += 1

    def _optimizer_constructed(self, optimizer: Any, caller: FrameType) -> None:
        site = self._sites.site(caller, constructing=optimizer)
        defaults = getattr(optimizer, "defaults", None)
        defaults = defaults if isinstance(defaults, dict) else {}
        groups = [g for g in getattr(optimizer, "param_groups", None) or [] if isinstance(g, dict)]
        cls = type(optimizer)
        record = {
            "site": site,
            "class": cls.__name__,
            "module": cls.__module__,
            **{name: _scalar(defaults.get(name)) for name in OPTIMIZER_DEFAULTS},
            "param_groups": len(groups),
            "parameters": sum(int(p.numel()) for g in groups for p in g.get("params", [])),
        }
        key = (_site_key(site), *(v for k, v in record.items() if k != "site"))
        entry = self.optimizers.add(key, {**record, "steps": 0})
        if entry is not None:
            self._optimizer_entries.put(optimizer, entry)

    def optimizer_stepped(self, optimizer: Any) -> None:
        """``optimizer.step()`` is about to run (called by the optimizer step pre-hook)."""
        entry = self._optimizer_entries.get(optimizer)
        if entry is not None:
            entry["steps"] += 1

    def _autocast_entered(self, region: Any) -> None:
        device = _scalar(getattr(region, "device", None))
        dtype = _dtype_name(getattr(region, "fast_dtype", None))
        enabled = _scalar(getattr(region, "_enabled", None))
        self.autocast.add((device, dtype, enabled), {"device_type": device, "dtype": dtype, "enabled": enabled})

    def _compile_called(self, args: tuple[Any, ...], kwargs: dict[str, Any], caller: FrameType) -> None:
        site = self._sites.site(caller)
        target = args[0] if args else kwargs.get("model")
        backend = kwargs.get("backend")
        options = kwargs.get("options")
        record = {
            "site": site,
            "target": _target_name(target),
            "mode": _scalar(kwargs.get("mode")),
            "backend": backend if backend is None or isinstance(backend, str) else _callable_name(backend),
            "fullgraph": _scalar(kwargs.get("fullgraph")),
            "dynamic": _scalar(kwargs.get("dynamic")),
            "disable": _scalar(kwargs.get("disable")),
            "options": {str(k): _scalar(v) for k, v in options.items()} if isinstance(options, dict) else None,
        }
        key = (_site_key(site), *(v for k, v in record.items() if k not in ("site", "options")))
        self.compiles.add(key, record)

    # ------------------------------------------------------------------ facts read on demand

    def _read_math(self) -> dict[str, Any]:
        return {name: _read_torch(self._torch, path) for name, path in MATH_FLAGS.items()}

    def _read_model(self) -> dict[str, Any] | None:
        modules = [m for m in self._modules() if m is not None]
        if not modules:
            return None
        seen: set[int] = set()
        total = trainable = size = 0
        dtypes: dict[str, int] = {}
        devices: dict[str, int] = {}
        listed = []
        for module in modules:
            own = 0
            for p in module.parameters():
                n = int(p.numel())
                own += n
                if id(p) in seen:
                    continue
                seen.add(id(p))
                total += n
                trainable += n if p.requires_grad else 0
                size += n * int(p.element_size())
                dtype, device = _dtype_name(p.dtype) or "?", str(p.device)
                dtypes[dtype] = dtypes.get(dtype, 0) + n
                devices[device] = devices.get(device, 0) + n
            listed.append({"class": _name(module), "parameters": own})
        return {"parameters": total, "trainable": trainable, "bytes": size, "dtypes": dtypes, "devices": devices,
                "modules": listed[:MAX_ENTRIES]}

    def _read_memory(self) -> dict[str, Any] | None:
        """The device's memory, or None before the program initialised CUDA and while a stream
        of this process captures a CUDA graph (a report written at a step boundary can fall
        inside ``torch.cuda.graph``; no CUDA call may be made there)."""
        cuda = getattr(self._torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        capturing = getattr(cuda, "is_current_stream_capturing", None)
        if capturing is not None and capturing():
            return None
        device = int(cuda.current_device())
        props = cuda.get_device_properties(device)
        free, total = cuda.mem_get_info(device)
        return {
            "device": device,
            "name": str(props.name),
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": int(props.multi_processor_count),
            "total_bytes": int(total),
            "free_bytes": int(free),
            "allocated_bytes": int(cuda.memory_allocated(device)),
            "reserved_bytes": int(cuda.memory_reserved(device)),
            "peak_allocated_bytes": int(cuda.max_memory_allocated(device)),
            "peak_reserved_bytes": int(cuda.max_memory_reserved(device)),
        }

    def _read_allocator(self) -> dict[str, Any]:
        env = self._allocator_env
        off = env.get("PYTORCH_NO_CUDA_MEMORY_CACHING")
        backend = None
        cuda = getattr(self._torch, "cuda", None)
        try:
            if cuda is not None and cuda.is_initialized():
                backend = _scalar(cuda.get_allocator_backend())
        except Exception:
            backend = None
        return {
            "caching": not (off is not None and off.strip() not in ("", "0")),
            "alloc_conf": env.get("PYTORCH_CUDA_ALLOC_CONF") or env.get("PYTORCH_ALLOC_CONF"),
            "backend": backend,
        }

    def snapshot(self, final: bool = False) -> dict[str, Any]:
        """The ``program`` section of the process report.

        The math flags are read while the program trains (each report written before the
        exit reads them again) and kept as they were at exit; parameters are counted while
        the top-level modules are alive; memory is read each time it can be (its peaks only
        grow), else the last reading stays.
        """
        with self._lock:
            if self._math is None or not final:
                self._math = _guarded(self._read_math) or self._math
            model = _guarded(self._read_model)
            if model is not None:
                self._model = model
            memory = _guarded(self._read_memory)
            if memory is not None:
                self._memory = memory
            return {
                "version": PROGRAM_VERSION,
                "dataloaders": self.dataloaders.records(),
                "optimizers": self.optimizers.records(),
                "autocast": self.autocast.records(),
                "compile": self.compiles.records(),
                "cuda_graphs": {"captures": self.graph_captures, "replays": self.graph_replays},
                "math": self._math,
                "model": self._model,
                "memory": self._memory,
                "allocator": _guarded(self._read_allocator),
                "dropped": {
                    "dataloaders": self.dataloaders.dropped, "optimizers": self.optimizers.dropped,
                    "autocast": self.autocast.dropped, "compile": self.compiles.dropped,
                },
                "notes": list(self.notes),
            }


def _guarded(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:
        return None


__all__ = ["MAX_ENTRIES", "PROGRAM_VERSION", "ProgramRecorder", "SiteFinder"]
