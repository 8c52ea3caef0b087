// The engine's only view of a device: reserve and release whole segments,
// report capacity, and order work across streams with events.
//
// CUDA backends (bindings/) and the simulated device (simulated_device.h)
// implement this; the engine never includes a CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

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
};

}  // namespace cachealloc
