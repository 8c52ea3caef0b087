"""memory_summary(): the table PyTorch's torch.cuda.memory_summary prints,
computed from cachealloc's statistics."""
from __future__ import annotations

_WIDTH = 75


def _scale(n: int):
    """(value, unit) with the value below 1024 of its unit, PyTorch-style."""
    units = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, i = abs(n), 0
    while v >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    return int(v if n >= 0 else -v), units[i]


def _cell_bytes(n: int) -> str:
    v, u = _scale(n)
    return f"{v:6d} {u}"


def _cell_count(n: int) -> str:
    return f"{n:10d}"


def _line(char: str = "-") -> str:
    return "|" + char * _WIDTH + "|"


def _row(label: str, cells) -> str:
    return f"| {label:<21} | " + " | ".join(cells) + " |"


def format_summary(stats: dict, device: int, abbreviated: bool = False) -> str:
    """The summary table for one device's memory_stats dict."""
    rows = [
        _line("="),
        "|" + f"cachealloc CUDA memory summary, device ID {device}".center(_WIDTH) + "|",
        _line(),
        "|" + f"  CUDA OOMs: {stats['num_ooms']:<24d}|  cudaMalloc retries: {stats['num_alloc_retries']:<16d}"[:_WIDTH].ljust(_WIDTH) + "|",
        _line("="),
        _row("Metric", ["Cur Usage ", "Peak Usage", "Tot Alloc ", "Tot Freed "]),
        _line(),
    ]
    families = [
        ("allocated_bytes", "Allocated memory", True),
        ("active_bytes", "Active memory", True),
        ("requested_bytes", "Requested memory", True),
        ("reserved_bytes", "GPU reserved memory", True),
        ("inactive_split_bytes", "Non-releasable memory", True),
        ("allocation", "Allocations", False),
        ("active", "Active allocs", False),
        ("segment", "GPU reserved segments", False),
        ("inactive_split", "Non-releasable allocs", False),
    ]
    for key, label, is_bytes in families:
        cell = _cell_bytes if is_bytes else _cell_count
        pools = [("all", label)]
        if not abbreviated:
            pools += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        for pool, text in pools:
            p = f"{key}.{pool}."
            rows.append(_row(text, [cell(stats[p + "current"]), cell(stats[p + "peak"]),
                                    cell(stats[p + "allocated"]), cell(stats[p + "freed"])]))
        rows.append(_line())
    for key, label in [("oversize_allocations", "Oversize allocations"),
                       ("oversize_segments", "Oversize GPU segments")]:
        rows.append(_row(label, [_cell_count(stats[f"{key}.{f}"])
                                 for f in ("current", "peak", "allocated", "freed")]))
    rows.append(_line("="))
    return "\n".join(rows) + "\n"
