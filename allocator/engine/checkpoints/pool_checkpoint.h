// A private pool's state, saved and put back: what PyTorch's cudagraph
// trees (torch.compile(mode="reduce-overhead")) need to record a new CUDA
// graph after replaying others that share the pool.
//
// Why: during replay the allocator sees nothing (a graph's kernels write
// into the addresses baked in at capture), so after replaying graphs A and
// B the pool's state says only what was live at the end of B's capture.
// To capture a new graph C that branches off after B, PyTorch puts the
// pool back into the checkpoint taken after B's capture: every block
// allocated in the pool now is freed (its tensors are handled by PyTorch),
// the checkpoint's blocks are carved out again (same addresses and sizes)
// and those not live in the checkpoint are freed. See
// DeviceCachingAllocator::checkpoint_pool / restore_pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/engine/blocks/block.h"
#include "allocator/engine/pools/private_pool.h"

namespace cachealloc {

struct PoolCheckpoint {
  struct BlockState {
    uintptr_t address = 0;
    size_t size = 0;  // bytes
    bool allocated = false;
  };
  // One segment, its blocks in address order, tiling it exactly.
  struct SegmentState {
    StreamId stream = 0;
    bool is_small = false;
    std::vector<BlockState> blocks;
  };
  int device = 0;
  PoolId pool;
  std::vector<SegmentState> segments;  // address order
};

// What a restore changed: the addresses it freed (blocks allocated before
// it) and the blocks it left allocated (the checkpoint's live ones, each a
// new hand-out the caller now owns), in the order it handled them.
struct PoolRestore {
  std::vector<uintptr_t> freed;
  std::vector<Block*> allocated;
};

}  // namespace cachealloc
