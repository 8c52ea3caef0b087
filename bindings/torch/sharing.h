// What the glue adds for sharing memory with other processes and other
// allocators: CUDA IPC (torch.multiprocessing; ipc.cpp) and memory pools
// whose segments come from another allocator (torch.cuda.MemPool(
// allocator=...); foreign_pool.cpp). CacheallocTorchAllocator's overrides
// call these.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <memory>
#include <string>

namespace cachealloc_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;

// shareIpcHandle: the IPC handle of the segment holding `ptr` (a block
// cachealloc handed out), with ptr's offset in it, in torch 2.11's byte
// format, so a consumer under either allocator opens it.
CCA::ShareableHandle share_ipc_handle(void* ptr);
// getIpcDevPtr: the segment behind a handle from another process, opened
// on the current device; one opening per handle while any tensor holds it,
// closed when the last lets go (as native).
std::shared_ptr<void> open_ipc_handle(const std::string& handle);

// createOrIncrefPool with an allocator: makes pool `id` on `device`, whose
// segments come from allocator's raw_alloc and go back through its
// raw_delete (native's PrivatePool::allocator()). `self` is the glue's
// allocator, which cannot serve its own pool (it would wait on its own
// device lock).
void create_pool_with_allocator(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                std::shared_ptr<CCA::CUDAAllocator> allocator,
                                const CCA::CUDAAllocator* self);

// createOrIncrefPool's allocator argument as a shared_ptr: torch releases
// that pass a shared_ptr keep the allocator alive through it; those that
// pass a raw pointer leave its lifetime to Python's MemPool object (which
// holds the allocator as long as the pool is in use), as native does.
inline std::shared_ptr<CCA::CUDAAllocator> pool_allocator(
    std::shared_ptr<CCA::CUDAAllocator> allocator) {
  return allocator;
}
inline std::shared_ptr<CCA::CUDAAllocator> pool_allocator(CCA::CUDAAllocator* allocator) {
  return {allocator, [](CCA::CUDAAllocator*) {}};
}

}  // namespace cachealloc_torch
