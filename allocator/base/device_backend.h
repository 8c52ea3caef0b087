// The engine's only view of a device: reserve and release whole segments,
// report capacity, and order work across streams with events.
//
// CUDA backends (bindings/) and the simulated device (simulated_device.h)
// implement this; the engine never includes a CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/base/page_handles.h"

namespace cachealloc {

// An opaque stream handle (a cudaStream_t's value); 0 is the default stream.
// Streams are ordered by this value, as native orders cudaStream_t pointers.
using StreamId = uintptr_t;
// An opaque event handle issued by the backend; 0 is never a valid event.
using EventId = uintptr_t;

struct DeviceMemoryInfo {
  size_t free_bytes = 0;   // free on the device now
  size_t total_bytes = 0;  // device capacity
};

// Where segments come from: the device itself (DeviceBackend), or, for a
// private pool made with an allocator of its own (PyTorch's
// MemPool(allocator=...)), that allocator's alloc and free functions.
class SegmentSource {
 public:
  virtual ~SegmentSource() = default;

  // Reserves `bytes` on `device` for use on `stream`. Returns the address, or
  // 0 when there is no room (the caller may free cache and retry).
  // Throws BackendError for any other failure.
  virtual uintptr_t allocate(int device, size_t bytes, StreamId stream) = 0;
  // Returns a segment obtained from allocate(). Throws BackendError.
  virtual void release(int device, uintptr_t address, size_t bytes) = 0;
};

class DeviceBackend : public SegmentSource {
 public:
  // Capacity and free bytes of `device`.
  virtual DeviceMemoryInfo memory_info(int device) = 0;

  // Records an event on `stream` after the work queued so far.
  virtual EventId record_event(int device, StreamId stream) = 0;
  // True once the work before the event has finished; does not block.
  virtual bool event_completed(EventId event) = 0;
  // Blocks until the event completes.
  virtual void synchronize_event(EventId event) = 0;
  // Returns the event to the backend (after it completed).
  virtual void destroy_event(EventId event) = 0;

  // Expandable segments (native's ExpandableSegment): one reserved virtual
  // range per segment, grown and shrunk by whole pages. Page sizes are
  // native's: 2 MiB for the small pool, 20 MiB for the large pool. A backend
  // without virtual memory management keeps the defaults, which throw.

  // Reserves `bytes` of virtual address space on `device` (no physical
  // memory), aligned to `alignment` bytes. Returns the base address. Throws
  // BackendError on failure.
  virtual uintptr_t reserve_address_range(int device, size_t bytes, size_t alignment) {
    (void)device, (void)bytes, (void)alignment;
    throw_no_expandable();
  }
  // Returns a range obtained from reserve_address_range (all its pages
  // unmapped first). Throws BackendError.
  virtual void release_address_range(int device, uintptr_t base, size_t bytes) {
    (void)device, (void)base, (void)bytes;
    throw_no_expandable();
  }
  // Creates and maps physical memory over [address, address + bytes)
  // (bytes is a multiple of page_bytes; the range lies in a reserved range
  // and is unmapped), in the handles page_handles.h lays out: one per page
  // of `page_bytes` (no cells, native), or first `cells` (each one handle)
  // and then one per page. Makes them accessible from `device` and its
  // peers. Returns false, with nothing from this call left mapped or
  // created, when the device has no room for all of them (native then takes
  // its OOM path). Throws BackendError for any other failure.
  virtual bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                         PageCells cells, StreamId stream) {
    (void)device, (void)address, (void)bytes, (void)page_bytes, (void)cells, (void)stream;
    throw_no_expandable();
  }
  // Waits for the work queued on `stream` (native synchronizes before
  // unmapping), then unmaps and releases the handles over
  // [address, address + bytes): all mapped, none crossing either end (each
  // of page_bytes or, with cells, cell_bytes). Throws BackendError.
  virtual void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                           size_t cell_bytes, StreamId stream) {
    (void)device, (void)address, (void)bytes, (void)page_bytes, (void)cell_bytes, (void)stream;
    throw_no_expandable();
  }

  // CUDA IPC of expandable segments (native's ExpandableSegment::share):
  // appends to `out` what another process needs to map the pages under
  // [address, address + bytes) of `device` (opaque bytes; the CUDA backend
  // writes native's) and returns the first shared page's address. Called
  // under the device's lock, so the pages cannot go meanwhile. Throws
  // BackendError; a backend without IPC keeps this default, which does.
  virtual uintptr_t share_pages(int device, uintptr_t address, size_t bytes, std::string* out) {
    (void)device, (void)address, (void)bytes, (void)out;
    throw BackendError("cachealloc: this device backend cannot share expandable segments");
  }

  // CUDA graph capture topology, for graph_capture_record_stream_reuse
  // (native's free markers). A node is an opaque id of a node of the graph
  // that a stream is capturing into. A backend without graphs keeps the
  // defaults: no stream is ever capturing, so no block freed during a
  // capture is reused before the capture ends.

  // Appends to `out` the nodes that work captured next on `stream` will
  // depend on (native: the capture's current dependencies, its
  // "terminals"; there may be none yet). False when `stream` is not
  // capturing. Throws BackendError.
  virtual bool capture_dependencies(int device, StreamId stream, std::vector<uint64_t>& out) {
    (void)device, (void)stream, (void)out;
    return false;
  }
  // True when every node of `nodes` is one of `stream`'s current capture
  // dependencies or an ancestor of one, so that all work captured on
  // `stream` from now on runs after them. False when `stream` is not
  // capturing. Throws BackendError.
  virtual bool capture_follows(int device, StreamId stream, const std::vector<uint64_t>& nodes) {
    (void)device, (void)stream, (void)nodes;
    return false;
  }

 private:
  [[noreturn]] static void throw_no_expandable() {
    throw BackendError("cachealloc: this device backend does not support expandable segments");
  }
};

}  // namespace cachealloc
