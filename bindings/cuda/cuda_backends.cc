#include "bindings/cuda/cuda_backends.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/base/errors.h"
#include "bindings/cuda/capture_topology.h"
#include "bindings/cuda/cuda_runtime_call.h"
#include "bindings/cuda/shared_pages.h"
#include "bindings/cuda/cuda_vmm_driver.h"
#include "bindings/cuda/vmm_pages.h"

namespace cachealloc {
namespace {

cudaStream_t as_stream(StreamId s) { return reinterpret_cast<cudaStream_t>(s); }

// The device a stream belongs to; `fallback` for the special handles (0,
// cudaStreamLegacy, cudaStreamPerThread), which stand for a stream of
// whichever device is current.
int stream_device(StreamId stream, int fallback) {
  const auto s = as_stream(stream);
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return fallback;
  int device = fallback;
  check_cuda(cudaStreamGetDevice(s, &device), "cudaStreamGetDevice");
  return device;
}

// Event handling shared by both backends: events are created without
// timing (cheapest), recorded on the using stream.
class CudaEvents {
 public:
  // `device` is the block's. The event is created on the stream's device,
  // which differs when a block was used on another device's stream (CUDA
  // refuses to record an event on a stream of another device; native
  // insert_events guards the stream's device for the same reason).
  EventId record(int device, StreamId stream) {
    DeviceScope scope(stream_device(stream, device));
    cudaEvent_t ev = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    const cudaError_t err = cudaEventRecord(ev, as_stream(stream));
    if (err != cudaSuccess) {
      (void)cudaEventDestroy(ev);  // not handed out: ours to release
      check_cuda(err, "cudaEventRecord");
    }
    return reinterpret_cast<EventId>(ev);
  }
  bool completed(EventId id) {
    cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(id));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check_cuda(err, "cudaEventQuery");
    return true;
  }
  void synchronize(EventId id) {
    check_cuda(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(id)), "cudaEventSynchronize");
  }
  void destroy(EventId id) {
    check_cuda(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(id)), "cudaEventDestroy");
  }
};

DeviceMemoryInfo memory_info_of(int device) {
  DeviceScope scope(device);
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return DeviceMemoryInfo{free_bytes, total_bytes};
}

// What both backends share: capacity from cudaMemGetInfo, and events.
class CudaBackendBase : public DeviceBackend {
 public:
  DeviceMemoryInfo memory_info(int device) override { return memory_info_of(device); }
  EventId record_event(int device, StreamId s) override { return events_.record(device, s); }
  bool event_completed(EventId e) override { return events_.completed(e); }
  void synchronize_event(EventId e) override { events_.synchronize(e); }
  void destroy_event(EventId e) override { events_.destroy(e); }
  bool capture_dependencies(int, StreamId s, std::vector<uint64_t>& out) override {
    return topology_.dependencies(s, out);
  }
  bool capture_follows(int, StreamId s, const std::vector<uint64_t>& nodes) override {
    return topology_.follows(s, nodes);
  }

 private:
  CudaEvents events_;
  CaptureTopology topology_;
};

// Lets this thread make calls that a stream capture in global mode forbids
// (cudaMalloc), for the scope. Native does the same around cudaMalloc when
// the current stream is capturing: a CUDA graph's private pool needs new
// segments during capture, and a captured cudaMalloc is not part of the
// graph (replays do not allocate). Set unconditionally here (one cheap
// runtime call next to a cudaMalloc): it only matters while a capture is
// underway, and it also spares another thread's global-mode capture from
// being invalidated by this thread's cudaMalloc, where native would fail.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    check_cuda(cudaThreadExchangeStreamCaptureMode(&mode_), "cudaThreadExchangeStreamCaptureMode");
  }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// cudaMalloc segments, and expandable segments on the driver's virtual
// memory management (vmm_pages.h holds the page bookkeeping, as native's
// ExpandableSegment).
class CudaRuntimeBackend final : public CudaBackendBase {
 public:
  CudaRuntimeBackend()
      : vmm_driver_(make_cuda_vmm_driver()),
        pages_(*vmm_driver_, expandable_ipc_handles_from_environment()) {}

  uintptr_t allocate(int device, size_t bytes, StreamId) override {
    DeviceScope scope(device);
    void* p = nullptr;
    cudaError_t err;
    {
      RelaxedCaptureMode relaxed;
      err = cudaMalloc(&p, bytes);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      return 0;
    }
    check_cuda(err, "cudaMalloc");
    return reinterpret_cast<uintptr_t>(p);
  }
  void release(int device, uintptr_t address, size_t) override {
    DeviceScope scope(device);
    check_cuda(cudaFree(reinterpret_cast<void*>(address)), "cudaFree");
  }

  // Reserved as native reserves (cuMemAddressReserve with alignment 0: the
  // driver's granularity, 2 MiB), whatever `alignment` the engine asks:
  // the engine counts pages from the base, so only the granularity matters,
  // and the large pool's page (20 MiB) is no power of two, which the driver
  // need not accept as an alignment.
  uintptr_t reserve_address_range(int device, size_t bytes, size_t) override {
    return pages_.reserve(device, bytes, 0);
  }
  void release_address_range(int device, uintptr_t base, size_t bytes) override {
    pages_.release(device, base, bytes);
  }
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                 PageCells cells, StreamId) override {
    DeviceScope scope(device);
    return pages_.map(device, address, bytes, page_bytes, cells);
  }
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_bytes,
                   size_t cell_bytes, StreamId stream) override {
    DeviceScope scope(device);
    pages_.unmap(device, address, bytes, page_bytes, cell_bytes, stream);
  }

  VmmPages& pages() { return pages_; }

  // CUDA IPC of expandable segments (share here, open/close: cuda_backends.h).
  uintptr_t share_pages(int device, uintptr_t address, size_t bytes, std::string* out) override {
    DeviceScope scope(device);
    return pages_.share(device, address, bytes, out);
  }
  uintptr_t open_shared(int device, std::string_view bytes) {
    ImportedPages pages = import_shared_pages(*vmm_driver_, device, bytes, pages_.import_type(),
                                              pages_.peers(device));
    std::lock_guard<std::mutex> lock(imported_mutex_);
    const uintptr_t base = pages.base;
    imported_.emplace(base, std::move(pages));
    return base;
  }
  bool close_shared(uintptr_t base) {
    ImportedPages pages;
    {
      std::lock_guard<std::mutex> lock(imported_mutex_);
      auto it = imported_.find(base);
      if (it == imported_.end()) return false;
      pages = std::move(it->second);
      imported_.erase(it);
    }
    close_imported_pages(*vmm_driver_, pages);
    return true;
  }

 private:
  std::unique_ptr<VmmDriver> vmm_driver_;
  VmmPages pages_;
  std::mutex imported_mutex_;
  std::map<uintptr_t, ImportedPages> imported_;  // by base address
};

CudaRuntimeBackend& expandable_ipc_backend(DeviceBackend& backend) {
  auto* runtime = dynamic_cast<CudaRuntimeBackend*>(&backend);
  if (!runtime)
    throw BackendError("cachealloc: expandable segments are shared only by the cudaMalloc backend");
  return *runtime;
}

class CudaAsyncBackend final : public CudaBackendBase {
 public:
  uintptr_t allocate(int device, size_t bytes, StreamId stream) override {
    DeviceScope scope(device);
    // On a capturing stream cudaMallocAsync would become a node of the
    // graph (memory the graph owns and frees), not a segment of this cache.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(as_stream(stream), &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone)
      throw BackendError(
          "cudaMallocAsync backend: cannot reserve a segment on a capturing stream (CUDA graph "
          "capture needs the default backend, cudaMalloc)");
    void* p = nullptr;
    cudaError_t err = cudaMallocAsync(&p, bytes, as_stream(stream));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return 0;
    }
    check_cuda(err, "cudaMallocAsync");
    std::lock_guard<std::mutex> lock(mutex_);
    stream_of_[reinterpret_cast<uintptr_t>(p)] = stream;
    return reinterpret_cast<uintptr_t>(p);
  }
  void release(int device, uintptr_t address, size_t) override {
    DeviceScope scope(device);
    StreamId stream = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = stream_of_.find(address);
      if (it == stream_of_.end())
        throw BackendError("cudaMallocAsync backend: release of unknown segment");
      stream = it->second;
      stream_of_.erase(it);
    }
    check_cuda(cudaFreeAsync(reinterpret_cast<void*>(address), as_stream(stream)), "cudaFreeAsync");
  }

 private:
  std::mutex mutex_;
  absl::flat_hash_map<uintptr_t, StreamId> stream_of_;  // segment -> stream
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<DeviceBackend> make_cuda_runtime_backend() {
  return std::make_unique<CudaRuntimeBackend>();
}

std::unique_ptr<DeviceBackend> make_cuda_async_backend() {
  return std::make_unique<CudaAsyncBackend>();
}

void cuda_enable_peer_access(DeviceBackend& backend, int dev, int dev_to_access) {
  {
    DeviceScope scope(dev);
    const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      check_cuda(err, "cudaDeviceEnablePeerAccess");
    }
  }
  // cudaDeviceEnablePeerAccess does not reach memory mapped with cuMemMap:
  // expandable pages get their access explicitly (cudaMallocAsync pools
  // follow the runtime's peer access and need nothing more here).
  if (auto* runtime = dynamic_cast<CudaRuntimeBackend*>(&backend))
    runtime->pages().add_peer(dev_to_access, dev);
}

uintptr_t cuda_open_shared_expandable(DeviceBackend& backend, int device, std::string_view bytes) {
  return expandable_ipc_backend(backend).open_shared(device, bytes);
}

bool cuda_close_shared_expandable(DeviceBackend& backend, uintptr_t base) {
  auto* runtime = dynamic_cast<CudaRuntimeBackend*>(&backend);
  return runtime && runtime->close_shared(base);
}

}  // namespace cachealloc
