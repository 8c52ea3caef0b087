// The allocator a process uses: one DeviceCachingAllocator per device, a
// pointer table per device, and a lock per device. Thread-safe.
//
// Costs: allocate/deallocate take the device's lock once and do O(log n)
// work in the number of cached blocks, plus a hash-table probe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/front/device_directory.h"
#include "allocator/front/device_mutex.h"
#include "allocator/base/hot_inline.h"
#include "allocator/front/pointer_table.h"

namespace cachealloc {

class CachingAllocator {
 public:
  // One backend per device, indexed by device number; not owned, must
  // outlive the allocator.
  // `policy`: the placement policy every device's engine runs, by name
  // (policy/policy_registry.h; "native" or "": none). Throws ConfigError
  // for an unknown name, listing the known ones.
  CachingAllocator(const AllocatorConfig& config,
                   const std::vector<DeviceBackend*>& backends,
                   std::string_view policy = "native");

  int device_count() const { return static_cast<int>(device_count_); }
  // The config in force (a copy: apply_settings may replace it meanwhile).
  AllocatorConfig config() const {
    std::lock_guard<std::mutex> lock(config_mutex_);
    return config_;
  }
  // Run-time settings (torch.cuda.memory._set_allocator_settings): the
  // config in force updated by AllocatorConfig::with_settings(text), put in
  // force on every device for later requests. All or nothing: the text is
  // checked whole first (ConfigError, nothing changes), then every device's
  // lock is held while the new config is set, so no request sees a mix of
  // old and new settings across devices. Returns the new config.
  AllocatorConfig apply_settings(std::string_view text);

  // Returns the address of at least `size` bytes on `device` usable on
  // `stream`; 0 for size 0 (as PyTorch, no block is made). Throws
  // OutOfMemoryError, SizeOverflowError, BackendError, or
  // std::out_of_range for a bad device index.
  uintptr_t allocate(size_t size, int device, StreamId stream, const ContextPtr& context);
  // Takes back an address from allocate(); 0 is ignored. `device` is where
  // to look first (-1: search all). Throws InvalidPointerError for an
  // address this allocator does not hold; nothing changes then.
  void deallocate(uintptr_t address, int device, const ContextPtr& context);
  // The same without a caller context (the common case: history off).
  // Overloads, not a default `= nullptr`, which would build and destroy a
  // temporary ContextPtr in the caller on every call: these pass a null
  // one that the allocator keeps.
  uintptr_t allocate(size_t size, int device, StreamId stream) {
    return allocate(size, device, stream, no_context_);
  }
  void deallocate(uintptr_t address, int device = -1) {
    deallocate(address, device, no_context_);
  }
  // See DeviceCachingAllocator::record_stream. Throws InvalidPointerError.
  void record_stream(uintptr_t address, StreamId stream);
  // Bytes of the block behind an address; throws InvalidPointerError.
  size_t block_size(uintptr_t address) { return block_info(address).size; }
  struct BlockInfo {
    size_t size = 0;  // bytes, rounded (as statistics count them)
    int device = 0;   // the device whose pool holds the block
  };
  // Size and device of the block behind an address; throws
  // InvalidPointerError.
  BlockInfo block_info(uintptr_t address);
  // Segment start and size for an address; throws InvalidPointerError.
  uintptr_t base_allocation(uintptr_t address, size_t* segment_bytes);
  // CUDA IPC of a block in an expandable segment, under its device's lock
  // (DeviceBackend::share_pages): false when the block at `address` is in
  // no expandable segment; else the description is appended to `out` and
  // *offset is the block's offset from the first shared page. Throws
  // InvalidPointerError, BackendError.
  bool share_expandable(uintptr_t address, std::string* out, size_t* offset);

  // device -1: every device. `pool`: see DeviceCachingAllocator::empty_cache.
  void empty_cache(int device = -1, const ContextPtr& context = nullptr, PoolId pool = {});
  // Retires the allocator if no block is in use on any device (allocated,
  // or freed but waiting for stream events): every later allocate and
  // pointer lookup throws AllocatorRetired without changing anything.
  // Returns false, changing nothing, if a block is in use. Holds every
  // device's lock throughout, so no call can slip in between the check and
  // the retirement. May throw std::bad_alloc before taking any lock
  // (nothing changes then); cannot fail otherwise. Cached segments stay until
  // empty_cache(), which still works, as do reads (with_device). For
  // replacing the allocator under callers that may still hold it (the
  // runtime's re-initialization); the object must then stay alive.
  bool retire_if_idle();
  void set_memory_fraction(double fraction, int device);

  // Pool checkpoints for PyTorch's cudagraph trees: see
  // DeviceCachingAllocator::checkpoint_pool and restore_pool, whose errors
  // these throw (and std::out_of_range for a bad device; restore_pool
  // AllocatorRetired after retire_if_idle). restore_pool keeps the pointer
  // table in step: the freed addresses leave it (a later deallocate of one
  // is refused as unknown), the restored allocations enter it, also when
  // host memory runs out part way.
  PoolCheckpoint checkpoint_pool(int device, PoolId id, const ContextPtr& context = nullptr);
  struct RestoredPool {
    std::vector<uintptr_t> freed;                        // addresses
    std::vector<std::pair<uintptr_t, size_t>> allocated;  // (address, bytes)
  };
  RestoredPool restore_pool(const PoolCheckpoint& checkpoint,
                            const ContextPtr& context = nullptr);

  // Runs fn(DeviceCachingAllocator&) with the device's lock held: the way
  // to read state (snapshots) or attach observers consistently.
  template <typename Fn>
  auto with_device(int device, Fn&& fn) {
    Device& d = at(device);
    std::lock_guard<DeviceMutex> lock(d.mutex);
    return fn(d.engine);
  }

 private:
  // The engine is a member, not behind a pointer: one load less per call.
  struct Device {
    Device(int device, const AllocatorConfig& config, DeviceBackend& backend,
           std::unique_ptr<PlacementPolicy> policy)
        : engine(device, config, backend, std::move(policy)) {}
    DeviceMutex mutex;
    DeviceCachingAllocator engine;
    PointerTable blocks;  // allocated blocks, by address
    // Set (under mutex) by retire_if_idle; never cleared. allocate checks
    // it under the lock. Pointer lookups need no check on their fast path:
    // a retired device holds no allocated block, so they all miss.
    bool retired = false;
  };
  Device& at(int device) {
    if (static_cast<unsigned>(device) >= device_count_) [[unlikely]] bad_device(device);
    return *devices_[static_cast<size_t>(device)];
  }
  [[noreturn]] void bad_device(int device) const;
  // Finds the device holding `address` and runs fn(device, block) locked;
  // with `take`, the address leaves the device's table first. Looks on
  // device `hint` first (unless -1: then on the device directory_ names),
  // then on the others, teaching directory_ where it was found; throws
  // InvalidPointerError naming `what` when no device holds it.
  template <typename Fn>
  CACHEALLOC_HOT_INLINE void with_block(uintptr_t address, int hint, bool take,
                                        const char* what, Fn&& fn);
  // with_block's steps: one device (false if it does not hold `address`),
  // inline, as deallocate's common case; and the search of the others, out
  // of line.
  template <typename Fn>
  CACHEALLOC_HOT_INLINE bool with_block_on(Device& d, uintptr_t address, bool take, Fn& fn);
  template <typename Fn>
  [[gnu::noinline]] void with_block_elsewhere(uintptr_t address, int hint, bool take,
                                              const char* what, Fn& fn);

  [[noreturn]] static void throw_retired();
  // restore_pool's repair of the table after a failure part way.
  void resync_pool_table(Device& d, PoolId pool, const std::vector<uintptr_t>& held) noexcept;

  // Guarded by config_mutex_ (taken before any device lock).
  mutable std::mutex config_mutex_;
  AllocatorConfig config_;
  std::vector<std::unique_ptr<Device>> devices_;
  // devices_.size(), kept for at()'s bounds check: a compare with a member
  // instead of a subtraction and shift of the vector's bounds.
  unsigned device_count_ = 0;
  const ContextPtr no_context_;  // always null
  // Where device-less frees look first (see DeviceDirectory): what keeps
  // them O(1) in the device count.
  DeviceDirectory directory_;
};

}  // namespace cachealloc
