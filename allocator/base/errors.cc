#include "allocator/base/errors.h"

#include <algorithm>
#include <cstdio>

namespace cachealloc {

std::string format_size(size_t bytes) {
  char buf[64];
  if (bytes <= 1024) {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  } else if (bytes <= 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / 1024.0);
  } else if (bytes <= 1073741824ULL) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  }
  return buf;
}

// Native's text (DeviceCachingAllocator::malloc in torch 2.11), word for
// word, because tools and people match it. Native puts NVML's per-process
// report ("Including non-PyTorch memory, this process has ... in use. ")
// after "is free. "; the engine knows nothing of NVML, so the PyTorch glue
// inserts that report right after the first " is free. ".
static std::string oom_message(const OutOfMemoryError::Details& d) {
  std::string m = "CUDA out of memory. Tried to allocate " + format_size(d.allocation_bytes) +
                  ". GPU " + std::to_string(d.device) + " has a total capacity of " +
                  format_size(d.device_total) + " of which " + format_size(d.device_free) +
                  " is free. ";
  if (d.limit_set) m += format_size(d.allowed_bytes) + " allowed; ";
  const size_t unallocated = d.reserved_bytes - std::min(d.reserved_bytes, d.allocated_bytes);
  m += "Of the allocated memory " + format_size(d.allocated_bytes) +
       " is allocated by PyTorch, and " + format_size(unallocated) +
       " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
       "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
       "documentation for Memory Management  "
       "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  return m;
}

OutOfMemoryError::OutOfMemoryError(const Details& d)
    : CacheallocError(oom_message(d)), details_(d) {}

}  // namespace cachealloc
