#include "replay/replay_device.h"

#include <cstdint>
#include <iterator>
#include <string>

#include "allocator/errors.h"

namespace cachealloc {

bool ReplayDevice::range_free(uintptr_t address, size_t bytes) const {
  if (address == 0 || bytes == 0 || bytes > UINTPTR_MAX - address) return false;
  auto next = live_.lower_bound(address);
  if (next != live_.end() && next->first - address < bytes) return false;
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    if (address - prev->first < prev->second) return false;
  }
  return true;
}

uintptr_t ReplayDevice::unexpected_range(size_t bytes) {
  // The first free range from next_unexpected_ on: the trace may have put
  // segments there too. Device full rather than wrap around.
  constexpr size_t kStep = 2097152;
  uintptr_t address = next_unexpected_;
  for (;;) {
    if (bytes > UINTPTR_MAX - address) return 0;
    if (range_free(address, bytes)) break;
    // Skip past the last live segment that starts inside the range (or
    // reaches into it from below).
    const auto blocker = std::prev(live_.upper_bound(address + bytes - 1));
    const uintptr_t end = blocker->first + blocker->second;  // range_free'd once: no wrap
    if (end > UINTPTR_MAX - kStep) return 0;
    address = (end + kStep - 1) / kStep * kStep;
  }
  const uintptr_t span = (bytes + kStep - 1) / kStep * kStep;
  next_unexpected_ = span > UINTPTR_MAX - address ? UINTPTR_MAX : address + span;
  return address;
}

uintptr_t ReplayDevice::allocate(int, size_t bytes, StreamId) {
  if (refusing_ || releases_before_allocating_ > 0 || bytes == 0 || bytes > capacity_ - used_)
    return 0;
  uintptr_t address;
  if (primed_ && primed_->bytes == bytes && range_free(primed_->address, bytes)) {
    address = primed_->address;
  } else {
    address = unexpected_range(bytes);
    if (address == 0) return 0;
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
  if (releases_before_allocating_ > 0) --releases_before_allocating_;
}

bool ReplayDevice::reserved(uintptr_t address) const {
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return false;
  --it;
  return address - it->first < it->second;
}

uintptr_t ReplayDevice::reserve_address_range(int, size_t bytes, size_t alignment) {
  uintptr_t base = reservation_source_ ? reservation_source_(bytes, alignment) : 0;
  if (base == 0 || !range_free(base, bytes)) base = unexpected_range(bytes);
  if (base == 0) throw BackendError("replay device: no address space for a reservation");
  live_.emplace(base, bytes);
  reservations_.emplace(base, bytes);
  return base;
}

void ReplayDevice::release_address_range(int, uintptr_t base, size_t bytes) {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes)
    throw BackendError("replay device: release of unknown reservation " + std::to_string(base));
  reservations_.erase(it);
  live_.erase(base);
}

bool ReplayDevice::map_pages(int, uintptr_t address, size_t bytes, size_t, StreamId) {
  if (!reserved(address) || !reserved(address + bytes - 1))
    throw BackendError("replay device: mapping outside a reservation at " +
                       std::to_string(address));
  if (refusing_ || releases_before_allocating_ > 0 || bytes > capacity_ - used_) return false;
  used_ += bytes;
  return true;
}

void ReplayDevice::unmap_pages(int, uintptr_t, size_t bytes, size_t, StreamId) {
  used_ -= bytes;
  if (releases_before_allocating_ > 0) --releases_before_allocating_;
}

}  // namespace cachealloc
