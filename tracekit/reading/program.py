"""What a captured program built, read back from ``metadata.json`` as typed, frozen data.

``tracekit capture`` records, per rank, the DataLoaders, optimizers, autocast regions,
``torch.compile`` calls, CUDA graphs, math flags, parameters, device memory and allocator
settings of the program (:mod:`tracekit.capture.program` writes them; docs/capture.md lists
the fields).  :func:`read_program` turns the ``program`` section into one
:class:`ProgramFacts` per rank.

Reading never fails: metadata written before the section existed gives no facts, and a value
of the wrong type is read as unknown (None, or the entry is left out) with a line in
:attr:`ProgramFacts.ignored` saying what was ignored.

Example::

    >>> facts = read_program({"version": 1, "ranks": [{"rank": 0, "pid": 7, "dataloaders": [
    ...     {"site": {"file": "train.py", "line": 42, "function": "main"}, "batch_size": 64,
    ...      "num_workers": 0, "pin_memory": False, "fetches": 12}]}]})
    >>> facts[0].training_loader().describe()
    'train.py:42 `DataLoader(batch_size=64, num_workers=0, pin_memory=False)`'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: the newest version of the section this module reads (older versions read the same way)
PROGRAM_VERSION = 1

T = TypeVar("T")


class _Reader:
    """Typed getters over one JSON object; what does not fit is noted and read as None."""

    def __init__(self, data: Mapping[str, Any], where: str, ignored: list[str]) -> None:
        self._data = data
        self._where = where
        self._ignored = ignored

    def _get(self, key: str, ok: Callable[[Any], bool], what: str) -> Any:
        value = self._data.get(key)
        if value is None:
            return None
        if ok(value):
            return value
        self._ignored.append(f"{self._where}.{key}: expected {what}, got {type(value).__name__}")
        return None

    def integer(self, key: str) -> int | None:
        value: int | None = self._get(key, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
        return value

    def count(self, key: str) -> int:
        """A non-negative count (0 when absent or malformed)."""
        value = self.integer(key)
        return value if value is not None and value >= 0 else 0

    def number(self, key: str) -> float | None:
        value = self._get(key, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number")
        return None if value is None else float(value)

    def flag(self, key: str) -> bool | None:
        value: bool | None = self._get(key, lambda v: isinstance(v, bool), "true or false")
        return value

    def text(self, key: str) -> str | None:
        value: str | None = self._get(key, lambda v: isinstance(v, str), "a string")
        return value

    def object(self, key: str) -> Mapping[str, Any] | None:
        value: Mapping[str, Any] | None = self._get(key, lambda v: isinstance(v, dict), "an object")
        return value

    def objects(self, key: str) -> list[Mapping[str, Any]]:
        """The objects of a list (other items are noted and left out)."""
        items = self._get(key, lambda v: isinstance(v, list), "a list") or []
        kept: list[Mapping[str, Any]] = [i for i in items if isinstance(i, dict)]
        if len(kept) < len(items):
            self._ignored.append(f"{self._where}.{key}: {len(items) - len(kept)} item(s) that are not objects")
        return kept

    def child(self, data: Mapping[str, Any], name: str) -> _Reader:
        return _Reader(data, f"{self._where}.{name}", self._ignored)

    def counts(self, key: str) -> Mapping[str, int]:
        """A {name: count} object (entries that are not counts are left out)."""
        raw = self.object(key) or {}
        return {str(k): v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


@dataclass(frozen=True)
class CodeSite:
    """A place in the user's code: the innermost frame outside torch and the standard library."""

    file: str
    line: int | None = None
    function: str | None = None

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    @classmethod
    def read(cls, r: _Reader, key: str = "site") -> CodeSite | None:
        raw = r.object(key)
        if raw is None:
            return None
        s = r.child(raw, key)
        file = s.text("file")
        return None if file is None else cls(file=file, line=s.integer("line"), function=s.text("function"))


@dataclass(frozen=True)
class DataLoaderInfo:
    """One DataLoader the program constructed (equal ones at one site are one entry)."""

    site: CodeSite | None
    batch_size: int | None
    num_workers: int | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    drop_last: bool | None
    timeout: float | None
    dataset: str | None
    sampler: str | None
    batch_sampler: str | None
    iterable_dataset: bool | None
    multiprocessing_context: str | None
    #: how many loaders like this one were constructed there
    constructed: int
    #: how often one was iterated (epochs started) and the batches they gave
    iterations: int
    fetches: int

    @classmethod
    def read(cls, r: _Reader) -> DataLoaderInfo:
        return cls(
            site=CodeSite.read(r), batch_size=r.integer("batch_size"), num_workers=r.integer("num_workers"),
            pin_memory=r.flag("pin_memory"), prefetch_factor=r.integer("prefetch_factor"),
            persistent_workers=r.flag("persistent_workers"), drop_last=r.flag("drop_last"), timeout=r.number("timeout"),
            dataset=r.text("dataset"), sampler=r.text("sampler"), batch_sampler=r.text("batch_sampler"),
            iterable_dataset=r.flag("iterable_dataset"), multiprocessing_context=r.text("multiprocessing_context"),
            constructed=r.count("constructed"), iterations=r.count("iterations"), fetches=r.count("fetches"),
        )

    def call(self) -> str:
        """The loader's arguments that decide its speed, as a call: ``DataLoader(batch_size=64,
        num_workers=0, pin_memory=False)``; ``prefetch_factor`` and ``persistent_workers`` are
        shown with workers only (they mean nothing without)."""
        shown: list[tuple[str, Any]] = [
            ("batch_size", self.batch_size), ("num_workers", self.num_workers), ("pin_memory", self.pin_memory),
        ]
        if self.num_workers:
            shown += [("prefetch_factor", self.prefetch_factor), ("persistent_workers", self.persistent_workers)]
        return "DataLoader(" + ", ".join(f"{k}={v!r}" for k, v in shown if v is not None) + ")"

    def describe(self) -> str:
        """``train.py:42 `DataLoader(...)``` (the call alone when the site is unknown)."""
        call = f"`{self.call()}`"
        return call if self.site is None else f"{self.site} {call}"


@dataclass(frozen=True)
class OptimizerInfo:
    """One optimizer the program constructed."""

    name: str | None
    module: str | None
    site: CodeSite | None
    #: True/False as passed; None: torch chooses (foreach on CUDA where it can, fused never by default)
    foreach: bool | None
    fused: bool | None
    capturable: bool | None
    lr: float | None
    param_groups: int
    parameters: int
    constructed: int
    #: optimizer.step() calls seen (while capturing)
    steps: int

    @classmethod
    def read(cls, r: _Reader) -> OptimizerInfo:
        return cls(
            name=r.text("class"), module=r.text("module"), site=CodeSite.read(r), foreach=r.flag("foreach"),
            fused=r.flag("fused"), capturable=r.flag("capturable"), lr=r.number("lr"), param_groups=r.count("param_groups"),
            parameters=r.count("parameters"), constructed=r.count("constructed"), steps=r.count("steps"),
        )


@dataclass(frozen=True)
class AutocastUse:
    """``torch.autocast`` regions entered with one device type, dtype and enabled flag."""

    device_type: str | None
    dtype: str | None
    enabled: bool | None
    entered: int

    @classmethod
    def read(cls, r: _Reader) -> AutocastUse:
        return cls(device_type=r.text("device_type"), dtype=r.text("dtype"), enabled=r.flag("enabled"), entered=r.count("entered"))


#: torch.compile modes that capture CUDA graphs
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class CompileUse:
    """``torch.compile`` (or ``Module.compile``) calls with one set of arguments at one site."""

    site: CodeSite | None
    target: str | None
    mode: str | None
    backend: str | None
    fullgraph: bool | None
    dynamic: bool | None
    disable: bool | None
    options: Mapping[str, Any]
    calls: int

    @classmethod
    def read(cls, r: _Reader) -> CompileUse:
        options = r.object("options") or {}
        return cls(
            site=CodeSite.read(r), target=r.text("target"), mode=r.text("mode"), backend=r.text("backend"),
            fullgraph=r.flag("fullgraph"), dynamic=r.flag("dynamic"), disable=r.flag("disable"),
            options={str(k): v for k, v in options.items() if v is None or isinstance(v, (bool, int, float, str))},
            calls=r.count("calls"),
        )

    @property
    def cuda_graphs(self) -> bool:
        """Whether this compile asks for CUDA graphs (its mode, or ``options={"triton.cudagraphs": True}``)."""
        return self.mode in CUDA_GRAPH_MODES or self.options.get("triton.cudagraphs") is True


@dataclass(frozen=True)
class MathFlags:
    """Precision and algorithm flags, as the program had them while it trained."""

    matmul_allow_tf32: bool | None = None
    matmul_fp32_precision: str | None = None
    float32_matmul_precision: str | None = None
    cudnn_allow_tf32: bool | None = None
    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    deterministic_algorithms: bool | None = None

    @classmethod
    def read(cls, r: _Reader) -> MathFlags:
        return cls(
            matmul_allow_tf32=r.flag("matmul_allow_tf32"), matmul_fp32_precision=r.text("matmul_fp32_precision"),
            float32_matmul_precision=r.text("float32_matmul_precision"), cudnn_allow_tf32=r.flag("cudnn_allow_tf32"),
            cudnn_benchmark=r.flag("cudnn_benchmark"), cudnn_deterministic=r.flag("cudnn_deterministic"),
            deterministic_algorithms=r.flag("deterministic_algorithms"),
        )

    @property
    def tf32_matmul(self) -> bool | None:
        """Whether fp32 matrix multiplies may use TF32 (either API says so), None when unknown."""
        said = [
            self.matmul_allow_tf32,
            None if self.float32_matmul_precision is None else self.float32_matmul_precision != "highest",
            None if self.matmul_fp32_precision in (None, "none") else self.matmul_fp32_precision == "tf32",
        ]
        known = [s for s in said if s is not None]
        return None if not known else any(known)


@dataclass(frozen=True)
class ModuleInfo:
    """A top-level module (the model, a loss module, a DDP or compiled wrapper) and its parameters."""

    name: str | None
    parameters: int


@dataclass(frozen=True)
class ModelInfo:
    """The parameters of the top-level modules (each parameter counted once)."""

    parameters: int
    trainable: int
    bytes: int
    dtypes: Mapping[str, int]
    devices: Mapping[str, int]
    modules: tuple[ModuleInfo, ...]

    @classmethod
    def read(cls, r: _Reader) -> ModelInfo:
        modules = tuple(
            ModuleInfo(name=m.text("class"), parameters=m.count("parameters"))
            for m in (r.child(raw, "modules") for raw in r.objects("modules"))
        )
        return cls(parameters=r.count("parameters"), trainable=r.count("trainable"), bytes=r.count("bytes"),
                   dtypes=r.counts("dtypes"), devices=r.counts("devices"), modules=modules)


@dataclass(frozen=True)
class DeviceMemory:
    """The process's CUDA device: what it is, its memory, and the caching allocator's peaks."""

    device: int | None
    name: str | None
    capability: str | None
    multiprocessors: int | None
    total_bytes: int | None
    free_bytes: int | None
    allocated_bytes: int | None
    reserved_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None

    @classmethod
    def read(cls, r: _Reader) -> DeviceMemory:
        return cls(
            device=r.integer("device"), name=r.text("name"), capability=r.text("capability"), multiprocessors=r.integer("multiprocessors"),
            **{k: r.integer(k) for k in ("total_bytes", "free_bytes", "allocated_bytes", "reserved_bytes",
                                      "peak_allocated_bytes", "peak_reserved_bytes")},
        )

    @property
    def headroom_bytes(self) -> int | None:
        """Device memory the program never reserved: total minus the allocator's reserved peak."""
        if self.total_bytes is None or self.peak_reserved_bytes is None:
            return None
        return max(self.total_bytes - self.peak_reserved_bytes, 0)

    @property
    def headroom(self) -> float | None:
        """:attr:`headroom_bytes` as a share of the device's memory."""
        room = self.headroom_bytes
        return None if room is None or not self.total_bytes else room / self.total_bytes


@dataclass(frozen=True)
class AllocatorInfo:
    """The CUDA caching allocator's settings (from the environment the program started with)."""

    caching: bool | None
    alloc_conf: str | None
    backend: str | None

    @classmethod
    def read(cls, r: _Reader) -> AllocatorInfo:
        return cls(caching=r.flag("caching"), alloc_conf=r.text("alloc_conf"), backend=r.text("backend"))


@dataclass(frozen=True)
class ProgramFacts:
    """What one rank's program built (fields in docs/capture.md, "What the program built")."""

    rank: int
    pid: int | None
    dataloaders: tuple[DataLoaderInfo, ...] = ()
    optimizers: tuple[OptimizerInfo, ...] = ()
    autocast: tuple[AutocastUse, ...] = ()
    compiles: tuple[CompileUse, ...] = ()
    cuda_graph_captures: int = 0
    cuda_graph_replays: int = 0
    math: MathFlags | None = None
    model: ModelInfo | None = None
    memory: DeviceMemory | None = None
    allocator: AllocatorInfo | None = None
    #: what the recorder itself said (a hook this torch could not take, say)
    notes: tuple[str, ...] = ()
    #: values that were malformed and read as unknown
    ignored: tuple[str, ...] = field(default=(), compare=False)

    def training_loader(self) -> DataLoaderInfo | None:
        """The DataLoader the training loop most likely uses: the one that gave the most batches,
        then the one iterated most; None when the program built none."""
        if not self.dataloaders:
            return None
        order = {id(d): i for i, d in enumerate(self.dataloaders)}
        return max(self.dataloaders, key=lambda d: (d.fetches, d.iterations, -order[id(d)]))

    @property
    def uses_autocast(self) -> bool:
        """Whether an enabled autocast region was entered."""
        return any(a.enabled is not False and a.entered for a in self.autocast)

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether the program captured CUDA graphs, or compiled in a mode that does."""
        return self.cuda_graph_captures > 0 or any(c.cuda_graphs for c in self.compiles)

    @classmethod
    def read(cls, raw: Mapping[str, Any], where: str = "program") -> ProgramFacts | None:
        """One rank's entry of the section (None when it names no rank)."""
        ignored: list[str] = []
        r = _Reader(raw, where, ignored)
        rank = r.integer("rank")
        if rank is None:
            return None

        def each(key: str, read: Callable[[_Reader], T]) -> tuple[T, ...]:
            return tuple(read(r.child(item, f"{key}[{i}]")) for i, item in enumerate(r.objects(key)))

        def one(key: str, read: Callable[[_Reader], T]) -> T | None:
            item = r.object(key)
            return None if item is None else read(r.child(item, key))

        graphs = one("cuda_graphs", lambda g: (g.count("captures"), g.count("replays"))) or (0, 0)
        said = raw.get("notes")
        notes = tuple(str(n) for n in said) if isinstance(said, list) else ()
        return cls(
            rank=rank, pid=r.integer("pid"),
            dataloaders=each("dataloaders", DataLoaderInfo.read), optimizers=each("optimizers", OptimizerInfo.read),
            autocast=each("autocast", AutocastUse.read), compiles=each("compile", CompileUse.read),
            cuda_graph_captures=graphs[0], cuda_graph_replays=graphs[1],
            math=one("math", MathFlags.read), model=one("model", ModelInfo.read), memory=one("memory", DeviceMemory.read),
            allocator=one("allocator", AllocatorInfo.read), notes=notes,
            ignored=tuple(ignored),  # complete: every argument above was read first
        )


def read_program(section: Any) -> dict[int, ProgramFacts]:
    """Rank → :class:`ProgramFacts` from ``metadata.json``'s ``program`` section (``{}`` for
    metadata without one, or one that is not an object of ``ranks``).  When two processes claim
    one rank, the first listed (lowest pid) is kept."""
    if not isinstance(section, dict):
        return {}
    entries = section.get("ranks")
    out: dict[int, ProgramFacts] = {}
    for i, raw in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(raw, dict):
            continue
        facts = ProgramFacts.read(raw, f"program.ranks[{i}]")
        if facts is not None and facts.rank not in out:
            out[facts.rank] = facts
    return out


__all__ = [
    "CUDA_GRAPH_MODES", "PROGRAM_VERSION", "AllocatorInfo", "AutocastUse", "CodeSite", "CompileUse", "DataLoaderInfo",
    "DeviceMemory", "MathFlags", "ModelInfo", "ModuleInfo", "OptimizerInfo", "ProgramFacts", "read_program",
]
