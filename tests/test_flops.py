"""FLOPs and bytes per operator: hand-computed cases and torch's own FlopCounterMode.

The torch tests run real operators on CPU under ``torch.profiler(record_shapes=True)``, read
the exported trace with tracekit, cost the outermost modelled operators from their recorded
shapes, and compare with ``torch.utils.flop_counter.FlopCounterMode`` counting the same
operators; they skip when torch is not installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit.analysis.efficiency import outermost_ops
from tracekit.analysis.flops import ShapeError, op_cost, op_costs


def _cost(name: str, dims: list[object], types: list[str] | None = None, concrete: list[str] | None = None):  # type: ignore[no-untyped-def]
    cost = op_cost(
        name, json.dumps(dims), json.dumps(types) if types else None, json.dumps(concrete) if concrete else None
    )
    assert cost is not None
    return cost


BF16, F32 = "c10::BFloat16", "float"


def test_gemm_by_hand() -> None:
    mm = _cost("aten::mm", [[64, 32], [32, 16]], [BF16, BF16])
    assert (mm.flops, mm.bytes, mm.dtype, (mm.m, mm.n, mm.k)) == (
        2 * 64 * 32 * 16,
        (64 * 32 + 32 * 16 + 64 * 16) * 2,
        "bf16",
        (64, 16, 32),
    )
    addmm = _cost("aten::addmm", [[16], [64, 32], [32, 16], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert addmm.flops == 2 * 64 * 32 * 16
    assert addmm.bytes == (16 + 64 * 32 + 32 * 16 + 64 * 16) * 4
    assert addmm.dtype == "fp32"
    bmm = _cost("aten::bmm", [[8, 64, 32], [8, 32, 16]], [BF16, BF16])
    assert bmm.flops == 2 * 8 * 64 * 32 * 16
    # linear: every leading dimension of the input is a row of the GEMM
    lin = _cost("aten::linear", [[4, 10, 32], [16, 32], [16]], [BF16, BF16, BF16])
    assert (lin.flops, lin.m, lin.n, lin.k) == (2 * 40 * 32 * 16, 40, 16, 32)
    # matmul broadcasts batch dimensions
    mat = _cost("aten::matmul", [[3, 1, 64, 32], [5, 32, 16]], [F32, F32])
    assert mat.flops == 2 * 15 * 64 * 32 * 16
    vec = _cost("aten::matmul", [[32], [32, 16]], [F32, F32])
    assert vec.flops == 2 * 32 * 16


def test_conv_by_hand() -> None:
    # 2x3x9x9 input, 6 filters of 3x3, stride 2, padding 1 -> 2x6x5x5 output
    conv = _cost(
        "aten::conv2d",
        [[2, 3, 9, 9], [6, 3, 3, 3], [], [], [], [], []],
        [F32, F32],
        ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"],
    )
    assert conv.flops == 2 * 2 * 6 * 3 * 9 * 25
    assert conv.bytes == (2 * 3 * 81 + 6 * 27 + 2 * 6 * 25) * 4
    # grouped: each filter sees C_in / groups channels (the weight's second dimension)
    grouped = _cost(
        "aten::conv2d",
        [[1, 8, 10, 10], [8, 2, 3, 3], [], [], [], [], []],
        [F32, F32],
        ["", "", "", "[1]", "[0]", "[1]", "4"],
    )
    assert grouped.flops == 2 * 1 * 8 * 2 * 9 * 64
    bwd = _cost(
        "aten::convolution_backward",
        [[2, 6, 5, 5], [2, 3, 9, 9], [6, 3, 3, 3], [], [], [], [], [], [], [], []],
        [F32, F32, F32],
        ["", "", "", "[0]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"],
    )
    assert bwd.flops == 2 * 2 * 6 * 3 * 9 * 25  # weight gradient only
    with pytest.raises(ShapeError, match="stride"):
        _cost("aten::conv2d", [[2, 3, 9, 9], [6, 3, 3, 3]], [F32, F32])


def test_attention_by_hand() -> None:
    fwd = _cost("aten::scaled_dot_product_attention", [[2, 4, 16, 8], [2, 4, 12, 8], [2, 4, 12, 8]], [BF16] * 3)
    assert fwd.flops == 2 * 2 * 4 * 16 * 12 * 8 * 2
    bshd = _cost("aten::_flash_attention_forward", [[2, 16, 4, 8], [2, 12, 4, 8], [2, 12, 4, 8]], [BF16] * 3)
    assert bshd.flops == fwd.flops
    bwd = _cost(
        "aten::_scaled_dot_product_efficient_attention_backward",
        [[2, 4, 16, 8], [2, 4, 16, 8], [2, 4, 12, 8], [2, 4, 12, 8]],
        [BF16] * 4,
    )
    # the scores are recomputed: 5 batched GEMMs against the forward's 2
    assert bwd.flops == 2 * 2 * 4 * 16 * 12 * 8 * 5


def test_elementwise_bytes_and_unknowns() -> None:
    add = _cost("aten::add", [[64, 128], [128], []], [BF16, BF16, "Scalar"])
    assert (add.flops, add.bytes, add.op_class) == (0, (64 * 128 + 128 + 64 * 128) * 2, "elementwise")
    inplace = _cost("aten::mul_", [[64, 128], [64, 128]], [F32, F32])
    assert inplace.bytes == 2 * 64 * 128 * 4
    # a tensor list records no dtype: bytes stay unknown rather than guessed
    cat = _cost("aten::cat", [[[1, 4], [1, 4]], []], ["TensorList", "Scalar"])
    assert cat.bytes is None
    assert op_cost("aten::view", "[[2, 3]]", '["float"]') is None
    with pytest.raises(ShapeError):
        op_cost("aten::mm", "[[2, 3], [4, 5]]", '["float", "float"]')
    costs = op_costs(
        pl.DataFrame(
            {
                "name": ["aten::mm", "aten::mm"],
                "input_dims": ["[[2, 3], [3, 5]]", "[[2, 3], [4, 5]]"],
                "input_types": ["", ""],
                "concrete_inputs": ["", ""],
            }
        )
    )
    assert costs["flops"].to_list() == [60, None]
    assert costs["cost_error"][1] is not None
    assert "inner dimensions" in costs["cost_error"][1]


def test_nvtx_range_names_give_shapes() -> None:
    """emit_nvtx(record_shapes=True) writes the shapes into the range name."""
    from parsers._nsight_nvtx import _NVTX_SIZES

    names = pl.Series(
        [
            "aten::mm, seq = 3, op_id = 7, sizes = [[64, 32], [32, 16]], input_op_ids = [(1, 0), (2, 0)]",
            "aten::add, op_id = 9, sizes = [[8], [], []]",
            "aten::view, op_id = 314290",
        ]
    )
    dims = names.str.extract(_NVTX_SIZES, 1).to_list()
    assert dims == ["[[64, 32], [32, 16]]", "[[8], [], []]", None]
    cost = op_cost(names[0], dims[0])
    assert cost is not None
    assert (cost.flops, cost.dtype, cost.bytes) == (2 * 64 * 32 * 16, None, None)


# --- truth: torch's FlopCounterMode on the same operators, run on CPU -----------------------

torch = pytest.importorskip("torch", reason="the FlopCounterMode cross-check needs torch (pip install torch)")


def _trace_flops(tmp_path: Path, fn: Callable[[], object]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    tables = tracekit.read_trace(path, cache=False)
    ops = outermost_ops(tables.events)
    sigs = ops.select(
        pl.col("_base").alias("name"),
        *[pl.col(c).fill_null("") for c in ("input_dims", "input_types", "concrete_inputs")],
    )
    costs = op_costs(sigs)
    assert (
        costs.filter(pl.col("op_class").is_in(["gemm", "conv", "attention"]) & pl.col("flops").is_null()).height == 0
    ), costs
    return int(costs["flops"].sum())


def _counted(fn: Callable[[], object]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


CASES: dict[str, Callable[[], Callable[[], object]]] = {}


def _case(fn: Callable[[], Callable[[], object]]) -> Callable[[], Callable[[], object]]:
    CASES[fn.__name__] = fn
    return fn


@_case
def gemms() -> Callable[[], object]:
    a, b, c = torch.randn(64, 48), torch.randn(48, 40), torch.randn(40)
    x, y = torch.randn(6, 33, 17), torch.randn(6, 17, 9)
    return lambda: (torch.mm(a, b), torch.addmm(c, a, b), torch.bmm(x, y), torch.baddbmm(torch.randn(6, 33, 9), x, y))


@_case
def matmul_broadcast() -> Callable[[], object]:
    a, b = torch.randn(3, 1, 20, 16), torch.randn(5, 16, 12)
    v = torch.randn(16)
    return lambda: (
        torch.matmul(a, b),
        torch.matmul(torch.randn(7, 20, 16), torch.randn(16, 4)),
        torch.matmul(v, torch.randn(16, 3)),
    )


@_case
def linear_training() -> Callable[[], object]:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8, bias=False))
    x = torch.randn(5, 7, 32)
    return lambda: model(x).square().mean().backward()


@_case
def conv_training() -> Callable[[], object]:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4),
    )
    x = torch.randn(2, 3, 17, 15)
    return lambda: model(x).sum().backward()


@_case
def conv_variants() -> Callable[[], object]:
    x1 = torch.randn(2, 4, 30)
    w1 = torch.randn(6, 4, 5)
    x3 = torch.randn(1, 2, 5, 6, 7)
    w3 = torch.randn(3, 2, 2, 3, 3)
    xt = torch.randn(2, 4, 6, 6)
    wt = torch.randn(4, 3, 3, 3)
    F = torch.nn.functional
    return lambda: (
        F.conv1d(x1, w1, stride=3, padding=2),
        F.conv3d(x3, w3, stride=(1, 2, 1)),
        F.conv_transpose2d(xt, wt, stride=2),
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_flops_equal_flop_counter(case: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    fn = CASES[case]()
    expected = _counted(fn)
    assert expected > 0
    assert _trace_flops(tmp_path, fn) == expected


@pytest.mark.parametrize("backward", [False, True])
def test_attention_equals_flop_counter(backward: bool) -> None:
    """The fused attention kernels (not run on CPU) counted on meta tensors of the same shapes."""
    from torch.utils.flop_counter import FlopCounterMode

    b, h, sq, sk, d = 2, 4, 16, 12, 8
    q = torch.empty(b, h, sq, d, device="meta")
    k = torch.empty(b, h, sk, d, device="meta")
    v = torch.empty(b, h, sk, d, device="meta")
    with FlopCounterMode(display=False) as counter:
        if backward:
            out = torch.empty(b, h, sq, d, device="meta")
            lse = torch.empty(b, h, sq, device="meta")
            torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                out,
                q,
                k,
                v,
                None,
                out,
                lse,
                torch.empty(2, dtype=torch.int64),
                torch.empty(0),
                0.0,
                [True, True, True, False],
            )
        else:
            torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, False)
    if backward:
        cost = _cost(
            "aten::_scaled_dot_product_efficient_attention_backward",
            [[b, h, sq, d], [b, h, sq, d], [b, h, sk, d], [b, h, sk, d]],
            [BF16] * 4,
        )
    else:
        cost = _cost(
            "aten::_scaled_dot_product_efficient_attention", [[b, h, sq, d], [b, h, sk, d], [b, h, sk, d]], [BF16] * 3
        )
    assert cost.flops == counter.get_total_flops()
