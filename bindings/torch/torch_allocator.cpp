// libcachealloc_torch.so: cachealloc installed as PyTorch's CUDA allocator
// through PyTorch's C++ CUDAPluggableAllocator class, overriding what the
// plain C entry points leave unimplemented, so torch.cuda.memory_stats,
// memory_summary, reset_peak_memory_stats, _record_memory_history,
// _snapshot/_dump_snapshot, cudnn.benchmark (cacheInfo), empty_cache,
// set_per_process_memory_fraction, record_stream, base allocations, OOM
// observers, CUDA IPC (torch.multiprocessing) and MemPool(allocator=...)
// work unchanged. Built against the installed PyTorch (2.11+).
//
// Python loads it with ctypes after importing torch and calls
// cachealloc_torch_install(); it talks to libcachealloc.so through the C API
// only (bindings/c_api/cachealloc.h). This file is the allocator class and
// the calls that pass straight through; each conversion of PyTorch's types
// is a file of its own: device_stats.cpp, snapshot.cpp (and the recorded
// contexts its traces carry, recorded_context.cpp), pool_checkpoints.cpp,
// process_memory.cpp (the OOM message's process list), ipc.cpp and
// foreign_pool.cpp (sharing.h). glue_files.txt lists them all.
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "bindings/c_api/cachealloc.h"
#include "bindings/torch/device_stats.h"
#include "bindings/torch/pool_checkpoints.h"
#include "bindings/torch/process_memory.h"
#include "bindings/torch/recorded_context.h"
#include "bindings/torch/sharing.h"
#include "bindings/torch/snapshot.h"

namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;
using torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
using cachealloc_torch::DeviceStats;
using cachealloc_torch::SnapshotInfo;
using cachealloc_torch::TraceEntry;

// The type of createOrIncrefPool's allocator parameter: a raw pointer in
// some torch releases, a shared_ptr in others. Deduced, so the override
// below matches whichever release the glue is compiled against.
template <typename Method>
struct ThirdParameter;
template <typename C, typename R, typename A, typename B, typename T>
struct ThirdParameter<R (C::*)(A, B, T)> {
  using type = T;
};
using PoolAllocatorArg =
    ThirdParameter<decltype(&CCA::CUDAAllocator::createOrIncrefPool)>::type;

class CacheallocTorchAllocator;
CacheallocTorchAllocator* g_allocator = nullptr;  // the installed instance
void delete_fn(void* ptr);

class CacheallocTorchAllocator final : public CUDAPluggableAllocator {
 public:
  CacheallocTorchAllocator()
      : CUDAPluggableAllocator(
            [](size_t n, int d, cudaStream_t s) { return g_allocator->alloc(n, d, s); },
            [](void* p, size_t, int d, cudaStream_t) { g_allocator->release(p, d); }) {}

  // Hands out memory; throws c10::OutOfMemoryError (torch.OutOfMemoryError).
  void* alloc(size_t size, int device, cudaStream_t stream) {
    if (size == 0) return nullptr;
    // As native (NativeCachingAllocator::malloc): a request of 1 EiB or more
    // is an out-of-memory error, raised before anything is recorded. (It
    // would otherwise reach the C API as a negative ssize_t at 2^63 or a
    // size overflow, both RuntimeErrors.)
    constexpr size_t kOneExbibyte = size_t{1} << 60;
    TORCH_CHECK_WITH(OutOfMemoryError, size < kOneExbibyte,
                     "CUDA out of memory. Tried to allocate more than 1EB memory.");
    // Whether to record a context is the runtime's decision (it calls
    // capture_context when its history settings say so); the profiler's
    // numbers come back from the same call, measured under its lock.
    void* out = nullptr;
    const bool profiling = c10::memoryProfilingEnabled();
    cachealloc_block_report report{};
    const int status = cachealloc_try_malloc_report(static_cast<ssize_t>(size), device, stream,
                                                    &out, profiling ? &report : nullptr);
    if (status == 1) raise_oom(size, device);
    TORCH_CHECK(status == 0, cachealloc_last_error());
    // As native (alloc_found_block): the block's rounded size, the device's
    // totals after the allocation.
    if (profiling && report.device >= 0) report_to_profiler(out, static_cast<int64_t>(report.size), report);
    return out;
  }

  void release(void* ptr, int device) {
    if (!ptr) return;
    // As native (free): minus the block's size, on the block's device (PyTorch
    // frees through delete_fn, which does not know it), with the totals after
    // the free, all from the free itself. An unknown pointer is reported on
    // stderr by the C API (nothing to tell the profiler then).
    const bool profiling = c10::memoryProfilingEnabled();
    cachealloc_block_report report{};
    cachealloc_free_report(ptr, device, profiling ? &report : nullptr);
    if (profiling && report.device >= 0) report_to_profiler(ptr, -static_cast<int64_t>(report.size), report);
  }

  // Bypasses the base class's pointer map: cachealloc already keeps one.
  c10::DataPtr allocate(size_t size) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    const c10::Device where(c10::DeviceType::CUDA, device);
    // With the cache disabled (caching_allocator_enable(False)) tensors too
    // come straight from the device and go back to it, unseen by statistics
    // and history: measured under native 2.11 on the H100
    // (tests/gpu/test_expectations_gpu.py, tensor_disabled).
    if (!isEnabled()) {
      void* p = uncached_alloc(size);
      return {p, p, &uncached_delete_fn, where};
    }
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device);
    void* p = alloc(size, device, stream);
    return {p, p, &delete_fn, where};
  }
  static void uncached_delete_fn(void* ptr) {
    if (ptr) C10_CUDA_CHECK_WARN(cudaFree(ptr));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_fn; }
  // torch.cuda.caching_allocator_alloc and friends. While the cache is
  // disabled (caching_allocator_enable(False)) they go straight to the
  // device, as native's raw_alloc: no cache, no statistics, no history
  // (tensors too: allocate()).
  void* raw_alloc(size_t nbytes) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    if (!isEnabled()) return uncached_alloc(nbytes);
    return alloc(nbytes, device, c10::cuda::getCurrentCUDAStream(device));
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    if (!isEnabled()) return uncached_alloc(nbytes);
    return alloc(nbytes, device, stream);
  }
  // A pointer the cache handed out goes back to it even while disabled
  // (native would cudaFree it, corrupting its cache); others were
  // uncached_alloc's.
  void raw_delete(void* ptr) override {
    size_t bytes = 0;
    if (!isEnabled() && ptr && cachealloc_block_size(ptr, &bytes) != 0) {
      C10_CUDA_CHECK(cudaFree(ptr));
      return;
    }
    release(ptr, -1);
  }
  void enable(bool value) override { enabled_.store(value, std::memory_order_relaxed); }
  bool isEnabled() const override { return enabled_.load(std::memory_order_relaxed); }

  // torch.compile's regions and _set_memory_metadata (recorded_context.h).
  // As native (NativeCachingAllocator): both do nothing unless history is
  // recorded.
  void pushCompileContext(std::string& md) override {
    if (cachealloc_history_enabled() == 1) cachealloc_torch::push_compile_context(md);
  }
  void popCompileContext() override {
    if (cachealloc_history_enabled() == 1) cachealloc_torch::pop_compile_context();
  }
  void setUserMetadata(const std::string& metadata) override {
    cachealloc_torch::set_user_metadata(metadata);
  }
  std::string getUserMetadata() override { return cachealloc_torch::user_metadata(); }
  // torch 2.14 asks whether user metadata reaches trace entries
  // (torch._C._cuda_memoryMetadataSupported; false would make
  // _set_memory_metadata warn that it is ignored). It does here. Declared
  // without `override` on purpose: before 2.14 the base has no such
  // virtual and this is a plain member; from 2.14 it overrides.
  bool supportsUserMetadata() { return true; }

  void init(int device_count) override {
    if (!cachealloc_is_initialized()) check(cachealloc_init(nullptr, nullptr));
    CUDAPluggableAllocator::init(device_count);
  }

  double getMemoryFraction(c10::DeviceIndex device) override {
    double f = 1.0;
    check(cachealloc_memory_fraction(device, &f));
    return f;
  }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    check(cachealloc_set_memory_fraction(fraction, device));
  }
  // As native: runtime peer access, and the expandable pages of
  // `dev_to_access` mapped for `dev` (cuMemMap memory is not reached by
  // cudaDeviceEnablePeerAccess). PyTorch calls this before a peer copy.
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    TORCH_CHECK(cachealloc_enable_peer_access(dev, dev_to_access) == 0, cachealloc_last_error());
  }

  // (0, 0): torch.cuda.empty_cache(); a pool's id: ~MemPool, on every
  // device, as native.
  void emptyCache(c10::cuda::MempoolId_t mempool_id) override {
    check(cachealloc_empty_cache_pool(-1, mempool_id.first, mempool_id.second));
  }

  // Memory pools (torch.cuda.MemPool, use_mem_pool): cachealloc's engine
  // keeps them as native does (allocator/engine/pools/private_pool.h).
  void createOrIncrefPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                          PoolAllocatorArg allocator) override {
    // With an allocator: the pool's segments come from it (foreign_pool.cpp).
    if (allocator) {
      cachealloc_torch::create_pool_with_allocator(
          device, id, cachealloc_torch::pool_allocator(allocator), this);
      return;
    }
    check(cachealloc_pool_create_or_incref(device, id.first, id.second));
  }
  void beginAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    using Filter = std::function<bool(cudaStream_t)>;
    // As native (beginAllocateToPool): the pool gains its use before the
    // check that no route to it is open, so a refused second route (another
    // thread's use_mem_pool while one is open) leaves that use behind and
    // the pool outlives its holders' releases. cachealloc's engine refuses
    // without the use; the glue adds it first and gives it back on success
    // (the route holds its own).
    check(cachealloc_pool_create_or_incref(device, id.first, id.second));
    const int routed = cachealloc_pool_begin_allocate(
        device, id.first, id.second,
        [](void* f, void* stream) -> int {
          return (*static_cast<Filter*>(f))(static_cast<cudaStream_t>(stream)) ? 1 : 0;
        },
        new Filter(std::move(filter)), [](void* f) { delete static_cast<Filter*>(f); });
    check(routed);
    check(cachealloc_pool_release(device, id.first, id.second));
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    check(cachealloc_pool_end_allocate(device, id.first, id.second));
  }
  void releasePool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    check(cachealloc_pool_release(device, id.first, id.second));
  }
  int getPoolUseCount(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    int count = 0;
    check(cachealloc_pool_use_count(device, id.first, id.second, &count));
    return count;
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::cuda::MempoolId_t id, bool use_on_oom) override {
    check(cachealloc_pool_set_use_on_oom(device, id.first, id.second, use_on_oom ? 1 : 0));
  }
  void setNoSplit(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    check(cachealloc_pool_set_no_split(device, id.first, id.second));
  }
  // CUDA graph trees' pool checkpoints (pool_checkpoints.cpp).
  std::shared_ptr<CCA::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::cuda::MempoolId_t id) override {
    return cachealloc_torch::save_pool_checkpoint(device, id);
  }
  CCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<CCA::AllocatorState> state) override {
    return cachealloc_torch::restore_pool_checkpoint(device, state, &delete_fn);
  }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    return cachealloc_torch::pool_live_allocations_match(device, id, expected);
  }
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override {
    size_t cached = 0;
    check(cachealloc_cache_info(device, &cached));
    if (*largest == 0) {  // as native: start from free device memory
      size_t free_bytes = 0, total = 0;
      C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
      *largest = free_bytes;
    }
    *largest = std::max(*largest, cached);
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    void* base = cachealloc_base_allocation(ptr, size);
    TORCH_CHECK(base, cachealloc_last_error());
    return base;
  }
  // CUDA IPC for torch.multiprocessing (ipc.cpp).
  CCA::ShareableHandle shareIpcHandle(void* ptr) override {
    return cachealloc_torch::share_ipc_handle(ptr);
  }
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    return cachealloc_torch::open_ipc_handle(handle);
  }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (!ptr.get() || ptr.get_deleter() != &delete_fn) return;  // not ours
    check(cachealloc_record_stream(ptr.get(), stream.stream()));
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return cachealloc_torch::device_stats(device);
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check(cachealloc_reset_accumulated_stats(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check(cachealloc_reset_peak_stats(device));
  }
  SnapshotInfo snapshot(c10::cuda::MempoolId_t mempool, bool include_traces) override {
    return cachealloc_torch::snapshot_info(mempool, include_traces);
  }
  void recordHistory(bool enabled, CCA::CreateContextFn context_recorder,
                     size_t max_entries, CCA::RecordContext when, bool clear_history,
                     const std::vector<std::string>& skip_actions) override;
  // As native: whether the last recordHistory call enabled recording (torch's
  // enabled="state" or "all"); inductor's cudagraph trees ask.
  bool isHistoryEnabled() override { return cachealloc_history_enabled() == 1; }
  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    oom_observers_.push_back(std::move(observer));
  }
  // As native: trackers see segment_alloc/free/map/unmap, under the device's
  // lock, with the segment's pool id. ProcessGroupNCCL's register_mem_pool
  // attaches its two hooks here (CUDAPluggableAllocator refuses to), which
  // register a registered pool's new segments with NCCL and deregister
  // freed ones. Trackers are never detached (native has no detach either).
  void attachAllocatorTraceTracker(CCA::AllocatorTraceTracker tracker) override {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    auto next = std::make_shared<std::vector<CCA::AllocatorTraceTracker>>(
        trace_trackers_ ? *trace_trackers_ : std::vector<CCA::AllocatorTraceTracker>{});
    next->push_back(std::move(tracker));
    std::atomic_store(&trace_trackers_, std::shared_ptr<const std::vector<CCA::AllocatorTraceTracker>>(next));
    if (!segment_callback_set_) {
      check(cachealloc_set_segment_callback(&on_segment_event, this));
      segment_callback_set_ = true;
    }
  }
  std::string name() override { return "pluggable"; }

 private:
  static void check(int status) { TORCH_CHECK(status == 0, cachealloc_last_error()); }
  // One profiler record: `delta` bytes on the block's device, with that
  // device's totals right after the change (all from the call that made it).
  static void report_to_profiler(void* ptr, int64_t delta, const cachealloc_block_report& r) {
    c10::reportMemoryUsageToProfiler(ptr, delta, static_cast<size_t>(r.allocated),
                                     static_cast<size_t>(r.reserved),
                                     c10::Device(c10::DeviceType::CUDA,
                                                 static_cast<c10::DeviceIndex>(r.device)));
  }
  [[noreturn]] void raise_oom(size_t size, int device);
  // native: uncached_allocate (no capture check: cudaMalloc fails in one).
  static void* uncached_alloc(size_t nbytes) {
    if (nbytes == 0) return nullptr;
    void* p = nullptr;
    C10_CUDA_CHECK(cudaMalloc(&p, nbytes));
    return p;
  }

  std::atomic<bool> enabled_{true};  // caching_allocator_enable
  std::mutex observers_mutex_;
  std::vector<CCA::OutOfMemoryObserver> oom_observers_;
  // Copy-on-attach, read without the mutex from under the device lock.
  std::shared_ptr<const std::vector<CCA::AllocatorTraceTracker>> trace_trackers_;
  bool segment_callback_set_ = false;  // under observers_mutex_

  static void on_segment_event(void* self, int action, int device, uint64_t address,
                               uint64_t bytes, void* stream, uint64_t pool_first,
                               uint64_t pool_second) {
    auto trackers = std::atomic_load(&static_cast<CacheallocTorchAllocator*>(self)->trace_trackers_);
    if (!trackers || action < 0 || action >= cachealloc_torch::kTraceActionCount) return;
    const TraceEntry te(cachealloc_torch::kTraceActions[action], static_cast<c10::DeviceIndex>(device), address, bytes,
                        static_cast<cudaStream_t>(stream),
                        c10::cuda::MempoolId_t{static_cast<unsigned long long>(pool_first),
                                               static_cast<unsigned long long>(pool_second)},
                        0);
    for (const auto& t : *trackers) t(te);
  }
};

void delete_fn(void* ptr) { g_allocator->release(ptr, -1); }

void CacheallocTorchAllocator::raise_oom(size_t size, int device) {
  std::string message = cachealloc_last_error();
  // Native's process report goes right after "... of which X is free. ".
  constexpr std::string_view kAfter = " is free. ";
  if (const size_t at = message.find(kAfter); at != std::string::npos)
    message.insert(at + kAfter.size(), cachealloc_torch::process_memory_report(device));
  // As native (DeviceCachingAllocator::malloc): the profiler gets the
  // rounded request and the totals at the failure; observers get the
  // segment size the device refused, the allowed bytes (the capacity when
  // no fraction is set) and the device's free bytes, without our locks.
  cachealloc_oom_info oom{};
  if (cachealloc_last_oom(&oom) != 0) {  // cannot happen after status 1; keep what we know
    oom.device = device;
    oom.rounded = oom.allocation = oom.requested = size;
  }
  c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(oom.rounded), oom.allocated, oom.reserved,
                                   c10::Device(c10::DeviceType::CUDA,
                                               static_cast<c10::DeviceIndex>(oom.device)));
  std::vector<CCA::OutOfMemoryObserver> observers;
  {
    std::lock_guard<std::mutex> lock(observers_mutex_);
    observers = oom_observers_;
  }
  cachealloc_set_oom_note(nullptr);
  for (const auto& obs : observers)
    obs(oom.device, oom.allocation, oom.limit_set ? oom.allowed : oom.device_total,
        oom.device_free);
  // The flight recorder (cachealloc.oom_recorder, an observer) leaves its
  // diagnosis as this thread's note: it follows native's text.
  const std::string note = cachealloc_oom_note();
  cachealloc_set_oom_note(nullptr);
  if (!note.empty()) message += "\n" + note;
  TORCH_CHECK_WITH(OutOfMemoryError, false, message);
}

void CacheallocTorchAllocator::recordHistory(bool enabled, CCA::CreateContextFn recorder,
                                             size_t max_entries, CCA::RecordContext when,
                                             bool clear_history,
                                             const std::vector<std::string>& skip_actions) {
  // As native, every call replaces the skipped set, and a name that is not
  // one of the CUDA allocator's actions is ignored (torch documents some
  // for other devices): PyTorch's API must behave as it does natively.
  // The C API's list, split once: the one place the names are written.
  static const std::vector<std::string> kActions = [] {
    std::vector<std::string> out;
    const std::string names = cachealloc_history_action_names();
    size_t start = 0;
    for (size_t comma; (comma = names.find(',', start)) != std::string::npos; start = comma + 1)
      out.push_back(names.substr(start, comma - start));
    out.push_back(names.substr(start));
    return out;
  }();
  std::string skipped;
  for (const auto& a : skip_actions) {
    const bool known = std::find(kActions.begin(), kActions.end(), a) != kActions.end();
    if (known) skipped += (skipped.empty() ? "" : ",") + a;
    else TORCH_WARN_ONCE("_record_memory_history: skip_actions entry '", a,
                         "' is not an action of the CUDA allocator; ignored, as native does");
  }
  if (clear_history) check(cachealloc_record_history(0, 0, 0, 1));
  // The settings go to the runtime as PyTorch gave them; it alone decides
  // which calls record a context (calling capture_context with PyTorch's
  // recorder) and how long the ring is. It fails (the ring could not grow)
  // before anything changes. Every name in `skipped` is known, so the
  // next call cannot fail.
  check(cachealloc_record_history_from(enabled ? 1 : 0, static_cast<int>(when), max_entries,
                                       &cachealloc_torch::capture_context,
                                       reinterpret_cast<void*>(recorder),
                                       &cachealloc_torch::release_context));
  check(cachealloc_set_history_skip_actions(skipped.c_str()));
}

thread_local std::string install_error;

}  // namespace

extern "C" {

// Makes cachealloc PyTorch's CUDA allocator. Returns 0, or -1 with
// cachealloc_torch_last_error() set (e.g. CUDA memory already allocated).
__attribute__((visibility("default"))) int cachealloc_torch_install() {
  try {
    if (g_allocator) return 0;
    auto allocator = std::make_shared<CacheallocTorchAllocator>();
    g_allocator = allocator.get();
    try {
      allocator->init(c10::cuda::device_count());
      torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
      // Also the allocator c10::GetAllocator(kCUDA) and getDeviceAllocator
      // return (torch.accelerator's memory API), as native's static
      // initializer registers itself (priority 0, which this replaces).
      c10::SetAllocator(c10::DeviceType::CUDA, allocator.get(), 0);
    } catch (...) {
      g_allocator = nullptr;
      throw;
    }
    return 0;
  } catch (const std::exception& e) {
    install_error = e.what();
    return -1;
  }
}

// The torch release ("2.11.0") this library was compiled against. The
// glue overrides virtual functions of PyTorch's allocator classes, whose
// layout can change between releases: Python checks this against
// torch.__version__ before cachealloc_torch_install.
__attribute__((visibility("default"))) const char* cachealloc_torch_built_for() {
  return CACHEALLOC_TORCH_VERSION;
}

__attribute__((visibility("default"))) const char* cachealloc_torch_last_error() {
  return install_error.c_str();
}

}  // extern "C"
