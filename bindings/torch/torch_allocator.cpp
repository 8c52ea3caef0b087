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
// only (bindings/c_api/cachealloc.h).
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string_view>
#include <tuple>
#include <iterator>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bindings/c_api/cachealloc.h"
#include "bindings/torch/sharing.h"

namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;
using torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
using SnapshotInfo = CCA::SnapshotInfo;
using SegmentInfo = decltype(SnapshotInfo::segments)::value_type;
using TraceEntry = decltype(SnapshotInfo::device_traces)::value_type::value_type;
using DeviceStats = decltype(std::declval<CCA::CUDAAllocator&>().getDeviceStats(0));
using ContextPtr = std::shared_ptr<c10::GatheredContext>;

// Native's trace actions by the C API's visitor action code
// (bindings/runtime/visitor_action.h: 0 segment_alloc ... 8 segment_unmap).
constexpr TraceEntry::Action kTraceActions[] = {
    TraceEntry::SEGMENT_ALLOC, TraceEntry::SEGMENT_FREE, TraceEntry::ALLOC,
    TraceEntry::FREE_REQUESTED, TraceEntry::FREE_COMPLETED, TraceEntry::OOM,
    TraceEntry::SNAPSHOT, TraceEntry::SEGMENT_MAP, TraceEntry::SEGMENT_UNMAP};

// What the glue hands the engine with a recorded request: PyTorch's
// gathered frames, and the compile context and user metadata in force on
// the calling thread then (native stamps both on every trace entry, and
// frames only from context="alloc" up: `frames_in_trace`).
struct RecordedContext {
  ContextPtr frames;
  std::string compile_context;
  std::string user_metadata;
  bool frames_in_trace = true;
};
void release_context(void* p) { delete static_cast<RecordedContext*>(p); }
ContextPtr context_of(void* p) { return p ? static_cast<RecordedContext*>(p)->frames : nullptr; }

// As native (DeviceCachingAllocator's thread_local compile_context stack and
// user_metadata): per thread, shared by all devices. torch.compile pushes a
// context around the regions it runs; _set_memory_metadata sets the other.
thread_local std::vector<std::string> t_compile_context;
thread_local std::string t_user_metadata;
// Native's text for an entry made outside any compile context.
constexpr const char* kNoCompileContext = "N/A";

// The runtime's capture callback (cachealloc_record_history_from): it
// decides when a context is recorded and with which flags; this only
// gathers. `user` is PyTorch's recorder (a CreateContextFn: the stacks
// setting chose it). Without frames, a context only when the thread has a
// compile context or user metadata to stamp on the entries.
void* capture_context(void* user, int flags) {
  const auto recorder = reinterpret_cast<CCA::CreateContextFn>(user);
  const bool frames = (flags & CACHEALLOC_CAPTURE_FRAMES) != 0 && recorder;
  if (!frames && t_compile_context.empty() && t_user_metadata.empty()) return nullptr;
  return new RecordedContext{frames ? recorder() : nullptr,
                             t_compile_context.empty() ? kNoCompileContext : t_compile_context.back(),
                             t_user_metadata, (flags & CACHEALLOC_CAPTURE_FRAMES_IN_TRACE) != 0};
}

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

  // torch.compile's regions and _set_memory_metadata (see t_compile_context).
  // As native (NativeCachingAllocator): both do nothing unless history is
  // recorded.
  void pushCompileContext(std::string& md) override {
    if (cachealloc_history_enabled() == 1) t_compile_context.push_back(md);
  }
  void popCompileContext() override {
    if (cachealloc_history_enabled() == 1 && !t_compile_context.empty())
      t_compile_context.pop_back();
  }
  void setUserMetadata(const std::string& metadata) override { t_user_metadata = metadata; }
  std::string getUserMetadata() override { return t_user_metadata; }
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
  // CUDA graph trees (torch.compile(mode="reduce-overhead")) checkpoint a
  // graph pool after each capture and put it back before capturing a new
  // graph that branches off: allocator/engine/checkpoints/pool_checkpoint.h says how.
  struct PoolCheckpointState final : CCA::AllocatorState {
    PoolCheckpointState(cachealloc_pool_checkpoint* saved, c10::DeviceIndex on)
        : checkpoint(saved), device(on) {}
    ~PoolCheckpointState() override { cachealloc_pool_checkpoint_release(checkpoint); }
    cachealloc_pool_checkpoint* checkpoint;
    c10::DeviceIndex device;
  };
  std::shared_ptr<CCA::AllocatorState> getCheckpointState(c10::DeviceIndex device,
                                                          c10::cuda::MempoolId_t id) override {
    cachealloc_pool_checkpoint* raw = nullptr;
    check(cachealloc_pool_checkpoint_save(device, id.first, id.second, &raw));
    std::unique_ptr<cachealloc_pool_checkpoint, void (*)(cachealloc_pool_checkpoint*)> saved(
        raw, &cachealloc_pool_checkpoint_release);
    auto state = std::make_shared<PoolCheckpointState>(saved.get(), device);
    saved.release();  // the state owns it now
    return state;
  }
  CCA::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<CCA::AllocatorState> state) override {
    auto* ours = dynamic_cast<PoolCheckpointState*>(state.get());
    TORCH_CHECK(ours, "cachealloc: setCheckpointPoolState needs a checkpoint that cachealloc's "
                      "getCheckpointState made");
    TORCH_CHECK(ours->device == device, "cachealloc: a checkpoint of device ",
                static_cast<int>(ours->device), " given for device ", static_cast<int>(device));
    // The callbacks run after the restore (which cannot be undone): a
    // failure to record one is reported after all of them have run.
    struct Delta {
      CCA::CheckpointDelta out;
      c10::Device device;
      bool out_of_memory = false;
    } delta{{}, c10::Device(c10::DeviceType::CUDA, device)};
    check(cachealloc_pool_checkpoint_restore(
        ours->checkpoint,
        [](void* d, void* p) {
          auto* delta = static_cast<Delta*>(d);
          try {
            delta->out.ptrs_freed.push_back(p);
          } catch (...) {
            delta->out_of_memory = true;
          }
        },
        [](void* d, void* p, size_t) {
          auto* delta = static_cast<Delta*>(d);
          // As native: DataPtrs with this allocator's deleter, which PyTorch
          // hands to the storages that hold these blocks (or releases).
          try {
            delta->out.dataptrs_allocd.emplace_back(p, p, &delete_fn, delta->device);
          } catch (...) {
            delta->out_of_memory = true;
          }
        },
        &delta));
    TORCH_CHECK(!delta.out_of_memory, "cachealloc: out of host memory listing a restored pool");
    return std::move(delta.out);
  }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    std::vector<void*> ptrs(expected.begin(), expected.end());
    int match = 0;
    check(cachealloc_pool_live_allocations_match(device, id.first, id.second, ptrs.data(),
                                                 ptrs.size(), &match));
    return match != 0;
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

  DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check(cachealloc_reset_accumulated_stats(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check(cachealloc_reset_peak_stats(device));
  }
  SnapshotInfo snapshot(c10::cuda::MempoolId_t mempool, bool include_traces) override;
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
    if (!trackers || action < 0 || action > 8) return;
    const TraceEntry te(kTraceActions[action], static_cast<c10::DeviceIndex>(device), address, bytes,
                        static_cast<cudaStream_t>(stream),
                        c10::cuda::MempoolId_t{static_cast<unsigned long long>(pool_first),
                                               static_cast<unsigned long long>(pool_second)},
                        0);
    for (const auto& t : *trackers) t(te);
  }
};

void delete_fn(void* ptr) { g_allocator->release(ptr, -1); }

// Native's NVML report of the device's processes (reportProcessMemoryInfo
// in torch 2.11): "Including non-PyTorch memory, this process has X memory
// in use. " for this process, "Process P has X memory in use. " for each
// other one, in NVML's order; "" where NVML cannot be loaded or answers an
// error (native's build without NVML reports nothing either). NVML is
// opened once, by its soname, as native's DriverAPI does.
std::string process_memory_report(int device) {
  struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t, which the unversioned call fills
    unsigned int pid;
    unsigned long long used_gpu_memory;
  };
  using Init = int (*)();
  using ByBusId = int (*)(const char*, void**);
  using Processes = int (*)(void*, unsigned int*, ProcessInfoV1*);
  static const auto nvml = []() -> std::tuple<ByBusId, Processes> {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return {nullptr, nullptr};
    auto init = reinterpret_cast<Init>(dlsym(h, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<ByBusId>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    auto procs = reinterpret_cast<Processes>(dlsym(h, "nvmlDeviceGetComputeRunningProcesses"));
    if (!init || !by_bus || !procs || init() != 0) return {nullptr, nullptr};
    return {by_bus, procs};
  }();
  const auto [by_bus, procs] = nvml;
  if (!by_bus) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  char bus_id[80];
  std::snprintf(bus_id, sizeof bus_id, "%08X:%02X:%02X.0", prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID);
  void* handle = nullptr;
  if (by_bus(bus_id, &handle) != 0) return "";
  constexpr int kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::vector<ProcessInfoV1> list(8);
  unsigned int count = static_cast<unsigned int>(list.size());
  int status;
  while ((status = procs(handle, &count, list.data())) == kInsufficientSize) list.resize(count);
  if (status != 0) return "";
  const unsigned int self = static_cast<unsigned int>(getpid());
  std::string out;
  for (unsigned int i = 0; i < count; ++i) {
    out += list[i].pid == self ? std::string("Including non-PyTorch memory, this process")
                               : "Process " + std::to_string(list[i].pid);
    out += " has " + c10::CachingAllocator::format_size(list[i].used_gpu_memory) +
           " memory in use. ";
  }
  return out;
}

void CacheallocTorchAllocator::raise_oom(size_t size, int device) {
  std::string message = cachealloc_last_error();
  // Native's process report goes right after "... of which X is free. ".
  constexpr std::string_view kAfter = " is free. ";
  if (const size_t at = message.find(kAfter); at != std::string::npos)
    message.insert(at + kAfter.size(), process_memory_report(device));
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

DeviceStats CacheallocTorchAllocator::getDeviceStats(c10::DeviceIndex device) {
  const int n = cachealloc_stat_count();
  std::vector<int64_t> values(static_cast<size_t>(n));
  check(cachealloc_memory_stats(device, values.data(), n));
  std::unordered_map<std::string, int64_t> by_name;
  for (int i = 0; i < n; ++i) by_name[cachealloc_stat_name(i)] = values[static_cast<size_t>(i)];
  auto stat = [&](c10::CachingAllocator::Stat& s, const std::string& prefix) {
    s.current = by_name.at(prefix + ".current");
    s.peak = by_name.at(prefix + ".peak");
    s.allocated = by_name.at(prefix + ".allocated");
    s.freed = by_name.at(prefix + ".freed");
  };
  auto family = [&](c10::CachingAllocator::StatArray& a, const std::string& name) {
    // c10's StatType order: AGGREGATE, SMALL_POOL, LARGE_POOL.
    stat(a[0], name + ".all");
    stat(a[1], name + ".small_pool");
    stat(a[2], name + ".large_pool");
  };
  DeviceStats s;
  family(s.allocation, "allocation");
  family(s.segment, "segment");
  family(s.active, "active");
  family(s.inactive_split, "inactive_split");
  family(s.allocated_bytes, "allocated_bytes");
  family(s.reserved_bytes, "reserved_bytes");
  family(s.active_bytes, "active_bytes");
  family(s.inactive_split_bytes, "inactive_split_bytes");
  family(s.requested_bytes, "requested_bytes");
  stat(s.oversize_allocations, "oversize_allocations");
  stat(s.oversize_segments, "oversize_segments");
  s.num_alloc_retries = by_name.at("num_alloc_retries");
  s.num_ooms = by_name.at("num_ooms");
  s.num_sync_all_streams = by_name.at("num_sync_all_streams");
  s.num_device_alloc = by_name.at("num_device_alloc");
  s.num_device_free = by_name.at("num_device_free");
  s.max_split_size = by_name.at("max_split_size");
  return s;
}

SnapshotInfo CacheallocTorchAllocator::snapshot(c10::cuda::MempoolId_t mempool,
                                                bool include_traces) {
  struct Collector {
    SnapshotInfo info;
    bool traces = true;
    // As native: a pool's id lists only that pool's segments; (0, 0) all.
    c10::cuda::MempoolId_t only{0, 0};
    bool keep = true;  // the segment being visited is listed
  } c;
  c.traces = include_traces;
  c.only = mempool;
  c.info.device_traces.resize(static_cast<size_t>(std::max(cachealloc_device_count(), 1)));
  cachealloc_snapshot_visitor v{};
  v.segment = [](void* u, int device, uint64_t address, uint64_t, void* stream, int is_small,
                 void* ctx, uint64_t pool_first, uint64_t pool_second, int is_expandable) {
    auto* c = static_cast<Collector*>(u);
    const c10::cuda::MempoolId_t pool{pool_first, pool_second};
    c->keep = (c->only.first == 0 && c->only.second == 0) || pool == c->only;
    if (!c->keep) return;
    auto& info = c->info;
    SegmentInfo s;
    s.owner_private_pool_id = pool;
    // Native numbers every Block it constructs (a thread-local count) and
    // ProcessGroupNCCL.register_mem_pool sorts a pool's segments by the
    // head's number, asserting it is set (>= 0), to register them in
    // creation order. cachealloc keeps no such count: segments are
    // numbered in the order they are visited (address order), which is
    // all NCCL's ordinary registration needs; symmetric-memory windows,
    // which need the same order on every rank, are not covered.
    s.registration_counter = static_cast<int32_t>(info.segments.size());
    s.device = static_cast<c10::DeviceIndex>(device);
    s.address = address;
    s.stream = static_cast<decltype(s.stream)>(stream);
    s.is_large = !is_small;
    s.is_expandable = is_expandable != 0;
    s.context_when_allocated = context_of(ctx);
    info.segments.push_back(std::move(s));
  };
  v.block = [](void* u, uint64_t size, uint64_t requested, int allocated, int active, void* ctx) {
    if (!static_cast<Collector*>(u)->keep) return;
    SegmentInfo& s = static_cast<Collector*>(u)->info.segments.back();
    decltype(s.blocks)::value_type b;
    b.size = size;
    b.requested_size = requested;
    b.allocated = allocated != 0;
    b.active = active != 0;
    b.context_when_allocated = context_of(ctx);
    s.total_size += size;
    if (b.allocated) s.allocated_size += size;
    if (b.active) {
      s.active_size += size;
      s.requested_size += requested;
    }
    s.blocks.push_back(std::move(b));
  };
  v.trace = [](void* u, int device, int action, uint64_t addr, uint64_t size, void* stream,
               int64_t time_us, void* ctx) {
    auto* c = static_cast<Collector*>(u);
    if (!c->traces) return;
    const auto* recorded = static_cast<const RecordedContext*>(ctx);
    const ContextPtr frames =
        recorded && recorded->frames_in_trace ? recorded->frames : nullptr;
    TraceEntry te(kTraceActions[action], static_cast<c10::DeviceIndex>(device), addr, size,
                  static_cast<cudaStream_t>(stream), c10::cuda::MempoolId_t{0, 0}, 0,
                  frames, recorded ? recorded->compile_context : kNoCompileContext,
                  recorded ? recorded->user_metadata : std::string());
    te.time_.t_ = time_us;  // snapshots carry microseconds since the epoch
    c->info.device_traces.at(static_cast<size_t>(device)).push_back(std::move(te));
  };
  check(cachealloc_visit_snapshot(&v, &c));

  uint64_t max_split = 0, divisions[16] = {};
  double gc = 0;
  const char* conf = "";
  check(cachealloc_config_info(&max_split, &gc, divisions, &conf));
  auto& m = c.info.config_metadata;
  m.garbage_collection_threshold = gc;
  m.max_split_size = max_split;
  // The pinned (host) allocator stays PyTorch's, so its settings are read
  // from PyTorch's parse of the same texts (cachealloc validated each one
  // before PyTorch parsed it); so are the flags cachealloc accepts without
  // acting on (release_lock_on_cudamalloc). expandable_segments is
  // cachealloc's own: PyTorch parses the environment's text only when its
  // own allocator starts, which it never does here.
  using CudaConfig = CCA::CUDAAllocatorConfig;
  m.pinned_num_register_threads = CudaConfig::pinned_num_register_threads();
  const int expandable = cachealloc_expandable_segments();
  if (expandable < 0) check(expandable);
  m.expandable_segments = expandable == 1;
  m.release_lock_on_malloc = CudaConfig::release_lock_on_cudamalloc();
  m.pinned_use_host_register = CudaConfig::pinned_use_cuda_host_register();
  m.graph_capture_record_stream_reuse = CudaConfig::graph_capture_record_stream_reuse();
  m.last_allocator_settings = conf;
  m.roundup_power2_divisions.assign(divisions, divisions + 16);
  return std::move(c.info);
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
                                       &capture_context, reinterpret_cast<void*>(recorder),
                                       &release_context));
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
