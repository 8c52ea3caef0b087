#include "bindings/cuda/cuda_vmm_driver.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/base/errors.h"
#include "bindings/cuda/cuda_runtime_call.h"
#include "bindings/cuda/driver_api.h"

namespace cachealloc {
namespace {

CUmemAllocationHandleType driver_handle_type(ShareableHandle type) {
  switch (type) {
    case ShareableHandle::kNone: return CU_MEM_HANDLE_TYPE_NONE;
    case ShareableHandle::kPosixFd: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case ShareableHandle::kFabric: return CU_MEM_HANDLE_TYPE_FABRIC;
  }
  return CU_MEM_HANDLE_TYPE_NONE;
}

class CudaVmmDriver final : public VmmDriver {
 public:
  uintptr_t reserve(int device, size_t bytes, size_t alignment) override {
    const DriverApi& api = DriverApi::get();
    DeviceScope current(device);
    CUdeviceptr base = 0;
    check_driver(api.cuMemAddressReserve(&base, bytes, alignment, 0, 0), "cuMemAddressReserve");
    return static_cast<uintptr_t>(base);
  }
  void free_range(int device, uintptr_t base, size_t bytes) override {
    const DriverApi& api = DriverApi::get();
    DeviceScope current(device);
    check_driver(api.cuMemAddressFree(static_cast<CUdeviceptr>(base), bytes), "cuMemAddressFree");
  }
  VmmStatus create(int device, size_t bytes, ShareableHandle type, uint64_t* handle,
                   std::string* error) override {
    const DriverApi& api = DriverApi::get();
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = driver_handle_type(type);
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    // As native: RDMA-capable pages wherever the device supports the flag
    // with virtual memory management (NICs can then read them directly).
    if (rdma_capable(api, device)) prop.allocFlags.gpuDirectRDMACapable = 1;
    CUmemGenericAllocationHandle h = 0;
    const CUresult status = api.cuMemCreate(&h, bytes, &prop, 0);
    if (status == CUDA_SUCCESS) {
      *handle = static_cast<uint64_t>(h);
      return VmmStatus::kOk;
    }
    if (status == CUDA_ERROR_OUT_OF_MEMORY) return VmmStatus::kOutOfMemory;
    *error = "cuMemCreate of a " + std::string(shareable_handle_name(type)) + " page: " +
             driver_error_text("cuMemCreate", status);
    return VmmStatus::kFailed;
  }
  void release(int, uint64_t handle) override {
    check_driver(DriverApi::get().cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle)),
                 "cuMemRelease");
  }
  VmmStatus map(int device, uintptr_t address, size_t bytes, uint64_t handle,
                std::string* error) override {
    (void)device;
    const CUresult status =
        DriverApi::get().cuMemMap(static_cast<CUdeviceptr>(address), bytes, 0,
                                  static_cast<CUmemGenericAllocationHandle>(handle), 0);
    if (status == CUDA_SUCCESS) return VmmStatus::kOk;
    if (status == CUDA_ERROR_OUT_OF_MEMORY) return VmmStatus::kOutOfMemory;
    *error = driver_error_text("cuMemMap", status);
    return VmmStatus::kFailed;
  }
  void unmap(int, uintptr_t address, size_t bytes) override {
    check_driver(DriverApi::get().cuMemUnmap(static_cast<CUdeviceptr>(address), bytes), "cuMemUnmap");
  }
  void set_access(int, uintptr_t address, size_t bytes, int accessor) override {
    CUmemAccessDesc desc;
    std::memset(&desc, 0, sizeof desc);
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = accessor;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check_driver(DriverApi::get().cuMemSetAccess(static_cast<CUdeviceptr>(address), bytes, &desc, 1),
                 "cuMemSetAccess");
  }
  void synchronize(int device, StreamId stream) override {
    // cudaStreamSynchronize, never a call that could take Python's GIL (the
    // caller holds the device lock; native avoids the same deadlock).
    // Stream 0 is the legacy default stream of the current device.
    DeviceScope current(device);
    check_cuda(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)),
                  "cudaStreamSynchronize");
  }
  void export_handle(int, uint64_t handle, ShareableHandle type, std::string* out) override {
    const auto h = static_cast<CUmemGenericAllocationHandle>(handle);
    if (type == ShareableHandle::kFabric) {
      CUmemFabricHandle fabric;
      check_driver(DriverApi::get().cuMemExportToShareableHandle(&fabric, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
                   "cuMemExportToShareableHandle");
      out->append(reinterpret_cast<const char*>(&fabric), sizeof fabric);
      return;
    }
    int fd = -1;
    check_driver(DriverApi::get().cuMemExportToShareableHandle(
                     &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 "cuMemExportToShareableHandle");
    out->append(reinterpret_cast<const char*>(&fd), sizeof fd);
  }
  uint64_t import_handle(int device, const void* shareable, ShareableHandle type) override {
    DeviceScope current(device);
    CUmemGenericAllocationHandle h = 0;
    // A descriptor travels as the pointer's value, a fabric handle by address.
    void* arg = type == ShareableHandle::kFabric
                    ? const_cast<void*>(shareable)
                    : reinterpret_cast<void*>(static_cast<uintptr_t>(*static_cast<const int*>(shareable)));
    check_driver(DriverApi::get().cuMemImportFromShareableHandle(&h, arg, driver_handle_type(type)),
                 "cuMemImportFromShareableHandle");
    return static_cast<uint64_t>(h);
  }
  void synchronize_device(int device) override {
    DeviceScope current(device);
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, read once
  // per device.
  bool rdma_capable(const DriverApi& api, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<size_t>(device) >= rdma_.size()) rdma_.resize(static_cast<size_t>(device) + 1, -1);
    int& known = rdma_[static_cast<size_t>(device)];
    if (known < 0) {
      int flag = 0;
      check_driver(api.cuDeviceGetAttribute(
                       &flag, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, device),
                   "cuDeviceGetAttribute");
      known = flag != 0;
    }
    return known != 0;
  }

  std::mutex mutex_;
  std::vector<int> rdma_;  // per device: -1 unknown, 0/1
};

}  // namespace

std::unique_ptr<VmmDriver> make_cuda_vmm_driver() { return std::make_unique<CudaVmmDriver>(); }

bool expandable_ipc_handles_from_environment() {
  // As c10::utils::check_env: only "0" and "1" are values; anything else
  // (or unset) keeps the default, on.
  const char* v = std::getenv("TORCH_CUDA_EXPANDABLE_SEGMENTS_IPC");
  return !(v != nullptr && std::strcmp(v, "0") == 0);
}

}  // namespace cachealloc
