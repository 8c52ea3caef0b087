// process_memory_report (process_memory.h), over NVML opened by dlopen.
#include "bindings/torch/process_memory.h"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>  // format_size, wherever a release keeps it
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

namespace cachealloc_torch {

std::string process_memory_report(int device) {
  struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t, which the unversioned call fills
    unsigned int pid;
    unsigned long long used_gpu_memory;
  };
  using Init = int (*)();
  using ByBusId = int (*)(const char*, void**);
  using Processes = int (*)(void*, unsigned int*, ProcessInfoV1*);
  static const auto nvml = []() -> std::tuple<ByBusId, Processes> {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return {nullptr, nullptr};
    auto init = reinterpret_cast<Init>(dlsym(h, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<ByBusId>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
    auto procs = reinterpret_cast<Processes>(dlsym(h, "nvmlDeviceGetComputeRunningProcesses"));
    if (!init || !by_bus || !procs || init() != 0) return {nullptr, nullptr};
    return {by_bus, procs};
  }();
  const auto [by_bus, procs] = nvml;
  if (!by_bus) return "";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  char bus_id[80];
  std::snprintf(bus_id, sizeof bus_id, "%08X:%02X:%02X.0", prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID);
  void* handle = nullptr;
  if (by_bus(bus_id, &handle) != 0) return "";
  constexpr int kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::vector<ProcessInfoV1> list(8);
  unsigned int count = static_cast<unsigned int>(list.size());
  int status;
  while ((status = procs(handle, &count, list.data())) == kInsufficientSize) list.resize(count);
  if (status != 0) return "";
  const unsigned int self = static_cast<unsigned int>(getpid());
  std::string out;
  for (unsigned int i = 0; i < count; ++i) {
    out += list[i].pid == self ? std::string("Including non-PyTorch memory, this process")
                               : "Process " + std::to_string(list[i].pid);
    out += " has " + c10::CachingAllocator::format_size(list[i].used_gpu_memory) +
           " memory in use. ";
  }
  return out;
}

}  // namespace cachealloc_torch
