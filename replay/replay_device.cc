#include "replay/replay_device.h"

#include <string>

#include "allocator/errors.h"

namespace cachealloc {

uintptr_t ReplayDevice::allocate(int, size_t bytes, StreamId) {
  if (bytes > capacity_ - used_) return 0;
  uintptr_t address;
  if (primed_ && primed_->bytes == bytes && !live_.contains(primed_->address)) {
    address = primed_->address;
  } else {
    address = next_unexpected_;
    next_unexpected_ += (bytes + 2097151) / 2097152 * 2097152;
  }
  primed_.reset();
  live_.emplace(address, bytes);
  used_ += bytes;
  return address;
}

void ReplayDevice::release(int, uintptr_t address, size_t bytes) {
  auto it = live_.find(address);
  if (it == live_.end() || it->second != bytes)
    throw BackendError("replay device: release of unknown segment " + std::to_string(address));
  live_.erase(it);
  used_ -= bytes;
}

}  // namespace cachealloc
