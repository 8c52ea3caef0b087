// How the pages of one mapping of an expandable segment are grouped into
// physical handles (cuMemCreate allocations): shared by the engine, which
// must never ask to unmap part of a handle, and by every backend, which
// creates, counts and checks them, so that all of them agree.
//
// A mapping is whole pages of `page_bytes` (2 MiB or 20 MiB; the engine's
// unit). Native makes one handle per page. A policy may ask for cells
// (rescue: 20 MiB over 2 MiB pages): the mapping's first `count` runs of
// `bytes` (a multiple of page_bytes above it) are one handle each, and every
// page after them (the ragged end) a handle of its own. So such a mapping
// costs one create and one map per cell plus per ragged page. A handle
// cannot be split once mapped (cuMemUnmap takes whole mappings), so an
// unmapping must start and end on handle boundaries.
// Units: bytes and addresses. Header-only, no CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachealloc {

// The cells at the start of a mapping: `count` handles of `bytes` each.
// {0, 0}: none (native).
struct PageCells {
  size_t bytes = 0;
  size_t count = 0;
};

// Whether `cells` fit a mapping of `bytes` in pages of `page_bytes`: none,
// or cells of a multiple of page_bytes above it, all inside the mapping.
inline bool valid_cells(size_t bytes, size_t page_bytes, PageCells cells) {
  if (cells.count == 0) return true;
  return page_bytes != 0 && cells.bytes > page_bytes && cells.bytes % page_bytes == 0 &&
         cells.count <= bytes / cells.bytes;
}

// Calls fn(handle_address, handle_bytes) for each handle of the mapping
// [address, address + bytes), in address order. Preconditions: bytes is
// whole pages; valid_cells(bytes, page_bytes, cells). O(handles).
template <typename Fn>
void for_each_page_handle(uintptr_t address, size_t bytes, size_t page_bytes, PageCells cells,
                          Fn&& fn) {
  uintptr_t p = address;
  for (size_t c = 0; c < cells.count; ++c, p += cells.bytes) fn(p, cells.bytes);
  for (; p < address + bytes; p += page_bytes) fn(p, page_bytes);
}

// The number of handles for_each_page_handle gives.
inline size_t page_handle_count(size_t bytes, size_t page_bytes, PageCells cells) {
  return cells.count + (bytes - cells.count * cells.bytes) / page_bytes;
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
