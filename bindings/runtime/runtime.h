// The process-wide allocator behind the C API: configuration, backends,
// the thread-safe CachingAllocator, and per-device stats and history.
//
// One Runtime per process (instance()). It is created on first use and
// never destroyed: PyTorch frees tensors during interpreter shutdown, after
// static destructors would have run.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/config.h"
#include "stats/device_stats.h"
#include "stats/history.h"
#include "stats/py_value.h"
#include "stats/scope_tracker.h"

struct cachealloc_snapshot_visitor;

namespace cachealloc {

// How much caller context to capture, as PyTorch's RecordContext.
enum class ContextLevel : int {
  kNever = 0,  // no context
  kState = 1,  // context of live blocks only (snapshots)
  kAlloc = 2,  // also on alloc history entries
  kAll = 3,    // also on free history entries
};

class Runtime {
 public:
  // Inline, as the hot-path members below: every cachealloc_malloc and
  // cachealloc_free goes through them (C API overhead per allocate+free
  // pair: about 95 instructions as calls, about 40 inline). The hot path
  // itself uses initialized_instance().
  static Runtime& instance() {
    static Runtime* const runtime = new Runtime();  // never destroyed (see above)
    return *runtime;
  }

  // Sets up the allocator. backend: "cuda" (cudaMalloc, default), "async"
  // (cudaMallocAsync; also chosen by conf "backend:cudaMallocAsync"), or
  // "simulated[:BYTES[:DEVICES]]" (no GPU: address bookkeeping only, for
  // tests and demos). Throws ConfigError (bad conf or backend) or
  // BackendError (no CUDA device). Calling again is allowed only while no
  // block is allocated; it replaces the allocator.
  void init(const std::string& conf, const std::string& backend);
  // The runtime, after init() from $PYTORCH_CUDA_ALLOC_CONF and the CUDA
  // backend if nothing initialized it yet. Safe to race: the first callers
  // serialise on the init lock and only one initializes. Once initialized,
  // one acquire load: neither instance()'s guard nor a flag of the instance
  // to check (every cachealloc_malloc and cachealloc_free starts here).
  static Runtime& initialized_instance() {
    if (Runtime* r = ready_.load(std::memory_order_acquire)) [[likely]] return *r;
    Runtime& r = instance();
    r.init_from_environment();
    return r;
  }
  bool initialized() const { return ready_.load(std::memory_order_acquire) != nullptr; }
  const std::string& backend_name() const { return backend_name_; }

  CachingAllocator& allocator() { return *allocator_; }
  int device_count() const { return allocator_ ? allocator_->device_count() : 0; }

  // Hot path: context per the history settings, then allocate/free.
  uintptr_t allocate(size_t size, int device, uintptr_t stream) {
    if (captures(ContextLevel::kState)) [[unlikely]]
      return allocate_capturing(size, device, stream);
    return allocator_->allocate(size, device, stream);
  }
  void deallocate(uintptr_t address, int device) {
    if (captures(ContextLevel::kAll)) [[unlikely]] deallocate_capturing(address, device);
    else allocator_->deallocate(address, device);
  }
  // The same with a context the caller captured (framework glue).
  uintptr_t allocate_with(size_t size, int device, uintptr_t stream, const ContextPtr& ctx) {
    return allocator_->allocate(size, device, stream, ctx);
  }
  void deallocate_with(uintptr_t address, int device, const ContextPtr& ctx) {
    allocator_->deallocate(address, device, ctx);
  }
  // Allocated and reserved bytes of a device (current values).
  void usage(int device, int64_t* allocated, int64_t* reserved);
  // Memory limit / capacity, 1.0 without a limit.
  double memory_fraction(int device);
  const AllocatorConfig& config() const { return config_; }
  // Walks segments, blocks and history for a framework's own snapshot.
  void visit_snapshot(const cachealloc_snapshot_visitor& v, void* user);

  DeviceStats stats(int device);
  void reset_peak(int device);
  void reset_accumulated(int device);

  // Profiler scopes (see stats/scope_tracker.h): opened and closed under
  // the device's lock, so they order exactly against allocations. Scopes on
  // a device nest (LIFO) whichever thread opens them. scope_close throws
  // ScopeError when `id` is not the device's innermost open scope;
  // std::out_of_range for a bad device.
  uint64_t scope_open(int device);
  ScopeResult scope_close(int device, uint64_t id);
  // Number of open scopes on the device.
  size_t scope_depth(int device);

  // History: `enabled` turns the max_entries trace ring on or off (off
  // clears it); `level` and `python_stacks` say what context is captured,
  // also while the ring is off (PyTorch's enabled="state").
  void record_history(bool enabled, ContextLevel level, bool python_stacks,
                      size_t max_entries);
  // Snapshot dict of every device (native schema).
  PyValue snapshot();

  // Called instead of rethrowing OutOfMemoryError when set (the PyTorch
  // glue installs one that throws c10::OutOfMemoryError). Must throw.
  using OomHandler = void (*)(const char* message);
  void set_oom_handler(OomHandler h) { oom_handler_ = h; }
  OomHandler oom_handler() const { return oom_handler_; }

 private:
  Runtime() = default;
  void init_from_environment();
  // init() with init_mutex_ held.
  void init_locked(const std::string& conf, const std::string& backend);
  // Whether the history settings ask for the caller's context at `needed`
  // (not in the common case: history off).
  bool captures(ContextLevel needed) const {
    return context_level_.load(std::memory_order_relaxed) >= static_cast<int>(needed);
  }
  // Python frames if stacks were requested, else null.
  ContextPtr capture_stack() const;
  // allocate/deallocate with capture_stack()'s context. Out of line, so
  // that the inlined common case needs no ContextPtr (nor the registers and
  // stack to keep one across the call).
  [[gnu::noinline]] uintptr_t allocate_capturing(size_t size, int device, uintptr_t stream);
  [[gnu::noinline]] void deallocate_capturing(uintptr_t address, int device);

  std::mutex init_mutex_;
  AllocatorConfig config_;
  std::string backend_name_;
  std::vector<std::unique_ptr<DeviceBackend>> backends_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::vector<std::unique_ptr<StatsCollector>> stats_;
  std::vector<std::unique_ptr<HistoryRecorder>> history_;
  std::vector<std::unique_ptr<ScopeTracker>> scopes_;
  // The instance, set (release) once its allocator_ and the rest are in
  // place; null before. The hot path reads it (acquire) instead of
  // allocator_, which init writes.
  static inline std::atomic<Runtime*> ready_{nullptr};
  std::atomic<int> context_level_{0};
  std::atomic<bool> python_stacks_{false};
  OomHandler oom_handler_ = nullptr;
};

}  // namespace cachealloc
