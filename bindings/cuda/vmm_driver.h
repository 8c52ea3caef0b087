// The virtual-memory primitives VmmPages needs from a device, one call per
// CUDA driver function (cuMemAddressReserve, cuMemCreate, cuMemMap, ...).
// CUDA-free on purpose: the page bookkeeping (vmm_pages.h) is compiled and
// tested on machines without CUDA, against a driver that injects faults;
// cuda_vmm_driver.h is the real one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "allocator/base/device_backend.h"

namespace cachealloc {

// The shareable handle type pages are created with (CUmemAllocationProp::
// requestedHandleTypes): what another process may later import them as.
enum class ShareableHandle {
  kNone,     // no export (TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC=0)
  kPosixFd,  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  kFabric,   // CU_MEM_HANDLE_TYPE_FABRIC (multi-node NVLink); refused on most machines
};

const char* shareable_handle_name(ShareableHandle type);

// How a create or map ended. kFailed carries the driver's error text.
enum class VmmStatus { kOk, kOutOfMemory, kFailed };

// Addresses are device virtual addresses, handles the driver's opaque
// CUmemGenericAllocationHandle values. Calls that cannot run out of memory
// throw BackendError on failure.
class VmmDriver {
 public:
  virtual ~VmmDriver() = default;

  // cuMemAddressReserve: `bytes` of address space, aligned to `alignment`
  // (0: the driver's granularity). Throws on failure.
  virtual uintptr_t reserve(int device, size_t bytes, size_t alignment) = 0;
  // cuMemAddressFree of a whole reserved range.
  virtual void free_range(int device, uintptr_t base, size_t bytes) = 0;
  // cuMemCreate: `bytes` of physical memory on `device`, pinned, exportable
  // as `type`, GPUDirect-RDMA capable where the device supports that with
  // virtual memory management. On kFailed, *error says why.
  virtual VmmStatus create(int device, size_t bytes, ShareableHandle type, uint64_t* handle,
                           std::string* error) = 0;
  // cuMemRelease of a handle from create().
  virtual void release(int device, uint64_t handle) = 0;
  // cuMemMap of a whole handle at `address`. On kFailed, *error says why.
  virtual VmmStatus map(int device, uintptr_t address, size_t bytes, uint64_t handle,
                        std::string* error) = 0;
  // cuMemUnmap of [address, address + bytes).
  virtual void unmap(int device, uintptr_t address, size_t bytes) = 0;
  // cuMemSetAccess: read-write access for `accessor` to [address, address +
  // bytes), every byte of it mapped.
  virtual void set_access(int device, uintptr_t address, size_t bytes, int accessor) = 0;
  // Waits for the work queued so far on `stream` of `device`.
  virtual void synchronize(int device, StreamId stream) = 0;

  // CUDA IPC of pages (native's ExpandableSegment::share / fromShared). A
  // driver without it keeps these defaults, which throw BackendError.
  // cuMemExportToShareableHandle of a handle from create() as `type`,
  // appended to `out` as native writes it: a POSIX descriptor as its 4-byte
  // int (the descriptor is then this process's, open until closed), a
  // fabric handle as its 64 bytes.
  virtual void export_handle(int device, uint64_t handle, ShareableHandle type, std::string* out);
  // cuMemImportFromShareableHandle: `shareable` is a descriptor of this
  // process (type kPosixFd) or the 64 bytes of a fabric handle.
  virtual uint64_t import_handle(int device, const void* shareable, ShareableHandle type);
  // Waits for all work on `device` (native's close of an imported segment,
  // which has no stream of its own).
  virtual void synchronize_device(int device);
};

}  // namespace cachealloc
