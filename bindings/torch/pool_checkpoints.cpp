// The glue's pool checkpoints (pool_checkpoints.h).
#include "bindings/torch/pool_checkpoints.h"

#include <c10/util/Exception.h>

#include <memory>
#include <utility>
#include <vector>

#include "bindings/c_api/cachealloc.h"

namespace cachealloc_torch {
namespace {

void check_status(int status) { TORCH_CHECK(status == 0, cachealloc_last_error()); }

// PyTorch's opaque state: owns the C API's checkpoint.
struct PoolCheckpointState final : CCA::AllocatorState {
  PoolCheckpointState(cachealloc_pool_checkpoint* saved, c10::DeviceIndex on)
      : checkpoint(saved), device(on) {}
  ~PoolCheckpointState() override { cachealloc_pool_checkpoint_release(checkpoint); }
  cachealloc_pool_checkpoint* checkpoint;
  c10::DeviceIndex device;
};

}  // namespace

std::shared_ptr<CCA::AllocatorState> save_pool_checkpoint(c10::DeviceIndex device,
                                                         c10::cuda::MempoolId_t id) {
  cachealloc_pool_checkpoint* raw = nullptr;
  check_status(cachealloc_pool_checkpoint_save(device, id.first, id.second, &raw));
  std::unique_ptr<cachealloc_pool_checkpoint, void (*)(cachealloc_pool_checkpoint*)> saved(
      raw, &cachealloc_pool_checkpoint_release);
  auto state = std::make_shared<PoolCheckpointState>(saved.get(), device);
  saved.release();  // the state owns it now
  return state;
}

CCA::CheckpointDelta restore_pool_checkpoint(c10::DeviceIndex device,
                                             const std::shared_ptr<CCA::AllocatorState>& state,
                                             c10::DeleterFnPtr deleter) {
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
    c10::DeleterFnPtr deleter;
    bool out_of_memory = false;
  } delta{{}, c10::Device(c10::DeviceType::CUDA, device), deleter};
  check_status(cachealloc_pool_checkpoint_restore(
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
          delta->out.dataptrs_allocd.emplace_back(p, p, delta->deleter, delta->device);
        } catch (...) {
          delta->out_of_memory = true;
        }
      },
      &delta));
  TORCH_CHECK(!delta.out_of_memory, "cachealloc: out of host memory listing a restored pool");
  return std::move(delta.out);
}

bool pool_live_allocations_match(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                 const std::unordered_set<void*>& expected) {
  std::vector<void*> ptrs(expected.begin(), expected.end());
  int match = 0;
  check_status(cachealloc_pool_live_allocations_match(device, id.first, id.second, ptrs.data(),
                                                      ptrs.size(), &match));
  return match != 0;
}

}  // namespace cachealloc_torch
