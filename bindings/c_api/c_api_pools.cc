// The C API's memory-pool calls (PyTorch's MemPool, CUDA graph pools and
// the cudagraph trees' checkpoints): argument checks and status codes over
// one device's engine, under its lock.
#include <cstdint>
#include <memory>
#include <string>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/base/strong_hash.h"
#include "bindings/c_api/c_api_internal.h"
#include "bindings/c_api/cachealloc.h"

using cachealloc::c_api::guarded;
using cachealloc::c_api::initialized_runtime;
using cachealloc::c_api::on_pool_device;

namespace {

// A pool's segments from another allocator's C functions
// (cachealloc_pool_create_with_allocator).
class ForeignAllocator final : public cachealloc::SegmentSource {
 public:
  ForeignAllocator(cachealloc_segment_alloc_fn alloc, cachealloc_segment_free_fn free,
                   std::shared_ptr<void> user)
      : alloc_(alloc), free_(free), user_(std::move(user)) {}

  uintptr_t allocate(int device, size_t bytes, cachealloc::StreamId stream) override {
    return reinterpret_cast<uintptr_t>(
        alloc_(user_.get(), bytes, device, reinterpret_cast<void*>(stream)));
  }
  void release(int device, uintptr_t address, size_t bytes) override {
    if (free_(user_.get(), reinterpret_cast<void*>(address), bytes, device) != 0)
      throw cachealloc::BackendError("a memory pool's allocator failed to free the segment at " +
                                     std::to_string(address) + " (" + std::to_string(bytes) +
                                     " bytes) on device " + std::to_string(device));
  }

 private:
  const cachealloc_segment_alloc_fn alloc_;
  const cachealloc_segment_free_fn free_;
  const std::shared_ptr<void> user_;
};

}  // namespace

// The opaque handle of cachealloc.h.
struct cachealloc_pool_checkpoint {
  cachealloc::PoolCheckpoint state;
};

extern "C" {

// --- Memory pools. Each runs on one device's engine under its lock.
int cachealloc_pool_create_or_incref(int device, uint64_t first, uint64_t second) {
  return on_pool_device(device, [&](auto& e) { e.create_or_incref_pool({first, second}); });
}

int cachealloc_pool_create_with_allocator(int device, uint64_t first, uint64_t second,
                                          cachealloc_segment_alloc_fn alloc,
                                          cachealloc_segment_free_fn free, void* user,
                                          void (*release_user)(void*)) {
  // Owns `user` from here on, whatever happens.
  std::shared_ptr<void> owned(user, [release_user](void* u) {
    if (release_user) release_user(u);
  });
  return on_pool_device(device, [&](auto& e) {
    if (!alloc || !free)
      throw std::invalid_argument("cachealloc_pool_create_with_allocator: NULL function");
    const cachealloc::PoolId id{first, second};
    if (e.has_pool(id))
      throw std::invalid_argument("cachealloc_pool_create_with_allocator: memory pool " +
                                  id.to_string() + " exists already on device " +
                                  std::to_string(device));
    e.create_or_incref_pool(id, std::make_shared<ForeignAllocator>(alloc, free, std::move(owned)));
  });
}

int cachealloc_pool_begin_allocate(int device, uint64_t first, uint64_t second,
                                   cachealloc_pool_filter filter, void* user,
                                   void (*release_user)(void*)) {
  // Owns `user` from here on, whatever happens.
  std::shared_ptr<void> owned(user, [release_user](void* u) {
    if (release_user) release_user(u);
  });
  cachealloc::PoolFilter accept;
  if (filter) {
    accept = [filter, owned](cachealloc::StreamId stream) {
      return filter(owned.get(), reinterpret_cast<void*>(stream)) != 0;
    };
  } else {
    accept = [thread = std::this_thread::get_id()](cachealloc::StreamId) {
      return std::this_thread::get_id() == thread;
    };
  }
  owned.reset();  // the filter holds it now (or nothing does)
  return on_pool_device(device, [&](auto& e) {
    e.begin_allocate_to_pool({first, second}, std::move(accept));
  });
}

int cachealloc_pool_end_allocate(int device, uint64_t first, uint64_t second) {
  return on_pool_device(device, [&](auto& e) { e.end_allocate_to_pool({first, second}); });
}

int cachealloc_pool_release(int device, uint64_t first, uint64_t second) {
  return on_pool_device(device, [&](auto& e) { e.release_pool({first, second}); });
}

int cachealloc_pool_use_count(int device, uint64_t first, uint64_t second, int* out) {
  return on_pool_device(device, [&](auto& e) {
    if (!out) throw std::invalid_argument("cachealloc_pool_use_count: out is NULL");
    *out = e.pool_use_count({first, second});
  });
}

int cachealloc_pool_set_use_on_oom(int device, uint64_t first, uint64_t second,
                                   int use_on_oom) {
  return on_pool_device(device,
                        [&](auto& e) { e.set_use_on_oom({first, second}, use_on_oom != 0); });
}

int cachealloc_pool_set_no_split(int device, uint64_t first, uint64_t second) {
  return on_pool_device(device, [&](auto& e) { e.set_no_split({first, second}); });
}

int cachealloc_empty_cache_pool(int device, uint64_t first, uint64_t second) {
  return guarded([&] {
    initialized_runtime().current().allocator.empty_cache(device, nullptr, {first, second});
  });
}

// --- Pool checkpoints.
int cachealloc_pool_checkpoint_save(int device, uint64_t first, uint64_t second,
                                    cachealloc_pool_checkpoint** out) {
  return guarded([&] {
    if (!out) throw std::invalid_argument("cachealloc_pool_checkpoint_save: out is NULL");
    auto saved = std::make_unique<cachealloc_pool_checkpoint>();
    saved->state = initialized_runtime().current().allocator.checkpoint_pool(
        device, {first, second});
    *out = saved.release();
  });
}

void cachealloc_pool_checkpoint_release(cachealloc_pool_checkpoint* checkpoint) {
  delete checkpoint;
}

int cachealloc_pool_checkpoint_restore(const cachealloc_pool_checkpoint* checkpoint,
                                       void (*on_freed)(void*, void*),
                                       void (*on_allocated)(void*, void*, size_t), void* user) {
  return guarded([&] {
    if (!checkpoint) throw std::invalid_argument("cachealloc_pool_checkpoint_restore: NULL");
    // Through on_allocator, as every call that allocates: a generation
    // retired meanwhile is not changed (the new one has no such pool).
    const auto restored = initialized_runtime().on_allocator(
        [&](cachealloc::CachingAllocator& a) { return a.restore_pool(checkpoint->state); });
    for (uintptr_t address : restored.freed)
      if (on_freed) on_freed(user, reinterpret_cast<void*>(address));
    for (const auto& [address, bytes] : restored.allocated)
      if (on_allocated) on_allocated(user, reinterpret_cast<void*>(address), bytes);
  });
}

int cachealloc_pool_live_allocations_match(int device, uint64_t first, uint64_t second,
                                           void* const* ptrs, size_t n, int* match) {
  return on_pool_device(device, [&](cachealloc::DeviceCachingAllocator& e) {
    if (!match || (n > 0 && !ptrs))
      throw std::invalid_argument("cachealloc_pool_live_allocations_match: NULL argument");
    cachealloc::StrongHashSet<uintptr_t> expected;
    for (size_t i = 0; i < n; ++i) expected.insert(reinterpret_cast<uintptr_t>(ptrs[i]));
    *match = e.pool_allocations_are({first, second}, expected) ? 1 : 0;
  });
}

}  // extern "C"
