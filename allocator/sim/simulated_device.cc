#include "allocator/sim/simulated_device.h"

#include <string>
#include <utility>

#include "allocator/base/errors.h"

namespace cachealloc {

SimulatedDevice::SimulatedDevice(size_t capacity, uintptr_t base)
    : SimulatedBackend("simulated device", capacity / kAlignment * kAlignment, kAlignment),
      base_(base) {}

uintptr_t SimulatedDevice::allocate(int, size_t bytes, StreamId) {
  if (refuse_next_ > 0) {
    --refuse_next_;
    return 0;
  }
  if (!memory_.has_room(bytes)) return 0;
  // First fit: the lowest gap from base on (segment footprints keep every
  // address on base's 2 MiB grid).
  const size_t footprint = memory_.footprint(bytes);
  const uintptr_t at = memory_.first_fit(base_, footprint, 1);
  if (at == 0 || at + footprint > base_ + memory_.capacity()) return 0;  // fragmented
  memory_.add_segment(at, bytes);
  return at;
}

uintptr_t SimulatedDevice::reserve_address_range(int, size_t bytes, size_t alignment) {
  return memory_.reserve_first_fit(base_ + kReserveOffset, bytes, alignment);
}

bool SimulatedDevice::map_pages(int, uintptr_t address, size_t bytes, size_t page_bytes,
                                PageCells cells, StreamId) {
  memory_.check_map_request(address, bytes, page_bytes, cells);
  const size_t refuse = std::exchange(refuse_page_, kNoFault);
  const size_t fail = std::exchange(fail_page_, kNoFault);
  // Pages are made one by one (cuMemCreate each): the injected driver error
  // at page `fail` happens only if no page before it was refused or lacked
  // room, and it too gives back the pages made before it.
  const size_t pages_with_room = memory_.free_bytes() / page_bytes;
  if (fail < bytes / page_bytes && fail < refuse && fail < pages_with_room)
    throw BackendError("simulated device: injected driver error mapping page " +
                       std::to_string(fail));
  return memory_.map_pages(address, bytes, page_bytes, refuse, cells);
}

}  // namespace cachealloc
