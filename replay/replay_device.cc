#include "replay/replay_device.h"

#include <cstdint>
#include <iterator>
#include <string>

#include "allocator/errors.h"

namespace cachealloc {

bool ReplayDevice::range_free(uintptr_t address, size_t bytes) const {
  if (address == 0 || bytes == 0 || bytes > UINTPTR_MAX - address) return false;
  return !memory_.overlaps(address, bytes);
}

uintptr_t ReplayDevice::allocate(int, size_t bytes, StreamId) {
  if (refusing_ || releases_before_allocating_ > 0 || !memory_.has_room(bytes)) return 0;
  uintptr_t address;
  if (primed_ && primed_->bytes == bytes && range_free(primed_->address, bytes)) {
    address = primed_->address;
  } else {
    // The first free range from next_unexpected_ on: the trace may have put
    // segments there too. Device full rather than wrap around.
    constexpr size_t kStep = 2097152;
    address = next_unexpected_;
    for (;;) {
      if (bytes > UINTPTR_MAX - address) return 0;
      if (range_free(address, bytes)) break;
      // Skip past the last live segment that starts inside the range (or
      // reaches into it from below).
      const auto blocker = std::prev(memory_.segments().upper_bound(address + bytes - 1));
      const uintptr_t end = blocker->first + blocker->second;  // range_free'd once: no wrap
      if (end > UINTPTR_MAX - kStep) return 0;
      address = (end + kStep - 1) / kStep * kStep;
    }
    const uintptr_t span = (bytes + kStep - 1) / kStep * kStep;
    next_unexpected_ = span > UINTPTR_MAX - address ? UINTPTR_MAX : address + span;
  }
  primed_.reset();
  memory_.add(address, bytes);
  return address;
}

void ReplayDevice::release(int, uintptr_t address, size_t bytes) {
  auto it = memory_.find(address, bytes);
  if (it == memory_.segments().end())
    throw BackendError("replay device: release of unknown segment " + std::to_string(address));
  memory_.remove(it);
  if (releases_before_allocating_ > 0) --releases_before_allocating_;
}

}  // namespace cachealloc
