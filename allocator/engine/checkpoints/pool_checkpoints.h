// Private pool checkpoints (the data: pool_checkpoint.h): saving a pool's
// segment layout and putting it back, as native's getCheckpointState and
// setCheckpointPoolState, and checkPoolLiveAllocations.
//
// It keeps no state of its own: a checkpoint is the caller's value, the
// pools are PrivatePools', the segments DeviceSegments'. A restore changes
// the pool only through the engine's own malloc and free steps (given as
// `free` and `carve`), so statistics and history see native's mallocs and
// frees, and the engine's invariants hold after it as after any of those.
// Its rules:
//   - a checkpoint lists each of the pool's segments in address order, its
//     blocks tiling it exactly;
//   - a restore checks everything first (restorable) and changes nothing
//     when it refuses; afterwards the pool's blocks are the checkpoint's
//     (same addresses, sizes and allocated flags).
// Every method throws std::invalid_argument, changing nothing, for an
// unknown pool or (checkpoint, restore) one released to use count 0,
// naming it. Costs: O(segments + blocks of the pool) plus the mallocs and
// frees of a restore.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "allocator/base/strong_hash.h"
#include "allocator/engine/blocks/block.h"
#include "allocator/engine/checkpoints/pool_checkpoint.h"
#include "allocator/engine/pools/private_pools.h"
#include "allocator/engine/segments/device_segments.h"
#include "allocator/engine/streams/stream_events.h"

namespace cachealloc {

class PoolCheckpoints {
 public:
  // The engine's free(block) of an allocated block.
  using Free = absl::FunctionRef<void(Block* block)>;
  // The engine's hand-out of the free, indexed `block` for `size` bytes,
  // cut down to them when `split`; returns the block handed out.
  using Carve = absl::FunctionRef<Block*(Block* block, size_t size, bool split)>;

  // The parts it reads and drives; each must outlive this.
  PoolCheckpoints(int device, PrivatePools& pools, const DeviceSegments& segments,
                  StreamEvents& events)
      : device_(device), pools_(pools), segments_(segments), events_(events) {}
  PoolCheckpoints(const PoolCheckpoints&) = delete;
  PoolCheckpoints& operator=(const PoolCheckpoints&) = delete;

  // native: getCheckpointState. The layout of pool `id`'s segments. Inserts
  // deferred events first, as native (even when it then refuses; PyTorch
  // checkpoints after a capture has ended). Throws if a block still waits
  // for stream events.
  PoolCheckpoint checkpoint(PoolId id, const ContextPtr& ctx);
  // native: setCheckpointPoolState. Frees every block allocated in the
  // pool, carves the checkpoint's blocks out again and frees those it had
  // free. Returns the addresses freed and the blocks left allocated, which
  // the caller now holds. Throws std::invalid_argument, before changing
  // anything, if a checkpointed segment is gone or differs (stream, pool
  // kind, bytes; blocks that do not tile it or two free neighbours), or a
  // block of the pool waits for events or was used on other streams. Only
  // std::bad_alloc can come later, with the pool part way.
  PoolRestore restore(const PoolCheckpoint& checkpoint, Free free, Carve carve);
  // The addresses of the blocks allocated in pool `id`, in address order.
  std::vector<uintptr_t> allocations(PoolId id) const;
  // native: checkPoolLiveAllocations. Whether those are exactly `expected`.
  bool allocations_are(PoolId id, const StrongHashSet<uintptr_t>& expected) const;

 private:
  // pools_.named, refusing a pool at use count 0.
  PrivatePool& live_pool(PoolId id, const char* what) const;
  // Throws, naming the problem, unless the pool (whose segment heads are
  // `heads`) can take `checkpoint`'s layout.
  void check_restorable(const PrivatePool& pool, const std::vector<const Block*>& heads,
                        const PoolCheckpoint& checkpoint) const;

  const int device_;
  PrivatePools& pools_;
  const DeviceSegments& segments_;
  StreamEvents& events_;
};

}  // namespace cachealloc
