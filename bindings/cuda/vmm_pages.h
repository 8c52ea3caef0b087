// The physical pages behind expandable segments, as native's
// ExpandableSegment (c10/cuda/CUDACachingAllocator.cpp, torch 2.11) creates,
// maps, shares access to and unmaps them: the bookkeeping behind
// DeviceBackend's reserve_address_range / map_pages / unmap_pages /
// release_address_range, over any VmmDriver.
//
// Per reserved range: its device, size, page size (fixed by the first
// growth: 2 MiB small pool, 20 MiB large pool) and the handle behind each
// mapped page (one per page, or one per cell: allocator/base/page_handles.h).
// Invariants: a page is mapped iff it lies in a handle from create();
// every mapped page is readable and writable from its range's device and
// from every peer added for that device (add_peer) before or after it was
// mapped; a range is freed only with no page mapped.
//
// As native:
//   - one cuMemCreate and one cuMemMap per page (a handle cannot be split
//     after mapping; per-page handles let any page be unmapped alone), then
//     one cuMemSetAccess over the new pages for the device and one per peer;
//     with cells (not native: the rescue policy), one create and one map
//     per cell instead of per page, and an unmapping must take whole
//     handles;
//   - pages are requested as shareable through a fabric handle first; the
//     first cuMemCreate refusal other than out-of-memory switches this
//     process to POSIX file descriptors for good (CUDAAllocatorConfig's handle type goes
//     UNSPECIFIED -> FABRIC, or -> POSIX_FD). With IPC handles off
//     (TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=0) pages request none;
//   - unmapping waits for the segment's stream first (cuMemUnmap and
//     cuMemRelease do not wait for kernels still using the memory).
// Unlike native, a growth that fails part way (cuMemCreate or cuMemMap out of
// memory, or any other failure) unmaps and releases everything it created
// before reporting: native releases the created handles only on a
// cuMemCreate out of memory and throws with pages mapped otherwise.
//
// Thread-safe: one mutex guards the bookkeeping (the engine calls under its
// device lock; add_peer comes from any thread). Not held while waiting for a
// stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bindings/cuda/vmm_driver.h"

namespace cachealloc {

class VmmPages {
 public:
  // `ipc_handles`: request shareable handles (native's default; false as
  // with TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=0). `driver` outlives this.
  VmmPages(VmmDriver& driver, bool ipc_handles);
  VmmPages(const VmmPages&) = delete;
  VmmPages& operator=(const VmmPages&) = delete;

  // DeviceBackend::reserve_address_range. Throws BackendError.
  uintptr_t reserve(int device, size_t bytes, size_t alignment);
  // DeviceBackend::release_address_range: `base` and `bytes` as reserved,
  // no page mapped. Throws BackendError naming the problem otherwise.
  void release(int device, uintptr_t base, size_t bytes);
  // DeviceBackend::map_pages. False (nothing left created or mapped) when the
  // device is out of memory; BackendError (likewise nothing left) for any
  // other failure or for a range that is not whole unmapped pages of a
  // range reserved on `device`.
  // `cells`: none (one handle per page) or the cells the mapping starts with.
  bool map(int device, uintptr_t address, size_t bytes, size_t page_bytes, PageCells cells = {});
  // DeviceBackend::unmap_pages: waits for `stream`, then unmaps and releases
  // each handle. Throws BackendError, before anything is unmapped, for
  // pages not mapped or a handle that crosses either end of the range.
  void unmap(int device, uintptr_t address, size_t bytes, size_t page_bytes, size_t cell_bytes,
             StreamId stream);

  // Gives `peer` access to every page of `device`, mapped now or later
  // (native's addPeerAccess). Adding a peer twice, or the device itself,
  // changes nothing.
  void add_peer(int device, int peer);

  // native: ExpandableSegment::share. Appends to `out` what another process
  // needs to map the pages under [address, address + bytes) (whole pages
  // around it, all mapped, each its own handle: cells cannot be written in
  // native's format, and are refused): native 2.11's bytes, a header {pid as 4 bytes
  // and 4 zero bytes, page size and page count as 8 bytes each} and each
  // page's exported handle (shared_pages.h reads them). Returns the
  // address of the first page shared. A page is exported once; a POSIX
  // descriptor stays open until its page is unmapped (the other process
  // copies it from this one by number). Throws BackendError.
  uintptr_t share(int device, uintptr_t address, size_t bytes, std::string* out);
  // The handle type shared pages are read as here: fabric where this
  // process created fabric pages, else POSIX descriptors (native reads them
  // by its own process's setting too).
  ShareableHandle import_type() const;

  // Observers for tests and messages.
  std::vector<int> peers(int device) const;
  size_t mapped_pages(int device) const;
  // Handles live on `device` (pages, or cells mapped as one handle).
  size_t live_handles(int device) const;
  size_t reserved_ranges() const;
  // The handle type the next growth requests (kFabric while untried).
  ShareableHandle handle_type() const;

 private:
  struct Range {
    int device = 0;
    size_t bytes = 0;
    size_t page_bytes = 0;          // 0 until the first growth
    std::vector<uint64_t> handles;  // per page; meaningful at a handle's first page
    // Per page, as long as `handles`: pages of the handle that starts at
    // this page (1 for a page's own handle), 0 elsewhere and where unmapped.
    std::vector<uint32_t> span;
    std::vector<bool> mapped;       // per page, as long as `handles`
    // Per page, as long as `handles`: its exported handle's bytes, empty
    // until shared; a POSIX descriptor is closed at the page's unmap.
    std::vector<std::string> exported;
    ShareableHandle type = ShareableHandle::kNone;  // of the mapped pages
  };
  enum class HandleChoice { kUntried, kFabric, kPosixFd, kNone };

  // The range holding [address, address + bytes) on `device`, checked to be
  // whole pages of `page_bytes`; throws BackendError naming the problem.
  Range& range_of(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                  uintptr_t* base);
  // One handle of a growth: where it is mapped, its bytes, the driver's id.
  struct Made {
    uintptr_t address;
    size_t bytes;
    uint64_t handle;
  };
  // Creates pages [first, last) of `range` as `type`, in the handles of
  // page_handles.h (`cells` first), maps them and sets access; on any
  // failure undoes all of it. kFailed leaves *error set, and *refused true
  // when cuMemCreate was the call that failed.
  VmmStatus grow(Range& range, uintptr_t base, size_t first, size_t last, size_t page_bytes,
                 PageCells cells, ShareableHandle type, std::string* error, bool* refused);
  // Undoes a failed growth: unmaps the first `mapped` of `made` and
  // releases all of them. Never throws: the failure being reported matters
  // more than one in the clean-up.
  void undo(int device, const std::vector<Made>& made, size_t mapped) noexcept;
  std::vector<int>& peers_of(int device);
  // Closes page `page`'s exported POSIX descriptor, if any, and forgets it.
  static void close_exported(Range& r, size_t page) noexcept;

  VmmDriver& driver_;
  mutable std::mutex mutex_;
  HandleChoice choice_;
  std::map<uintptr_t, Range> ranges_;          // by base address
  std::map<int, std::vector<int>> peers_;      // device -> devices given access
};

}  // namespace cachealloc
