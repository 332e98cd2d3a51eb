"""What tracekit reads from a Kineto event, and what its category means.

The msgspec structs name every field the reader keeps (the native scanner,
``tracekit/native/_kineto_scan.c``, writes exactly these as columns); the args are grouped by
the category of the event that carries them, so each group's fields are decoded only from
the events that can have them.  The categories of every PyTorch vintage map to one canonical
kind; the common ones form one enum, so a chunk of them is coded by one cast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import msgspec
import polars as pl

from tracekit.schema import EVENT_KIND, EventKind, repeated

Num = Union[int, float, str, None]  # noqa: UP007 - msgspec needs a runtime union


class Event(msgspec.Struct, gc=False):
    """The fields every event needs; ``args`` stays undecoded until its group is known."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: Num = None
    dur: Num = None
    id: Num = None
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _Dim3(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A CUDA dim3 written as ``[x, y, z]``."""

    x: int = 0
    y: int = 1
    z: int = 1


_NO_DIM = _Dim3(0, 0, 0)


class _CollectiveArgs(msgspec.Struct, gc=False):
    """The collective's args, written both on its kernel (GPU side) and on its
    ``record_param_comms`` operator (CPU side)."""

    collective: Num = msgspec.field(default=None, name="Collective name")
    pg_name: Num = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Process Group Ranks")
    group_size: Num = msgspec.field(default=None, name="Group size")
    coll_seq: Num = msgspec.field(default=None, name="Seq")
    coll_seq_v2: Num = msgspec.field(default=None, name="seq")
    msg_elems: Num = msgspec.field(default=None, name="In msg nelems")


class _GpuArgs(_CollectiveArgs, gc=False):
    """Args of kernels, copies, memsets and sync rows."""

    external_id: Num = msgspec.field(default=None, name="External id")
    external_id_v1: Num = msgspec.field(default=None, name="external id")
    correlation: Num = None
    stream: Num = None
    device: Num = None
    bytes: Num = None
    kind_arg: Num = msgspec.field(default=None, name="kind")
    grid: _Dim3 = _NO_DIM
    block: _Dim3 = _NO_DIM
    registers: Num = msgspec.field(default=None, name="registers per thread")
    shared_memory: Num = msgspec.field(default=None, name="shared memory")
    occupancy: Num = msgspec.field(default=None, name="est. achieved occupancy %")
    sync_kind: Num = msgspec.field(default=None, name="cuda_sync_kind")
    wait_on_stream: Num = None
    wait_corr: Num = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")


class _LaunchArgs(msgspec.Struct, gc=False):
    """Args of runtime/driver calls."""

    external_id: Num = msgspec.field(default=None, name="External id")
    external_id_v1: Num = msgspec.field(default=None, name="external id")
    correlation: Num = None


class _OpArgs(_CollectiveArgs, gc=False):
    """Args of CPU operators and annotations."""

    external_id: Num = msgspec.field(default=None, name="External id")
    external_id_v1: Num = msgspec.field(default=None, name="external id")
    sequence_nr: Num = msgspec.field(default=None, name="Sequence number")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")


class _PyArgs(msgspec.Struct, gc=False):
    """Args of Python frames."""

    python_id: Num = msgspec.field(default=None, name="Python id")
    python_parent_id: Num = msgspec.field(default=None, name="Python parent id")


class _MemArgs(msgspec.Struct, gc=False):
    """Args of ``[memory]`` instants."""

    mem_device_type: Num = msgspec.field(default=None, name="Device Type")
    mem_device_id: Num = msgspec.field(default=None, name="Device Id")
    mem_addr: Num = msgspec.field(default=None, name="Addr")
    mem_bytes: Num = msgspec.field(default=None, name="Bytes")
    mem_total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    mem_total_reserved: Num = msgspec.field(default=None, name="Total Reserved")


class _MetaArgs(msgspec.Struct, gc=False):
    """Args of ``ph: M`` metadata (process_name, thread_name)."""

    label: Num = msgspec.field(default=None, name="name")


EVENTS_DECODER = msgspec.json.Decoder(list[Event])
#: arg group → (decoder, fields)
ARG_GROUPS: dict[str, tuple[msgspec.json.Decoder[Any], tuple[str, ...]]] = {
    name: (msgspec.json.Decoder(list[cls]), tuple(cls.__struct_fields__))  # type: ignore[valid-type]
    for name, cls in (
        ("gpu", _GpuArgs),
        ("launch", _LaunchArgs),
        ("op", _OpArgs),
        ("py", _PyArgs),
        ("mem", _MemArgs),
        ("meta", _MetaArgs),
    )
}
#: lower-cased category → arg group
CATEGORY_GROUP = {
    **dict.fromkeys(
        ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "cuda_sync", "xpu_sync", "mtia_ccp_events"), "gpu"
    ),
    **dict.fromkeys(
        ("cuda_runtime", "runtime", "cuda_driver", "mtia_runtime", "xpu_runtime", "xpu_driver",
         "privateuse1_runtime", "privateuse1_driver", "glow_runtime"),
        "launch",
    ),
    **dict.fromkeys(("cpu_op", "operator", "user_annotation", "gpu_user_annotation"), "op"),
    "python_function": "py",
}

BASE_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id")
INT_ARGS = frozenset(
    (
        "external_id", "external_id_v1", "correlation", "device", "bytes", "registers", "shared_memory",
        "wait_on_stream", "wait_corr", "sequence_nr", "python_id", "python_parent_id", "mem_device_type",
        "mem_device_id", "mem_addr", "mem_bytes", "mem_total_allocated", "mem_total_reserved", "stream",
        "group_size", "coll_seq", "coll_seq_v2", "msg_elems",
    )
)
STR_ARGS = frozenset(("kind_arg", "sync_kind", "collective", "label", "pg_name"))
#: every raw arg column, with its dtype (so chunks without a group still have the column)
ARG_DTYPES: dict[str, pl.DataType] = {}
for _decoder, _fields in ARG_GROUPS.values():
    for _f in _fields:
        if _f in INT_ARGS or _f in ("grid", "block"):
            ARG_DTYPES[_f] = pl.Int64()
        elif _f == "occupancy":
            ARG_DTYPES[_f] = pl.Float64()
        else:
            ARG_DTYPES[_f] = pl.String()

#: the columns of a decoded chunk, in order (:func:`raw_frame` and the native scanner)
RAW_COLUMNS = [
    "ph", "cat", "name", "pid", "pid_label", "tid", "tid_label", "ts", "dur", "id", "id_label", *ARG_DTYPES,
]

#: category (lower-cased) → canonical kind
_CATEGORY_KIND: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "python_function": EventKind.PYTHON,
    "cuda_runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "mtia_runtime": EventKind.RUNTIME,
    "xpu_runtime": EventKind.RUNTIME,
    "privateuse1_runtime": EventKind.RUNTIME,
    "glow_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "xpu_driver": EventKind.DRIVER,
    "privateuse1_driver": EventKind.DRIVER,
    "kernel": EventKind.KERNEL,
    "mtia_ccp_events": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "xpu_sync": EventKind.SYNC,
    "cpu_instant_event": EventKind.INSTANT,
    "overhead": EventKind.OVERHEAD,
}
KIND_OF_CATEGORY = {c: k.value for c, k in _CATEGORY_KIND.items()}


#: the categories of today's traces (the known ones, the flows', a few without a kind), and
#: each one's kind: a chunk with these alone is coded by one enum cast
COMMON_CATEGORIES = pl.Enum([*KIND_OF_CATEGORY, "ac2g", "fwdbwd", "async", "async_gpu", "async_cpu_to_gpu"])
COMMON_CATEGORY_KINDS = pl.Series(
    "kind", [KIND_OF_CATEGORY.get(c) for c in COMMON_CATEGORIES.categories], dtype=EVENT_KIND
)
#: the common categories the native scanner codes (``scan(..., categories)``: each row's
#: category as its position among them, what the enum cast gives)
COMMON_CATEGORY_NAMES = tuple(COMMON_CATEGORIES.categories.to_list())


#: each event kind's physical code in ``EVENT_KIND``
KIND_CODES = {kind: code for code, kind in enumerate(EVENT_KIND.categories.to_list())}


def kind_mask(codes: pl.Series, kinds: Sequence[str]) -> pl.Series:
    """Where the physical ``EVENT_KIND`` codes ``codes`` are one of ``kinds``."""
    return any_equal(codes, [KIND_CODES[kind] for kind in kinds])


def any_equal(column: pl.Series, values: Sequence[Any]) -> pl.Series:
    """Where ``column`` is one of ``values``, False where it is null (``is_in`` and a
    ``fill_null``, by native comparisons: the two are queries of their own)."""
    equal: pl.Series = column == values[0]
    for value in values[1:]:
        equal = equal | (column == value)
    if not equal.null_count():
        return equal
    # a null comparison (a null value) taken as False: the mask chooses itself where it
    # holds and the other side, all False, where it is False or null
    filled: pl.Series = equal.zip_with(equal, repeated(equal.name, False, pl.Boolean(), equal.len()))
    return filled
