"""Peak throughput of common accelerators, keyed by the device name a trace records.

Every figure is the vendor's *dense* peak (no 2:4 structured sparsity) at boost clock, in
TFLOP/s, and the memory bandwidth in GB/s (10^9 bytes/s); sources are listed in
docs/efficiency.md.  ``fp32`` is the rate of an fp32 matrix multiply without TF32: the
CUDA-core rate on NVIDIA GPUs, the fp32 matrix-core rate on AMD Instinct GPUs.  ``tf32``,
``bf16`` (= fp16 with fp32 accumulation, which is what PyTorch uses) and ``fp8`` are the
tensor/matrix-core rates; ``None`` means the device has no such unit.

A device whose name matches no entry is *unknown*: :func:`device_peaks` returns ``None``
and callers say so; nothing is ever guessed from a similar name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: dtypes a peak is given for, as efficiency analyses name them
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class DevicePeaks:
    """One accelerator's dense peaks."""

    model: str
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    memory_gbps: float
    #: streaming multiprocessors / compute units (for wave quantisation)
    sm_count: int

    def tflops(self, dtype: str) -> float | None:
        """Peak TFLOP/s of a matrix multiply in ``dtype`` (fp16 shares the bf16 rate)."""
        if dtype == "fp32":
            return self.fp32_tflops
        if dtype == "tf32":
            return self.tf32_tflops
        if dtype in ("bf16", "fp16"):
            return self.bf16_tflops
        if dtype == "fp8":
            return self.fp8_tflops
        return None

    @property
    def tensor_cores(self) -> bool:
        """Whether a low-precision matrix unit makes fp32 GEMMs leave speed on the table."""
        return self.bf16_tflops is not None and self.bf16_tflops >= 2 * self.fp32_tflops


# (pattern on the device name, peaks); the first match wins, so specific names come first
_TABLE: tuple[tuple[str, DevicePeaks], ...] = (
    # NVIDIA data centre
    (r"V100S", DevicePeaks("V100S PCIe", 16.4, None, 130.0, None, 1134.0, 80)),
    (r"V100.*PCI", DevicePeaks("V100 PCIe", 14.0, None, 112.0, None, 900.0, 80)),
    (r"V100", DevicePeaks("V100 SXM2", 15.7, None, 125.0, None, 900.0, 80)),
    (r"A100.*80GB.*PCI|A100.*PCI.*80GB", DevicePeaks("A100 80GB PCIe", 19.5, 156.0, 312.0, None, 1935.0, 108)),
    (r"A100.*PCI", DevicePeaks("A100 40GB PCIe", 19.5, 156.0, 312.0, None, 1555.0, 108)),
    (r"A100.*80GB", DevicePeaks("A100 80GB SXM", 19.5, 156.0, 312.0, None, 2039.0, 108)),
    (r"A100", DevicePeaks("A100 40GB SXM", 19.5, 156.0, 312.0, None, 1555.0, 108)),
    (r"H100.*NVL", DevicePeaks("H100 NVL", 60.0, 417.5, 835.5, 1670.5, 3900.0, 132)),
    (r"H100.*PCI", DevicePeaks("H100 PCIe", 51.0, 378.0, 756.0, 1513.0, 2000.0, 114)),
    (r"H100", DevicePeaks("H100 SXM", 67.0, 494.7, 989.4, 1978.9, 3350.0, 132)),
    (r"H200", DevicePeaks("H200 SXM", 67.0, 494.7, 989.4, 1978.9, 4800.0, 132)),
    (r"B200", DevicePeaks("B200", 75.0, 1100.0, 2250.0, 4500.0, 7700.0, 148)),
    (r"L40S", DevicePeaks("L40S", 91.6, 183.0, 362.1, 733.0, 864.0, 142)),
    (r"\bL4\b", DevicePeaks("L4", 30.3, 60.0, 121.0, 242.5, 300.0, 58)),
    # NVIDIA GeForce (tensor rates with fp32 accumulation)
    (r"RTX 4090", DevicePeaks("GeForce RTX 4090", 82.6, 82.6, 165.2, 330.3, 1008.0, 128)),
    (r"RTX 4080", DevicePeaks("GeForce RTX 4080", 48.7, 48.7, 97.5, 194.9, 716.8, 76)),
    (r"RTX 3090", DevicePeaks("GeForce RTX 3090", 35.6, 35.6, 71.0, None, 936.0, 82)),
    (r"RTX 3080", DevicePeaks("GeForce RTX 3080", 29.8, 29.8, 59.5, None, 760.0, 68)),
    (r"RTX 2080 Ti", DevicePeaks("GeForce RTX 2080 Ti", 13.4, None, 53.8, None, 616.0, 68)),
    # AMD Instinct
    (r"MI300X", DevicePeaks("Instinct MI300X", 163.4, 653.7, 1307.4, 2614.9, 5300.0, 304)),
    # an MI250(X) is two dies (GCDs), each its own PyTorch device: the figures are per GCD
    (r"MI250X", DevicePeaks("Instinct MI250X (one GCD)", 47.9, None, 191.5, None, 1638.4, 110)),
    (r"MI250", DevicePeaks("Instinct MI250 (one GCD)", 45.3, None, 181.0, None, 1638.4, 104)),
    (r"MI210", DevicePeaks("Instinct MI210", 45.3, None, 181.0, None, 1638.4, 104)),
)
_COMPILED = tuple((re.compile(p, re.IGNORECASE), peaks) for p, peaks in _TABLE)


def device_peaks(name: str | None) -> DevicePeaks | None:
    """The peaks of the device called ``name`` in a trace, or ``None`` when it is not known."""
    if not name:
        return None
    for pattern, peaks in _COMPILED:
        if pattern.search(name):
            return peaks
    return None


def known_models() -> tuple[str, ...]:
    """Every model the table knows (for docs and error messages)."""
    return tuple(p.model for _, p in _TABLE)
