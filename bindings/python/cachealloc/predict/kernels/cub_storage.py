"""How many bytes of temporary storage CUB asks for, as torch's CUDA kernels
call it.

torch's wrappers (ATen/cuda/cub.cuh, CUB_WRAPPER) call a CUB device
algorithm twice: first with no storage, so CUB reports
`temp_storage_bytes`, then with a block of exactly that many bytes from the
caching allocator, freed when the wrapper returns. torch 2.11+cu130 builds
with the CCCL of CUDA 13.0 (CCCL 3.0); the rules and tunings below are
read from that release's CUB (util_temporary_storage.cuh,
dispatch_radix_sort.cuh, single_pass_scan_operators.cuh, dispatch_scan.cuh,
dispatch_unique_by_key.cuh and the tuning_*.cuh policies). All sizes are
bytes.

Common rule (AliasTemporaries): one blob holds several sub-allocations,
each rounded up to 256 B, plus 255 B so the blob's start can be aligned.

Checked against the H200 recording of GPT-2 small (4,096 int64 token ids):
the radix sort's 83,455 B and the two decoupled-look-back scans' 1,279 B
each. Other sizes and GPUs follow the same source but are unchecked; the
unique-by-key and scan tile sizes are CCCL 3.0's sm90 tunings, used for
every GPU (they only move the ~1 KiB tile-state block, in 256-byte steps).
"""
from __future__ import annotations

ALIGN = 256
WARP_THREADS = 32          # TILE_STATUS_PADDING: tile states before the first tile


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def alias_temporaries(sizes) -> int:
    """Bytes of one blob holding `sizes` (each 256-aligned) + 255."""
    return sum(_round_up(s, ALIGN) for s in sizes) + ALIGN - 1


# --- DeviceRadixSort::SortPairs ----------------------------------------------

def _reg_bound_items(nominal_items: int, dominant_bytes: int) -> int:
    """RegBoundScaling::ITEMS_PER_THREAD: a 4-byte nominal count scaled to
    the dominant (larger of key, value) type."""
    return max(1, nominal_items * 4 // max(4, dominant_bytes))


def _radix_policy(capability, key_bytes: int, value_bytes: int, offset_bytes: int):
    """(single-tile items, onesweep threads, onesweep items per thread) of
    the CUB policy the GPU's architecture selects, keys of 4 or 8 bytes."""
    dominant = max(key_bytes, value_bytes)
    single_tile = 256 * _reg_bound_items(19, dominant)       # every policy from sm70 on
    sm = capability[0] * 10 + capability[1]
    if sm >= 90:
        # OnesweepLargeKeyPolicy (Policy900 and Policy1000 alike for 4/8-byte keys)
        if key_bytes == 4:
            if value_bytes < 8:
                nominal = 17 if offset_bytes == 8 else 23
            else:
                nominal = 29 if offset_bytes == 8 else 30
        else:
            nominal = 30 if value_bytes < 8 else 24
        threads = 384
    elif sm >= 80:
        nominal = 17 if (offset_bytes == 8 and key_bytes == 4) else 21
        threads = 384
    elif sm >= 70:
        nominal = 46 if (key_bytes == 4 and value_bytes == 4) else 23
        threads = 256
    else:
        raise ValueError(f"CUB radix-sort storage is modelled from compute capability 7.0 on, "
                         f"not {capability[0]}.{capability[1]}")
    return single_tile, threads, _reg_bound_items(nominal, dominant)


def radix_sort_pairs_bytes(num_items: int, key_bytes: int, value_bytes: int, capability,
                           begin_bit: int = 0, end_bit: int | None = None,
                           offset_bytes: int = 8) -> int:
    """temp_storage_bytes of DeviceRadixSort::SortPairs (not overwriting
    its input, as torch calls it). offset_bytes: 8 when num_items is an
    int64 (torch passes one), 4 for int. Onesweep path (4- and 8-byte keys
    on sm70+): histograms of every pass, one look-back row per thread
    block, alternate key and value buffers, one counter per pass."""
    if end_bit is None:
        end_bit = key_bytes * 8
    if num_items == 0 or begin_bit == end_bit:
        return 1
    single_tile, threads, items = _radix_policy(capability, key_bytes, value_bytes, offset_bytes)
    if num_items <= single_tile:
        return 1                   # one thread block sorts it: CUB asks for 1 byte
    radix_bits = 8
    digits = 1 << radix_bits
    tile = threads * items
    portion = ((1 << 28) - 1) // tile * tile
    passes = _ceil_div(end_bit - begin_bit, radix_bits)
    portions = _ceil_div(num_items, portion)
    blocks = _ceil_div(min(num_items, portion), tile)
    return alias_temporaries([
        portions * passes * digits * offset_bytes,            # bins
        blocks * digits * 4,                                  # look-back (int)
        0 if passes <= 1 else num_items * key_bytes,          # alternate keys
        0 if passes <= 1 else num_items * value_bytes,        # alternate values
        portions * passes * 4,                                # counters (int)
    ])


# --- Decoupled look-back scans (DeviceScan, DeviceSelect::UniqueByKey) -------

def tile_state_bytes(num_tiles: int, value_bytes: int) -> int:
    """ScanTileState<T>::AllocationSize for a primitive T of value_bytes:
    one status+value word per tile (16 B for 8-byte T, 8 B for 4-byte),
    WARP_THREADS padding tiles first, aliased as one blob."""
    word = 16 if value_bytes == 8 else 8 if value_bytes == 4 else 4
    return alias_temporaries([(num_tiles + WARP_THREADS) * word, 0, 0])


def exclusive_sum_bytes(num_items: int, value_bytes: int) -> int:
    """DeviceScan::ExclusiveSum of primitive integers (sm90 tuning: 224
    threads x 24 items for 8-byte, 128 x 24 for 4-byte accumulators)."""
    tile = 224 * 24 if value_bytes == 8 else 128 * 24
    tiles = _ceil_div(num_items, tile)
    return alias_temporaries([tile_state_bytes(tiles, value_bytes)])


def unique_by_key_bytes(num_items: int, key_bytes: int, offset_bytes: int = 8) -> int:
    """DeviceSelect::UniqueByKey with int values (sm90 tuning: 640 x 7 for
    8-byte keys, 512 x 14 for 4-byte); its tile state counts selections in
    the offset type (8 bytes for an int64 num_items); no virtual shared
    memory (vsmem) block."""
    tile = 640 * 7 if key_bytes == 8 else 512 * 14
    tiles = _ceil_div(num_items, tile)
    return alias_temporaries([tile_state_bytes(tiles, offset_bytes), 0])
