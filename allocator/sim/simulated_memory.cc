#include "allocator/sim/simulated_memory.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/base/page_handles.h"

namespace cachealloc {
namespace {

// Whether [address, address + extent) meets an extent of `extents`, each
// of which spans extent_of(bytes) bytes.
template <typename ExtentOf>
bool meets(const SimulatedMemory::Extents& extents, uintptr_t address, size_t extent,
           ExtentOf extent_of) {
  auto next = extents.lower_bound(address);
  if (next != extents.end() && next->first - address < extent) return true;
  if (next == extents.begin()) return false;
  auto prev = std::prev(next);
  return address - prev->first < extent_of(prev->second);
}

size_t exactly(size_t bytes) { return bytes; }

}  // namespace

bool SimulatedMemory::overlaps(uintptr_t address, size_t extent) const {
  return meets(segments_, address, extent, [this](size_t b) { return footprint(b); }) ||
         meets(reservations_, address, extent, exactly);
}

uintptr_t SimulatedMemory::first_fit(uintptr_t from, size_t extent, size_t alignment) const {
  // Walk segments and reservations merged in address order, from the last
  // of each that starts at or below `from` (it may reach past it). Every
  // position skipped lies inside the extent that moved `a` past it.
  auto s = segments_.upper_bound(from);
  if (s != segments_.begin()) --s;
  auto r = reservations_.upper_bound(from);
  if (r != reservations_.begin()) --r;
  uintptr_t a = from;
  for (;;) {
    if (extent > UINTPTR_MAX - a) return 0;
    uintptr_t start, end;
    if (s != segments_.end() && (r == reservations_.end() || s->first < r->first)) {
      start = s->first;
      end = start + footprint(s->second);
      ++s;
    } else if (r != reservations_.end()) {
      start = r->first;
      end = start + r->second;
      ++r;
    } else {
      return a;
    }
    if (end <= a) continue;
    if (start >= a && start - a >= extent) return a;
    if (end > UINTPTR_MAX - (alignment - 1)) return 0;
    a = (end + alignment - 1) / alignment * alignment;
  }
}

void SimulatedMemory::add_segment(uintptr_t address, size_t bytes) {
  segments_.emplace(address, bytes);
  used_ += footprint(bytes);
}

void SimulatedMemory::remove_segment(uintptr_t address, size_t bytes) {
  auto it = segments_.find(address);
  if (it == segments_.end() || it->second != bytes)
    throw BackendError(std::string(name_) + ": release of unknown segment at " +
                       std::to_string(address) + " (" + std::to_string(bytes) + " bytes)");
  used_ -= footprint(bytes);
  segments_.erase(it);
}

void SimulatedMemory::add_reservation(uintptr_t base, size_t bytes) {
  reservations_.emplace(base, bytes);
}

uintptr_t SimulatedMemory::reserve_first_fit(uintptr_t from, size_t bytes, size_t alignment) {
  if (bytes == 0 || alignment == 0)
    throw BackendError(std::string(name_) + ": empty reservation or alignment 0");
  const uintptr_t start = from > UINTPTR_MAX - (alignment - 1)
                              ? 0
                              : (from + alignment - 1) / alignment * alignment;
  const uintptr_t base = start == 0 ? 0 : first_fit(start, bytes, alignment);
  if (base == 0)
    throw BackendError(std::string(name_) + ": no address space left for a reservation of " +
                       std::to_string(bytes) + " bytes");
  add_reservation(base, bytes);
  return base;
}

void SimulatedMemory::remove_reservation(uintptr_t base, size_t bytes) {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != bytes)
    throw BackendError(std::string(name_) + ": release of unknown reservation at " +
                       std::to_string(base));
  auto page = pages_.lower_bound(base);
  if (page != pages_.end() && page->first - base < bytes)
    throw BackendError(std::string(name_) + ": reservation at " + std::to_string(base) +
                       " released with pages still mapped");
  reservations_.erase(it);
}

bool SimulatedMemory::reserved(uintptr_t address, size_t bytes) const {
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return false;
  --it;
  const uintptr_t offset = address - it->first;
  return offset < it->second && bytes <= it->second - offset;
}

void SimulatedMemory::check_map_request(uintptr_t address, size_t bytes, size_t page_bytes,
                                        PageCells cells) const {
  if (page_bytes == 0 || bytes == 0 || bytes % page_bytes != 0 || !reserved(address, bytes) ||
      !valid_cells(bytes, page_bytes, cells))
    throw BackendError(std::string(name_) + ": map of " + std::to_string(bytes) + " bytes at " +
                       std::to_string(address) + " outside a reservation or not whole pages");
  auto next = pages_.lower_bound(address);
  if (next != pages_.end() && next->first - address < bytes)
    throw BackendError(std::string(name_) + ": page at " + std::to_string(next->first) +
                       " mapped twice");
  if (next != pages_.begin()) {
    auto prev = std::prev(next);
    if (address - prev->first < prev->second)
      throw BackendError(std::string(name_) + ": page at " + std::to_string(prev->first) +
                         " mapped twice");
  }
}

bool SimulatedMemory::map_pages(uintptr_t address, size_t bytes, size_t page_bytes,
                                size_t page_limit, PageCells cells) {
  check_map_request(address, bytes, page_bytes, cells);
  const size_t handles = page_handle_count(bytes, page_bytes, cells);
  // Handles are made one by one on a real device: the first that is
  // refused, or does not fit, ends the call with the ones before it given
  // back (each made, then released).
  if (page_limit < handles || bytes > capacity_ - used_) {
    // Handles before the first that is refused or lacks room were made
    // and are released again; the refused one's create counts too.
    size_t made = 0, room = capacity_ - used_;
    bool stopped = false;
    for_each_page_handle(address, bytes, page_bytes, cells, [&](uintptr_t, size_t h) {
      if (stopped || made == page_limit || h > room) {
        stopped = true;
        return;
      }
      room -= h;
      ++made;
    });
    calls_.creates += made + 1;
    calls_.releases += made;
    return false;
  }
  auto hint = pages_.lower_bound(address);
  uintptr_t p = address;
  try {
    for_each_page_handle(address, bytes, page_bytes, cells, [&](uintptr_t at, size_t h) {
                           hint = std::next(pages_.emplace_hint(hint, at, h));
                           p = at + h;
                         });
  } catch (...) {
    pages_.erase(pages_.lower_bound(address), pages_.lower_bound(p));  // the pages made
    throw;
  }
  used_ += bytes;
  calls_.creates += handles;
  calls_.maps += handles;
  calls_.set_access += 1;
  return true;
}

void SimulatedMemory::unmap_pages(uintptr_t address, size_t bytes, size_t page_bytes,
                                  size_t cell_bytes) {
  if (page_bytes == 0 || bytes % page_bytes != 0 ||
      (cell_bytes != 0 && !valid_cells(cell_bytes, page_bytes, {cell_bytes, 1})))
    throw BackendError(std::string(name_) + ": unmap of partial pages");
  // Each handle in the range whole, of page_bytes or (with cells)
  // cell_bytes, one after another from `address` to its end.
  const auto first = pages_.find(address);
  auto it = first;
  size_t handles = 0;
  for (uintptr_t p = address; p - address < bytes; ++it, ++handles) {
    if (it == pages_.end() || it->first != p ||
        (it->second != page_bytes && (cell_bytes == 0 || it->second != cell_bytes)))
      throw BackendError(std::string(name_) + ": unmap of a page that is not mapped at " +
                         std::to_string(p));
    if (it->second > bytes - (p - address))
      throw BackendError(std::string(name_) + ": unmap of part of a handle at " +
                         std::to_string(p));
    p += it->second;
  }
  if (bytes != 0) pages_.erase(first, it);
  used_ -= bytes;
  calls_.syncs += 1;
  calls_.unmaps += handles;
  calls_.releases += handles;
}

EventId SimulatedMemory::record_event() {
  const EventId id = next_event_;
  live_events_.insert(id);
  if (hold_events_) {
    try {
      pending_.insert(id);
    } catch (...) {
      live_events_.erase(id);
      throw;
    }
  }
  ++next_event_;
  return id;
}

void SimulatedMemory::destroy_event(EventId event) {
  if (live_events_.erase(event) == 0)
    throw BackendError(std::string(name_) + ": unknown event " + std::to_string(event));
  pending_.erase(event);
}

void SimulatedMemory::fail(const std::string& what) const {
  throw InvariantViolation(std::string(name_) + ": " + what);
}

void SimulatedMemory::check() const {
  // Segments and reservations: disjoint, none wrapping around.
  std::vector<std::pair<uintptr_t, size_t>> extents;  // start, extent
  size_t held = 0;
  for (const auto& [address, bytes] : segments_) {
    if (bytes == 0 || footprint(bytes) < bytes) fail("segment of 0 bytes or too large to align");
    extents.emplace_back(address, footprint(bytes));
    held += footprint(bytes);
  }
  for (const auto& [base, bytes] : reservations_) extents.emplace_back(base, bytes);
  std::sort(extents.begin(), extents.end());
  uintptr_t end = 0;
  for (const auto& [start, extent] : extents) {
    if (extent == 0 || extent > UINTPTR_MAX - start)
      fail("an empty range, or one wrapping around, at " + std::to_string(start));
    if (start < end) fail("segments or reservations overlap at " + std::to_string(start));
    end = start + extent;
  }
  // Pages: disjoint, each inside one reservation.
  end = 0;
  for (const auto& [page, bytes] : pages_) {
    if (!reserved(page, bytes)) fail("page outside a reservation at " + std::to_string(page));
    if (page < end) fail("pages overlap at " + std::to_string(page));
    end = page + bytes;
    held += bytes;
  }
  if (held != used_)
    fail("used bytes " + std::to_string(used_) + " but segments and pages hold " +
         std::to_string(held));
  if (used_ > capacity_) fail("more bytes used than the capacity");
  for (EventId e : pending_)
    if (!live_events_.contains(e)) fail("pending event " + std::to_string(e) + " is not live");
  for (EventId e : live_events_)
    if (e == 0 || e >= next_event_) fail("live event " + std::to_string(e) + " never recorded");
}

}  // namespace cachealloc
