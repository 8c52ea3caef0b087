"""memory_summary(): the table torch.cuda.memory_summary prints, computed
from cachealloc's statistics.

The formatting rules are native's (torch/cuda/memory.py: memory_summary and
its size and count formatting), so that the two tables are identical except
for the title, which names cachealloc. In particular, a row's unit is
chosen from the "all" row of its metric (the pool rows below it share it),
and a value moves to the next unit only once that row reaches 768 KiB (sizes)
or 750 K (counts); values are floored (1946 MiB stays "1946 MiB", not
"1 GiB")."""
from __future__ import annotations

_WIDTH = 75


def _format_size(size: int, unit_of: int) -> str:
    """size in the unit that suits unit_of, as native's _format_size."""
    prefix = "B  "
    for next_prefix in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if unit_of < 768 * 1024:
            break
        prefix = next_prefix
        size //= 1024
        unit_of /= 1024
    return f"{size:6d} {prefix}"


def _format_count(count: int, unit_of: int) -> str:
    """count in the unit (1, K, M) that suits unit_of, as native's _format_count."""
    prefix = " "
    for next_prefix in ("K", "M"):
        if unit_of < 750 * 1000:
            break
        prefix = next_prefix
        count //= 1000
        unit_of /= 1000
    return f"{count:7d} {prefix} "


_METRICS = [
    ("allocated_bytes", "Allocated memory", _format_size),
    ("active_bytes", "Active memory", _format_size),
    ("requested_bytes", "Requested memory", _format_size),
    ("reserved_bytes", "GPU reserved memory", _format_size),
    ("inactive_split_bytes", "Non-releasable memory", _format_size),
    ("allocation", "Allocations", _format_count),
    ("active", "Active allocs", _format_count),
    ("segment", "GPU reserved segments", _format_count),
    ("inactive_split", "Non-releasable allocs", _format_count),
]
_OVERSIZE = [
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize GPU segments"),
]
_FIELDS = ("current", "peak", "allocated", "freed")


def _row(label: str, cells) -> str:
    return f" {label:<21} | " + " | ".join(cells) + " "


def format_summary(stats: dict, device: int, abbreviated: bool = False) -> str:
    """The summary table for one device's memory_stats dict."""
    lines = [
        "=" * _WIDTH,
        f" {'':13} cachealloc CUDA memory summary, device ID {device:<17d} ",
        "-" * _WIDTH,
        f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: "
        f"{stats['num_alloc_retries']:<8d}  ",
        "=" * _WIDTH,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    for key, label, fmt in _METRICS:
        lines.append("-" * _WIDTH)
        pools = [("all", label)]
        if not abbreviated:
            pools += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        unit_of = [stats[f"{key}.all.{f}"] for f in _FIELDS]
        for pool, text in pools:
            values = [stats[f"{key}.{pool}.{f}"] for f in _FIELDS]
            lines.append(_row(text, [fmt(v, u) for v, u in zip(values, unit_of)]))
    for key, label in _OVERSIZE:
        lines.append("-" * _WIDTH)
        values = [stats[f"{key}.{f}"] for f in _FIELDS]
        lines.append(_row(label, [_format_count(v, v) for v in values]))
    lines.append("=" * _WIDTH)
    return "|" + "|\n|".join(lines) + "|\n"
