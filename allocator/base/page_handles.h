// How the pages of one mapping of an expandable segment are grouped into
// physical handles (cuMemCreate allocations): shared by the engine, which
// must never ask to unmap part of a handle, and by every backend, which
// creates, counts and checks them, so that all of them agree.
//
// A mapping is whole pages of `page_bytes` (2 MiB or 20 MiB; the engine's
// unit). Native makes one handle per page (cell_bytes 0). With cells
// (cell_bytes a multiple of page_bytes above it, a policy's choice, e.g.
// rescue's 20 MiB over 2 MiB pages), the address range is cut into cells of
// cell_bytes counted from the reserved range's base; a cell that the
// mapping covers whole is one handle, and every other page of the mapping
// (the ragged ends) is a handle of its own. So a mapping costs one create
// and one map per cell plus per ragged page, and a handle never crosses a
// cell boundary. A handle cannot be split once mapped (cuMemUnmap takes
// whole mappings), so an unmapping must start and end on handle
// boundaries: page boundaries outside cells mapped whole, cell boundaries
// inside them.
// Units: bytes and addresses. Header-only, no CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachealloc {

// Whether `cell_bytes` is a usable cell size for pages of `page_bytes`:
// 0 (no cells), or a multiple of page_bytes larger than it.
inline bool valid_cell_bytes(size_t page_bytes, size_t cell_bytes) {
  return cell_bytes == 0 ||
         (page_bytes != 0 && cell_bytes > page_bytes && cell_bytes % page_bytes == 0);
}

// Calls fn(handle_address, handle_bytes) for each handle of the mapping
// [address, address + bytes) of a range reserved at `base`, in address
// order. Preconditions: address - base and bytes are whole pages;
// valid_cell_bytes(page_bytes, cell_bytes). O(handles).
template <typename Fn>
void for_each_page_handle(uintptr_t base, uintptr_t address, size_t bytes, size_t page_bytes,
                          size_t cell_bytes, Fn&& fn) {
  const uintptr_t end = address + bytes;
  uintptr_t p = address;
  while (p < end) {
    const bool whole_cell =
        cell_bytes != 0 && (p - base) % cell_bytes == 0 && end - p >= cell_bytes;
    const size_t h = whole_cell ? cell_bytes : page_bytes;
    fn(p, h);
    p += h;
  }
}

// The number of handles for_each_page_handle gives.
inline size_t page_handle_count(uintptr_t base, uintptr_t address, size_t bytes,
                                size_t page_bytes, size_t cell_bytes) {
  size_t n = 0;
  for_each_page_handle(base, address, bytes, page_bytes, cell_bytes,
                       [&n](uintptr_t, size_t) { ++n; });
  return n;
}

// The driver calls behind expandable segments' pages, as the CUDA backend
// makes them (bindings/cuda/vmm_pages.h): per handle one cuMemCreate and
// one cuMemMap to map it, one cuMemUnmap and one cuMemRelease to unmap it;
// per mapping one cuMemSetAccess (per accessing device); per unmapping one
// stream synchronization first. Simulated devices count them so that the
// lab can tell a policy's page cost without a GPU.
struct PageCalls {
  size_t creates = 0;
  size_t maps = 0;
  size_t unmaps = 0;
  size_t releases = 0;
  size_t set_access = 0;
  size_t syncs = 0;
  // Every call above: what a step pays in driver calls for its pages.
  size_t total() const { return creates + maps + unmaps + releases + set_access + syncs; }
  PageCalls operator-(const PageCalls& o) const {
    return {creates - o.creates, maps - o.maps,           unmaps - o.unmaps,
            releases - o.releases, set_access - o.set_access, syncs - o.syncs};
  }
};

}  // namespace cachealloc
