#include "replay/recorded_address_device.h"

#include <cstdint>

#include "allocator/base/errors.h"

namespace cachealloc {

bool RecordedAddressDevice::range_free(uintptr_t address, size_t bytes) const {
  if (address == 0 || bytes == 0 || bytes > UINTPTR_MAX - address) return false;
  return !memory_.overlaps(address, bytes);
}

uintptr_t RecordedAddressDevice::unexpected_range(size_t bytes) {
  // The first free range from next_unexpected_ on, on a 2 MiB grid: the
  // trace may have put segments there too. Device full rather than wrap
  // around.
  constexpr size_t kStep = 2097152;
  const uintptr_t address = memory_.first_fit(next_unexpected_, bytes, kStep);
  if (address == 0) return 0;
  const uintptr_t span = (bytes + kStep - 1) / kStep * kStep;
  next_unexpected_ = span > UINTPTR_MAX - address ? UINTPTR_MAX : address + span;
  return address;
}

uintptr_t RecordedAddressDevice::allocate(int, size_t bytes, StreamId) {
  if (refusing() || !memory_.has_room(bytes)) return 0;
  uintptr_t address;
  if (primed_ && primed_->bytes == bytes && range_free(primed_->address, bytes)) {
    address = primed_->address;
  } else {
    address = unexpected_range(bytes);
    if (address == 0) return 0;
  }
  primed_.reset();
  memory_.add_segment(address, bytes);
  return address;
}

void RecordedAddressDevice::release(int device, uintptr_t address, size_t bytes) {
  SimulatedBackend::release(device, address, bytes);
  count_release();
}

uintptr_t RecordedAddressDevice::reserve_address_range(int, size_t bytes, size_t alignment) {
  uintptr_t base = reservation_source_ ? reservation_source_(bytes, alignment) : 0;
  if (!range_free(base, bytes)) base = unexpected_range(bytes);
  if (base == 0) throw BackendError("replay device: no address space for a reservation");
  memory_.add_reservation(base, bytes);
  return base;
}

bool RecordedAddressDevice::map_pages(int, uintptr_t address, size_t bytes, size_t page_bytes,
                                      PageCells cells, StreamId) {
  // A refusing device refuses the first page: nothing is mapped.
  return memory_.map_pages(address, bytes, page_bytes,
                           refusing() ? 0 : SimulatedMemory::kNoPageLimit, cells);
}

void RecordedAddressDevice::unmap_pages(int device, uintptr_t address, size_t bytes,
                                        size_t page_bytes, size_t cell_bytes, StreamId stream) {
  SimulatedBackend::unmap_pages(device, address, bytes, page_bytes, cell_bytes, stream);
  count_release();
}

}  // namespace cachealloc
