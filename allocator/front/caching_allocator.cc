#include "allocator/front/caching_allocator.h"

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/base/strong_hash.h"
#include "allocator/base/errors.h"
#include "allocator/policy/policy_registry.h"

namespace cachealloc {

CachingAllocator::CachingAllocator(const AllocatorConfig& config,
                                   const std::vector<DeviceBackend*>& backends,
                                   std::string_view policy)
    : config_(config) {
  for (size_t i = 0; i < backends.size(); ++i)
    devices_.push_back(std::make_unique<Device>(static_cast<int>(i), config_, *backends[i],
                                                make_policy(policy)));
  device_count_ = static_cast<unsigned>(devices_.size());
}

AllocatorConfig CachingAllocator::apply_settings(std::string_view text) {
  std::lock_guard<std::mutex> config_lock(config_mutex_);
  AllocatorConfig next = config_.with_settings(text);  // throws before any change
  AllocatorConfig result = next;
  // Every device's lock, in device order, as retire_if_idle takes them.
  std::vector<std::unique_lock<DeviceMutex>> held;
  held.reserve(devices_.size());
  for (auto& d : devices_) held.emplace_back(d->mutex);
  // Every copy first (std::bad_alloc then changes nothing), then the
  // changes, which cannot fail.
  std::vector<AllocatorConfig> shaped;
  shaped.reserve(devices_.size());
  for (auto& d : devices_) shaped.push_back(d->engine.shaped(next));
  for (size_t i = 0; i < devices_.size(); ++i)
    devices_[i]->engine.put_in_force(std::move(shaped[i]));
  config_ = std::move(next);
  return result;
}

[[noreturn]] void CachingAllocator::bad_device(int device) const {
  throw std::out_of_range("cachealloc: device " + std::to_string(device) +
                          " out of range (" + std::to_string(device_count()) +
                          " devices)");
}

static std::string hex(uintptr_t a) {
  std::ostringstream s;
  s << "0x" << std::hex << a;
  return s.str();
}

#if defined(CACHEALLOC_RACE_DEMO_DROP_FREE_LOCK)
#warning "CACHEALLOC_RACE_DEMO_DROP_FREE_LOCK: frees take no device lock (scripts/race_demo.sh only)"
#endif

template <typename Fn>
bool CachingAllocator::with_block_on(Device& d, uintptr_t address, bool take, Fn& fn) {
#if defined(CACHEALLOC_RACE_DEMO_DROP_FREE_LOCK)
  // A defect on purpose, for scripts/race_demo.sh (set only there, through
  // -DCACHEALLOC_RACE_DEMO=drop_free_lock): a free (take) runs the pointer
  // table's erase and the engine's free without the device lock, racing
  // every other call on the device. It shows that ThreadSanitizer and the
  // stress test's byte accounting catch a missing lock (docs/race_demo.md).
  std::unique_lock<DeviceMutex> lock(d.mutex, std::defer_lock);
  if (!take) lock.lock();
#else
  std::lock_guard<DeviceMutex> lock(d.mutex);
#endif
  Block* b = take ? d.blocks.erase(address) : d.blocks.find(address);
  if (!b) return false;
  fn(d, b);
  return true;
}

template <typename Fn>
void CachingAllocator::with_block_elsewhere(uintptr_t address, int hint, bool take,
                                            const char* what, Fn& fn) {
  // A free without a device (PyTorch's deleter) asks the directory first:
  // one lock and probe whatever the device count. Its answer is checked by
  // with_block_on, so a stale one only costs the search below.
  int known = -1;
  if (hint < 0) {
    known = directory_.lookup(address);
    if (known >= 0 && known < device_count() &&
        with_block_on(*devices_[static_cast<size_t>(known)], address, take, fn))
      return;
  }
  for (int i = 0; i < device_count(); ++i) {
    if (i == hint || i == known) continue;
    if (with_block_on(*devices_[static_cast<size_t>(i)], address, take, fn)) {
      directory_.learn(address, i);
      return;
    }
  }
  // Retirement is for good and covers every device: one device's flag
  // (read under its lock) tells.
  {
    Device& d = *devices_.front();
    std::lock_guard<DeviceMutex> lock(d.mutex);
    if (d.retired) throw_retired();
  }
  throw InvalidPointerError(std::string("cachealloc: ") + what + " of " +
                            hex(address) +
                            ", which this allocator did not allocate or has "
                            "already freed");
}

template <typename Fn>
void CachingAllocator::with_block(uintptr_t address, int hint, bool take, const char* what,
                                  Fn&& fn) {
  if (hint >= 0 && with_block_on(at(hint), address, take, fn)) [[likely]] return;
  with_block_elsewhere(address, hint, take, what, fn);
}

uintptr_t CachingAllocator::allocate(size_t size, int device, StreamId stream,
                                     const ContextPtr& context) {
  Device& d = at(device);
  if (size == 0) return 0;
  std::lock_guard<DeviceMutex> lock(d.mutex);
  if (d.retired) [[unlikely]] throw_retired();
  // The table's room first (std::bad_alloc here changes nothing): once the
  // engine has handed the block out, recording it cannot fail.
  d.blocks.reserve_one();
  Block* b = d.engine.malloc(size, stream, context);
  d.blocks.insert_reserved(b->address, b);
  return b->address;
}

void CachingAllocator::deallocate(uintptr_t address, int device,
                                  const ContextPtr& context) {
  if (address == 0) return;
  with_block(address, device, true, "free",
             [&](Device& d, Block* b) CACHEALLOC_HOT_INLINE_LAMBDA {
               // Inline too: the hot path. A free that fails changes
               // nothing: the caller still holds the block, so the table
               // has it again (the erase left room: this cannot fail).
               d.engine.free(b, context, [&d](Block* kept) CACHEALLOC_HOT_INLINE_LAMBDA {
                 d.blocks.insert_reserved(kept->address, kept);
               });
             });
}

void CachingAllocator::record_stream(uintptr_t address, StreamId stream) {
  with_block(address, -1, false, "record_stream",
             [&](Device& d, Block* b) { d.engine.record_stream(b, stream); });
}

CachingAllocator::BlockInfo CachingAllocator::block_info(uintptr_t address) {
  BlockInfo info;
  with_block(address, -1, false, "block_info", [&](Device& d, Block* b) {
    info.size = b->size;
    info.device = d.engine.device();
  });
  return info;
}

uintptr_t CachingAllocator::base_allocation(uintptr_t address, size_t* segment_bytes) {
  uintptr_t base = 0;
  with_block(address, -1, false, "base_allocation", [&](Device& d, Block* b) {
    base = d.engine.base_allocation(b, segment_bytes);
  });
  return base;
}

bool CachingAllocator::share_expandable(uintptr_t address, std::string* out, size_t* offset) {
  bool shared = false;
  with_block(address, -1, false, "share_expandable", [&](Device& d, Block* b) {
    if (!b->expandable) return;
    *offset = b->address - d.engine.share_expandable(b, out);
    shared = true;
  });
  return shared;
}

[[noreturn]] void CachingAllocator::throw_retired() { throw AllocatorRetired(); }

bool CachingAllocator::retire_if_idle() {
  // Every device's lock, in device order (nothing else holds two at once).
  std::vector<std::unique_lock<DeviceMutex>> locks;
  locks.reserve(devices_.size());
  for (auto& d : devices_) locks.emplace_back(d->mutex);
  for (auto& d : devices_)
    if (!d->engine.idle()) return false;
  for (auto& d : devices_) d->retired = true;
  return true;
}

void CachingAllocator::empty_cache(int device, const ContextPtr& context, PoolId pool) {
  if (device != -1) at(device);  // a bad index throws before anything changes
  for (int i = 0; i < device_count(); ++i) {
    if (device >= 0 && i != device) continue;
    with_device(i, [&](DeviceCachingAllocator& e) { e.empty_cache(context, pool); });
  }
}

void CachingAllocator::set_memory_fraction(double fraction, int device) {
  with_device(device, [&](DeviceCachingAllocator& e) { e.set_memory_fraction(fraction); });
}

PoolCheckpoint CachingAllocator::checkpoint_pool(int device, PoolId id,
                                                 const ContextPtr& context) {
  return with_device(device,
                     [&](DeviceCachingAllocator& e) { return e.checkpoint_pool(id, context); });
}

CachingAllocator::RestoredPool CachingAllocator::restore_pool(const PoolCheckpoint& checkpoint,
                                                              const ContextPtr& context) {
  Device& d = at(checkpoint.device);
  std::lock_guard<DeviceMutex> lock(d.mutex);
  if (d.retired) throw_retired();  // a restore allocates
  // The pool's allocated addresses before: what the table must drop if the
  // restore stops part way (std::bad_alloc after its checks).
  const std::vector<uintptr_t> held = d.engine.pool_allocations(checkpoint.pool);
  try {
    PoolRestore r = d.engine.restore_pool(checkpoint, context);
    RestoredPool out;
    out.freed = std::move(r.freed);
    for (uintptr_t address : out.freed) d.blocks.erase(address);
    for (Block* b : r.allocated) {
      d.blocks.insert(b->address, b);
      out.allocated.emplace_back(b->address, b->size);
    }
    return out;
  } catch (...) {
    resync_pool_table(d, checkpoint.pool, held);
    throw;
  }
}

// After a restore that stopped part way: addresses the pool no longer has
// allocated leave the table (their Blocks may be recycled: a later free
// must be refused, not reach them); blocks it allocated are entered, as
// far as host memory allows (one that cannot be is leaked, not corrupted).
void CachingAllocator::resync_pool_table(Device& d, PoolId pool,
                                         const std::vector<uintptr_t>& held) noexcept {
  try {
    const std::vector<uintptr_t> now = d.engine.pool_allocations(pool);
    const StrongHashSet<uintptr_t> allocated(now.begin(), now.end());
    for (uintptr_t a : held)
      if (!allocated.contains(a)) d.blocks.erase(a);
    for (const SegmentView& s : d.engine.segments())
      if (s.pool_id == pool)
        for (const Block* b : s.blocks)
          if (b->allocated && !d.blocks.find(b->address))
            d.blocks.insert(b->address, const_cast<Block*>(b));
  } catch (...) {
  }
}

}  // namespace cachealloc
