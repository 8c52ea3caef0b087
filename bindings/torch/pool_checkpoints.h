// CUDA graph trees (torch.compile(mode="reduce-overhead")) checkpoint a
// graph pool after each capture and put it back before capturing a new
// graph that branches off (allocator/engine/checkpoints/pool_checkpoint.h
// says how). PyTorch's getCheckpointState, setCheckpointPoolState and
// checkPoolLiveAllocations, over the C API's pool checkpoints.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <memory>
#include <unordered_set>

namespace cachealloc_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;

// The layout of pool `id` on `device`, as PyTorch's opaque state. Throws
// c10::Error with the library's message (an unknown or released pool, a
// block waiting for stream events).
std::shared_ptr<CCA::AllocatorState> save_pool_checkpoint(c10::DeviceIndex device,
                                                         c10::cuda::MempoolId_t id);
// Puts the pool back into `state` (from save_pool_checkpoint, same device):
// the pointers freed, and DataPtrs with `deleter` (the glue's) for the
// blocks left allocated, which PyTorch hands to their storages. Throws
// c10::Error before changing anything for a foreign state or a refused
// restore; after the restore (which cannot be undone) only for want of host
// memory listing what it did.
CCA::CheckpointDelta restore_pool_checkpoint(c10::DeviceIndex device,
                                             const std::shared_ptr<CCA::AllocatorState>& state,
                                             c10::DeleterFnPtr deleter);
// Whether the blocks allocated in pool `id` are exactly `expected`.
bool pool_live_allocations_match(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                 const std::unordered_set<void*>& expected);

}  // namespace cachealloc_torch
