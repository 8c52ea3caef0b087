// The per-process memory limit: PyTorch's set_per_process_memory_fraction.
//
// While set, the cache may hold at most allowed_bytes from the device;
// a segment that would pass it is refused as if the device were full (no
// device call is made), and garbage collection measures its threshold
// against it.
#pragma once

#include <cstddef>

namespace cachealloc {

class MemoryLimit {
 public:
  bool is_set() const { return set_; }
  size_t allowed_bytes() const { return allowed_; }

  // allowed = floor(fraction * total_bytes), computed in double as native.
  void set_fraction(double fraction, size_t total_bytes) {
    set_bytes(static_cast<size_t>(fraction * static_cast<double>(total_bytes)));
  }
  void set_bytes(size_t allowed) {
    allowed_ = allowed;
    set_ = true;
  }
  void clear() { set_ = false; allowed_ = 0; }

  // Whether reserving `extra` more bytes on top of `reserved` passes the limit.
  bool refuses(size_t reserved, size_t extra) const {
    return set_ && reserved + extra > allowed_;
  }

 private:
  bool set_ = false;
  size_t allowed_ = 0;  // bytes
};

}  // namespace cachealloc
