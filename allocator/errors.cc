#include "allocator/errors.h"

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

static std::string oom_message(const OutOfMemoryError::Details& d) {
  std::string m = "CUDA out of memory. Tried to allocate " +
                  format_size(d.allocation_bytes) + ". GPU " +
                  std::to_string(d.device) + " has a total capacity of " +
                  format_size(d.device_total) + " of which " +
                  format_size(d.device_free) + " is free. ";
  if (d.limit_set) m += format_size(d.allowed_bytes) + " allowed; ";
  m += "Of the allocated memory " + format_size(d.allocated_bytes) +
       " is allocated by PyTorch (cachealloc), and " +
       format_size(d.reserved_bytes - d.allocated_bytes) +
       " is reserved by PyTorch (cachealloc) but unallocated. If reserved but "
       "unallocated memory is large, try a smaller max_split_size_mb or "
       "replay the trace with `cachealloc compare` to find a layout that "
       "fragments less.";
  return m;
}

OutOfMemoryError::OutOfMemoryError(const Details& d)
    : CacheallocError(oom_message(d)), details_(d) {}

}  // namespace cachealloc
