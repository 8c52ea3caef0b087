// torch.cuda.MemPool(allocator=...): a private pool whose segments come from
// another allocator (a CUDAPluggableAllocator over ncclMemAlloc, a
// sleep-mode allocator over cuMemCreate, ...). The engine keeps the pool as
// any other (allocator/engine/pools/private_pool.h) and asks this allocator for
// segments, as native 2.11's allocPrimitive and release_block do: raw_alloc
// of the segment's size on the current device (and its current stream:
// native ignores the request's stream here too), raw_delete to give one
// back. A NULL from raw_alloc is an out-of-memory error in that pool.
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "bindings/c_api/cachealloc.h"
#include "bindings/torch/sharing.h"

namespace cachealloc_torch {
namespace {

struct PoolAllocator {
  std::shared_ptr<CCA::CUDAAllocator> allocator;
};

// This thread in relaxed stream-capture mode while it lives: native calls
// the pool's allocator so during a capture (cudaMallocMaybeCapturing), as
// a cudaMalloc there is not part of the graph; outside a capture the mode
// does not matter.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Called with the device's lock held. An exception from the allocator
// cannot cross the C API: it counts as the allocator's refusal (native
// would pass it on to the caller).
void* allocate_segment(void* user, size_t bytes, int device, void*) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    RelaxedCaptureMode relaxed;
    return static_cast<PoolAllocator*>(user)->allocator->raw_alloc(bytes);
  } catch (...) {
    return nullptr;
  }
}

int free_segment(void* user, void* ptr, size_t, int device) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    static_cast<PoolAllocator*>(user)->allocator->raw_delete(ptr);
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // namespace

void create_pool_with_allocator(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                std::shared_ptr<CCA::CUDAAllocator> allocator,
                                const CCA::CUDAAllocator* self) {
  TORCH_CHECK(allocator.get() != self,
              "cachealloc: MemPool(allocator=...) was given cachealloc's own allocator; "
              "use MemPool() for a pool of cachealloc's segments");
  auto* user = new PoolAllocator{std::move(allocator)};
  // The C API owns `user` from the call on, and deletes it (on failure at
  // once; else when the pool is erased).
  const int status = cachealloc_pool_create_with_allocator(
      device, id.first, id.second, &allocate_segment, &free_segment, user,
      [](void* u) { delete static_cast<PoolAllocator*>(u); });
  TORCH_CHECK(status == 0, cachealloc_last_error());
}

}  // namespace cachealloc_torch
