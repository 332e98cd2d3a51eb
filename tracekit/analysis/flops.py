"""The performance model of one operator: FLOPs and bytes from recorded shapes and dtypes.

A ``record_shapes=True`` trace records each operator's input shapes (``Input Dims``), dtypes
(``Input type``) and scalar arguments (``Concrete Inputs``).  :func:`op_cost` turns one such
record into the work the operator does:

* **FLOPs** count a multiply-add as two operations, the convention of
  ``torch.utils.flop_counter.FlopCounterMode`` (the tests check every formula against it):
  GEMMs (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``), convolutions
  (forward and ``convolution_backward``), scaled-dot-product / flash / memory-efficient
  attention (forward and backward).  A bias add is not counted (FlopCounterMode does not).
* **Bytes** are the minimum traffic to device memory: every tensor input read once and the
  output written once.  Normalisations and elementwise operators have bytes only (their
  FLOPs are not model FLOPs); they are judged against memory bandwidth.

Shapes are parsed once per distinct (operator, shapes, dtypes, arguments) signature, never
per event: :func:`op_costs` maps a frame of signatures to a frame of costs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

#: Kineto ``Input type`` strings → (dtype as efficiency names it, bytes per element)
_DTYPES: dict[str, tuple[str, int]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
}

GEMM_OPS = frozenset(("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm"))
CONV_OPS = frozenset(
    ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
     "conv_transpose3d", "convolution_backward")
)  # fmt: skip
#: attention ops whose q/k/v are laid out (batch, heads, seq, dim)
ATTENTION_BHSD = frozenset(
    ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
     "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
)  # fmt: skip
ATTENTION_BHSD_BACKWARD = frozenset(f"{n}_backward" for n in ATTENTION_BHSD if n != "scaled_dot_product_attention")
#: the kernels' own entry points, laid out (batch, seq, heads, dim)
ATTENTION_BSHD = frozenset(("_flash_attention_forward", "_efficient_attention_forward"))
ATTENTION_BSHD_BACKWARD = frozenset(("_flash_attention_backward", "_efficient_attention_backward"))
ATTENTION_OPS = ATTENTION_BHSD | ATTENTION_BHSD_BACKWARD | ATTENTION_BSHD | ATTENTION_BSHD_BACKWARD
NORM_OPS = frozenset(
    ("layer_norm", "native_layer_norm", "native_layer_norm_backward", "rms_norm", "_fused_rms_norm", "group_norm",
     "native_group_norm", "native_group_norm_backward", "batch_norm", "_batch_norm_impl_index", "native_batch_norm",
     "cudnn_batch_norm", "miopen_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm_backward",
     "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "instance_norm", "softmax", "_softmax",
     "log_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data")
)  # fmt: skip
ELEMENTWISE_OPS = frozenset(
    ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "pow", "rsqrt", "sqrt", "exp", "log", "abs",
     "relu", "relu_", "gelu", "gelu_backward", "silu", "silu_", "silu_backward", "sigmoid", "sigmoid_backward", "tanh",
     "tanh_backward", "threshold_backward", "hardtanh", "hardtanh_backward", "leaky_relu", "where", "clamp", "clamp_",
     "masked_fill", "masked_fill_", "dropout", "native_dropout", "native_dropout_backward", "addcmul_", "addcdiv_",
     "lerp_", "sin", "cos", "erf", "reciprocal", "maximum", "minimum", "fill_", "zero_", "copy_", "clone",
     "_to_copy", "cat", "index_select", "embedding", "embedding_dense_backward", "sum", "mean", "amax", "max")
)  # fmt: skip

#: op class of every modelled operator (display order)
OP_CLASSES = ("gemm", "conv", "attention", "norm", "elementwise")


def op_class(name: str) -> str | None:
    """The class of an operator (``aten::`` prefix optional), or None when it is not modelled."""
    base = name.removeprefix("aten::")
    if base in GEMM_OPS:
        return "gemm"
    if base in CONV_OPS:
        return "conv"
    if base in ATTENTION_OPS:
        return "attention"
    if base in NORM_OPS:
        return "norm"
    if base in ELEMENTWISE_OPS:
        return "elementwise"
    return None


MODELLED_OPS = tuple(sorted(f"aten::{n}" for n in GEMM_OPS | CONV_OPS | ATTENTION_OPS | NORM_OPS | ELEMENTWISE_OPS))


@dataclass(frozen=True)
class OpCost:
    """The work of one operator call."""

    op_class: str
    flops: int
    #: None when a tensor's dtype is not recorded (tensor lists): bytes are never guessed
    bytes: int | None
    #: dtype the FLOPs run in (fp32, bf16, fp16, fp8...), None when not recorded
    dtype: str | None
    #: the problem size in words (``M=4096 N=4096 K=1024``), for evidence
    shape: str
    #: GEMM dimensions (batch folded into M), None for other classes
    m: int | None = None
    n: int | None = None
    k: int | None = None


class ShapeError(ValueError):
    """The recorded shapes do not fit the operator's signature."""


def _prod(xs: Sequence[int]) -> int:
    return math.prod(int(x) for x in xs)


def _is_shape(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(v, int) for v in x)


def _concrete(args: Sequence[Any], i: int) -> Any:
    """A concrete (scalar) argument, decoded ("[1, 1]" → [1, 1], "True" → True), else None."""
    if i >= len(args):
        return None
    text = args[i]
    if not isinstance(text, str) or text == "":
        return None
    low = text.strip()
    if low in ("True", "False"):
        return low == "True"
    try:
        return json.loads(low.replace("True", "true").replace("False", "false"))
    except ValueError:
        return None


def _bcast(a: Sequence[int], b: Sequence[int]) -> list[int]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return out[::-1]


def _gemm(base: str, dims: list[Any]) -> tuple[int, int, int, int, list[int]]:
    """(batch, M, N, K, output shape) of a GEMM-like call."""
    if base in ("mm", "_scaled_mm", "addmm"):
        a, b = (dims[1], dims[2]) if base == "addmm" else (dims[0], dims[1])
        (m, k), (k2, n) = a, b
        _same_k(k, k2, a, b)
        return 1, m, n, k, [m, n]
    if base in ("bmm", "baddbmm"):
        a, b = (dims[1], dims[2]) if base == "baddbmm" else (dims[0], dims[1])
        (batch, m, k), (_, k2, n) = a, b
        _same_k(k, k2, a, b)
        return batch, m, n, k, [batch, m, n]
    if base == "linear":
        x, w = dims[0], dims[1]
        if len(w) == 1:
            return 1, _prod(x[:-1]), 1, w[0], list(x[:-1])
        n, k = w
        return 1, _prod(x[:-1]), n, k, [*x[:-1], n]
    if base == "matmul":
        a, b = dims[0], dims[1]
        if len(a) == 1 and len(b) == 1:
            return 1, 1, 1, a[0], []
        a2 = [1, *a] if len(a) == 1 else a
        b2 = [*b, 1] if len(b) == 1 else b
        batch = _bcast(a2[:-2], b2[:-2])
        m, k, n = a2[-2], a2[-1], b2[-1]
        _same_k(k, b2[-2], a, b)
        out = [*batch, *([] if len(a) == 1 else [m]), *([] if len(b) == 1 else [n])]
        return _prod(batch), m, n, k, out
    raise ShapeError(f"not a GEMM: {base}")


def _same_k(k: int, k2: int, a: Any, b: Any) -> None:
    if k != k2:
        raise ShapeError(f"inner dimensions differ: {a} @ {b}")


def _conv_out(x: list[int], w: list[int], stride: Any, padding: Any, dilation: Any) -> list[int] | None:
    spatial = len(x) - 2
    if not all(isinstance(v, list) for v in (stride, padding, dilation)):
        return None
    s = stride * spatial if len(stride) == 1 else stride
    p = padding * spatial if len(padding) == 1 else padding
    d = dilation * spatial if len(dilation) == 1 else dilation
    out = [(x[2 + i] + 2 * p[i] - d[i] * (w[2 + i] - 1) - 1) // s[i] + 1 for i in range(spatial)]
    return [x[0], w[0], *out]


def _conv_flops(x: Sequence[int], w: Sequence[int], out: Sequence[int], transposed: bool) -> int:
    """2 × batch × C_out × C_in/groups × kernel × spatial (output spatial; input for transposed)."""
    spatial = (x if transposed else out)[2:]
    c_out, c_in, *kernel = w
    return 2 * x[0] * c_out * c_in * _prod(kernel) * _prod(spatial)


def _transpose01(s: Sequence[int]) -> list[int]:
    return [s[1], s[0], *s[2:]]


def _conv(base: str, dims: list[Any], args: list[Any]) -> tuple[int, list[int] | None, str]:
    """(FLOPs, output shape, shape words) of a convolution call."""
    if base == "convolution_backward":
        grad, x, w = dims[0], dims[1], dims[2]
        transposed = bool(_concrete(args, 7))
        mask = _concrete(args, 10)
        if not (isinstance(mask, list) and len(mask) >= 2):
            raise ShapeError("convolution_backward without its output_mask argument")
        flops = 0
        if mask[0]:
            flops += _conv_flops(grad, w, x, not transposed)
        if mask[1]:
            if transposed:
                flops += _conv_flops(_transpose01(grad), _transpose01(x), _transpose01(w), False)
            else:
                flops += _conv_flops(_transpose01(x), _transpose01(grad), _transpose01(w), False)
        return flops, None, f"x={x} w={w} grad={grad}"
    x, w = dims[0], dims[1]
    if base in ("conv1d", "conv2d", "conv3d"):
        transposed, stride, padding, dilation = False, _concrete(args, 3), _concrete(args, 4), _concrete(args, 5)
    elif base.startswith("conv_transpose"):
        transposed, stride, padding, dilation = True, None, None, None
    else:  # convolution / _convolution
        transposed = bool(_concrete(args, 6))
        stride, padding, dilation = _concrete(args, 3), _concrete(args, 4), _concrete(args, 5)
    if transposed:
        return _conv_flops(x, w, x, True), None, f"x={x} w={w} (transposed)"
    out = _conv_out(x, w, stride, padding, dilation)
    if out is None:
        raise ShapeError(f"{base} without its stride/padding/dilation arguments")
    return _conv_flops(x, w, out, False), out, f"x={x} w={w} out={out}"


def _attention(base: str, dims: list[Any]) -> tuple[int, str]:
    if base in ATTENTION_BHSD:
        q, k, v = dims[0], dims[1], dims[2]
        b, h, sq, d = q
        sk, dv = k[-2], v[-1]
        return 2 * b * h * sq * sk * d + 2 * b * h * sq * sk * dv, f"B={b} H={h} Sq={sq} Sk={sk} D={d}"
    if base in ATTENTION_BSHD:
        q, k, v = dims[0], dims[1], dims[2]
        b, sq, h, d = q
        sk, dv = k[1], v[-1]
        return 2 * b * h * sq * sk * d + 2 * b * h * sq * sk * dv, f"B={b} H={h} Sq={sq} Sk={sk} D={d}"
    if base in ATTENTION_BHSD_BACKWARD:
        q, k, v = dims[1], dims[2], dims[3]
        b, h, sq, d = q
        sk, dv = k[-2], v[-1]
    elif base in ATTENTION_BSHD_BACKWARD:
        q, k, v = dims[1], dims[2], dims[3]
        b, sq, h, d = q
        sk, dv = k[1], v[-1]
    else:
        raise ShapeError(f"not an attention op: {base}")
    # five batched GEMMs: the scores recomputed and grad_q, grad_k (inner size d); grad_scores
    # and grad_v (inner size d_v)
    return 2 * b * h * sq * sk * (3 * d + 2 * dv), f"B={b} H={h} Sq={sq} Sk={sk} D={d} (backward)"


def op_cost(
    name: str, dims_json: str | None, types_json: str | None = None, concrete_json: str | None = None
) -> OpCost | None:
    """The cost of one operator call from its recorded shapes; None when it is not modelled.

    Raises :class:`ShapeError` when the shapes are recorded but do not fit the operator.
    """
    base = name.split(", ", 1)[0].strip().removeprefix("aten::")
    cls = op_class(base)
    if cls is None or not dims_json:
        return None
    try:
        dims = json.loads(dims_json)
        types = json.loads(types_json) if types_json else []
        args = json.loads(concrete_json) if concrete_json else []
    except ValueError as exc:
        raise ShapeError(f"undecodable shapes: {exc}") from None
    if not isinstance(dims, list):
        raise ShapeError("shapes are not a list")
    types = types if isinstance(types, list) else []
    args = args if isinstance(args, list) else []
    tensors: list[tuple[list[int], str | None]] = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else None
        if t in ("Scalar", "ScalarList", "") or not isinstance(d, list):
            continue
        if _is_shape(d):
            if d or t in _DTYPES:  # an empty shape of no tensor dtype is a scalar/list argument
                tensors.append((d, t))
        elif all(_is_shape(x) for x in d):  # a tensor list (cat, stack): "TensorList" type
            tensors.extend((x, None) for x in d)
    known = [(d, _DTYPES[t]) for d, t in tensors if t in _DTYPES]
    dtype = None
    elt = 4
    if known:
        # the dtype of the largest floating input is the one the math runs in
        floating = [k for k in known if k[1][0] in ("fp32", "fp16", "bf16", "fp8", "fp64")] or known
        dtype, elt = max(floating, key=lambda k: _prod(k[0]))[1]
    read: int | None = sum(_prod(d) * _DTYPES[t][1] for d, t in tensors if t in _DTYPES)
    if dtype is None or any(t not in _DTYPES for _, t in tensors):
        read = None
    try:
        if cls == "gemm":
            batch, m, n, k, out = _gemm(base, dims)
            flops = 2 * batch * m * n * k
            words = (
                f"M={batch * m} N={n} K={k}" if base != "bmm" and base != "baddbmm" else f"B={batch} M={m} N={n} K={k}"
            )
            return OpCost(cls, flops, _plus(read, _prod(out) * elt), dtype, words, m=batch * m, n=n, k=k)
        if cls == "conv":
            flops, out_shape, words = _conv(base, dims, args)
            written = _prod(out_shape) * elt if out_shape is not None else 0
            return OpCost(cls, flops, _plus(read, written), dtype, words)
        if cls == "attention":
            flops, words = _attention(base, dims)
            q = dims[1] if base.endswith("_backward") else dims[0]
            return OpCost(cls, flops, _plus(read, _prod(q) * elt), dtype, words)
    except (TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, ShapeError):
            raise
        raise ShapeError(f"shapes {dims} do not fit aten::{base}") from None
    # normalisation / elementwise: bytes only; the output is the broadcast of the inputs
    shapes = [d for d, _ in tensors]
    if not shapes:
        return OpCost(cls, 0, 0, dtype, "")
    biggest = max(shapes, key=_prod)
    written = _prod(biggest) * elt
    if base.endswith("_") and base != "copy_":
        written = 0  # in place: the output is the first input, already counted
    return OpCost(cls, 0, _plus(read, written), dtype, str(biggest))


def _plus(read: int | None, written: int) -> int | None:
    return None if read is None else read + written


COST_SCHEMA = {
    "op_class": pl.String,
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "dtype": pl.String,
    "shape": pl.String,
    "m": pl.Int64,
    "n": pl.Int64,
    "k": pl.Int64,
    "cost_error": pl.String,
}


def op_costs(signatures: pl.DataFrame) -> pl.DataFrame:
    """Costs of distinct signatures: ``name, input_dims, input_types, concrete_inputs`` →
    the same columns plus :data:`COST_SCHEMA` (``cost_error`` says why a cost is missing)."""
    rows: dict[str, list[Any]] = {c: [] for c in COST_SCHEMA}
    for name, dims, types, concrete in signatures.select(
        "name", "input_dims", "input_types", "concrete_inputs"
    ).iter_rows():
        try:
            cost = op_cost(name, dims, types, concrete)
            error = None if cost is not None else "not modelled"
        except ShapeError as exc:
            cost, error = None, str(exc)
        rows["op_class"].append(cost.op_class if cost else op_class(name.split(", ", 1)[0].removeprefix("aten::")))
        rows["flops"].append(cost.flops if cost else None)
        rows["bytes"].append(cost.bytes if cost else None)
        rows["dtype"].append(cost.dtype if cost else None)
        rows["shape"].append(cost.shape if cost else None)
        rows["m"].append(cost.m if cost else None)
        rows["n"].append(cost.n if cost else None)
        rows["k"].append(cost.k if cost else None)
        rows["cost_error"].append(error)
    costs = pl.DataFrame(rows, schema=COST_SCHEMA)
    return pl.concat([signatures, costs], how="horizontal")
