"""Device memory headroom: how much of each GPU the caching allocator used at its peak.

Needs ``[memory]`` events (``profile_memory=True``) or Nsight memory usage; without them
the headroom is unknown (None), never assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class MemoryHeadroom:
    device: int
    total_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None

    @property
    def headroom(self) -> float | None:
        """Unused share of device memory at the peak (reserved), 0..1, or None if unknown."""
        if not self.total_bytes or self.peak_reserved_bytes is None:
            return None
        return max(0.0, 1.0 - self.peak_reserved_bytes / self.total_bytes)


def memory_headroom(memory: pl.DataFrame, devices: pl.DataFrame) -> list[MemoryHeadroom]:
    gpu = memory.filter(pl.col("device") >= 0)
    if gpu.height == 0:
        return []
    peaks = gpu.group_by("device").agg(
        pl.col("total_allocated_bytes").max().alias("alloc"), pl.col("total_reserved_bytes").max().alias("reserved")
    ).sort("device")
    totals = dict(devices.select("device", "total_memory_bytes").iter_rows())
    return [
        MemoryHeadroom(device=int(d), total_bytes=totals.get(d), peak_allocated_bytes=a, peak_reserved_bytes=r)
        for d, a, r in peaks.iter_rows()
    ]
