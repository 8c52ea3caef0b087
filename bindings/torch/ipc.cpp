// CUDA IPC for torch.multiprocessing under the glue: PyTorch's storage
// sharing (StorageSharing.cpp's _share_cuda_ / _new_shared_cuda) asks the
// current allocator for a handle of the block behind a storage and, in the
// consumer, for the memory behind a handle. PyTorch keeps the producer's
// block alive while consumers hold it (CudaIPCSentData and its ref-counter
// file), so the allocator supplies only the handle and its opening, as
// native's does; a freed block is not ours again until PyTorch frees it.
//
// The handle's bytes are native 2.11's (CUDACachingAllocator.cpp):
//   [version = 2][type = 'c'][cudaIpcMemHandle_t of the segment, 64 bytes]
// with ShareableHandle::offset the block's offset in its segment, and for
// a block in an expandable segment
//   [version = 2][type = 'e'][the pages' description, shared_pages.h]
// with the offset from the first page shared (the pages' handles exported
// with cuMemExportToShareableHandle, as native's ExpandableSegment::share).
// A bare 64-byte handle (torch before the version byte) is accepted too,
// and so is any version up to 2.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <thread>
#include <string>
#include <unordered_map>

#include "bindings/c_api/cachealloc.h"
#include "bindings/torch/sharing.h"

namespace cachealloc_torch {
namespace {

constexpr char kHandleVersion = 2;  // torch 2.11's SHAREABLE_HANDLE_VERSION
constexpr char kCudaMallocHandle = 'c';
constexpr char kExpandableHandle = 'e';
constexpr size_t kRawHandleBytes = sizeof(cudaIpcMemHandle_t);  // 64

// Native refuses CUDA IPC on its cudaMallocAsync backend with these words.
void refuse_async(const char* what) {
  TORCH_CHECK(std::strcmp(cachealloc_backend_name(), "async") != 0, "cudaMallocAsync does not yet support ", what,
              ". If you need it, please file an issue describing your use case.");
}

// An opened segment. Its destructor, when the last tensor holding the
// segment lets go, takes the entry out of the cache and closes the handle.
struct OpenedSegment {
  std::string handle;
  c10::DeviceIndex device = 0;
  void* base = nullptr;  // null until opened
  bool expandable = false;  // pages mapped by the library, not cudaIpcOpenMemHandle
  ~OpenedSegment();
};
// Opened segments by their handle's bytes: a cudaIpcMemHandle_t can be
// opened only once per process and context, and several storages may live
// in one segment.
struct IpcCache {
  std::mutex mutex;
  std::unordered_map<std::string, std::weak_ptr<OpenedSegment>> opened;
};
// Never destroyed: tensors that outlive static destruction close their
// handles through it.
IpcCache& cache() {
  static auto* c = new IpcCache;
  return *c;
}

OpenedSegment::~OpenedSegment() {
  if (!base) return;  // never opened (open_ipc_handle failed; it holds the lock)
  {
    std::lock_guard<std::mutex> lock(cache().mutex);
    cache().opened.erase(handle);
  }
  // A destructor must not throw: a failure to close is a warning (native's
  // entry.clear() would throw from here).
  c10::cuda::CUDAGuard guard(device);
  if (expandable) {
    if (cachealloc_close_shared_expandable(base) != 0)
      TORCH_WARN("cachealloc: ", cachealloc_last_error());
    return;
  }
  C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(base));
}

// The handle's type (kCudaMallocHandle or kExpandableHandle), its version
// checked; a bare 64-byte handle (torch before the version byte) is a
// cudaMalloc one.
char handle_type(const std::string& handle) {
  if (handle.size() == kRawHandleBytes) return kCudaMallocHandle;
  TORCH_CHECK(handle.size() >= 2, "cachealloc: a CUDA IPC handle of ", handle.size(),
              " bytes is too short to be one");
  TORCH_CHECK(handle[0] <= kHandleVersion,
              "received sharable handle from a future version of torch that this version does not "
              "know how to handle");
  TORCH_CHECK(handle[1] == kCudaMallocHandle || handle[1] == kExpandableHandle,
              "unexpected or illformed shareable handle type");
  return handle[1];
}

// The cudaIpcMemHandle_t of a handle of type kCudaMallocHandle.
cudaIpcMemHandle_t parse_handle(const std::string& handle) {
  cudaIpcMemHandle_t out;
  if (handle.size() == kRawHandleBytes) {  // from a torch before the version byte
    std::memcpy(&out, handle.data(), kRawHandleBytes);
    return out;
  }
  TORCH_CHECK(handle.size() == 2 + kRawHandleBytes, "cachealloc: a CUDA IPC handle of ",
              handle.size(), " bytes; expected ", 2 + kRawHandleBytes);
  std::memcpy(&out, handle.data() + 2, kRawHandleBytes);
  return out;
}

}  // namespace

CCA::ShareableHandle share_ipc_handle(void* ptr) {
  refuse_async("shareIpcHandle");
  {
    // [version][type] then the description: a few hundred bytes, written
    // in place; one retry with the length asked for when it is more.
    std::string bytes(2 + 1024, '\0');
    bytes[0] = kHandleVersion;
    bytes[1] = kExpandableHandle;
    size_t length = 0, offset = 0;
    int rc = cachealloc_share_expandable(ptr, bytes.data() + 2, bytes.size() - 2, &length, &offset);
    if (rc == -1 && length > bytes.size() - 2) {
      bytes.resize(2 + length);
      rc = cachealloc_share_expandable(ptr, bytes.data() + 2, length, &length, &offset);
    }
    TORCH_CHECK(rc != -1, cachealloc_last_error());
    if (rc == 0) {  // in an expandable segment
      bytes.resize(2 + length);
      return {static_cast<ptrdiff_t>(offset), std::move(bytes)};
    }
  }
  size_t segment_bytes = 0;
  void* base = cachealloc_base_allocation(ptr, &segment_bytes);
  TORCH_CHECK(base, cachealloc_last_error());  // not a block cachealloc handed out
  cudaIpcMemHandle_t handle;
  C10_CUDA_CHECK(cudaIpcGetMemHandle(&handle, base));
  std::string bytes;
  bytes.reserve(2 + kRawHandleBytes);
  bytes.push_back(kHandleVersion);
  bytes.push_back(kCudaMallocHandle);
  bytes.append(reinterpret_cast<const char*>(&handle), kRawHandleBytes);
  return {static_cast<char*>(ptr) - static_cast<char*>(base), std::move(bytes)};
}

std::shared_ptr<void> open_ipc_handle(const std::string& handle) {
  refuse_async("getIpcDevPtr");
  const bool expandable = handle_type(handle) == kExpandableHandle;
  cudaIpcMemHandle_t raw{};
  if (!expandable) raw = parse_handle(handle);
  IpcCache& c = cache();
  std::unique_lock<std::mutex> lock(c.mutex);
  for (auto it = c.opened.find(handle); it != c.opened.end(); it = c.opened.find(handle)) {
    if (auto held = it->second.lock()) return {held, held->base};
    // Its last holder is closing it right now: wait until it has.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  // Everything that can throw before the handle is opened; after it,
  // nothing does (a failed open takes its entry out again).
  auto segment = std::make_shared<OpenedSegment>();
  segment->handle = handle;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&segment->device));
  auto slot = c.opened.emplace(handle, segment).first;
  void* base = nullptr;
  if (expandable) {
    if (cachealloc_open_shared_expandable(segment->device, handle.data() + 2, handle.size() - 2,
                                          &base) != 0) {
      c.opened.erase(slot);
      TORCH_CHECK(false, cachealloc_last_error());
    }
    segment->expandable = true;
  } else {
    const cudaError_t err = cudaIpcOpenMemHandle(&base, raw, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      c.opened.erase(slot);
      C10_CUDA_CHECK(err);
    }
  }
  segment->base = base;
  return {segment, base};  // shares `segment`'s ownership, points at the memory
}

}  // namespace cachealloc_torch
