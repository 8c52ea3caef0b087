// The bookkeeping every simulated device shares (SimulatedDevice here,
// replay's ReplayDevice, the lab's WhatIfDevice): the live segments, the
// bytes they hold out of a fixed capacity, and events that complete when
// the device's owner says so. Each device adds its own placement rule
// (first fit, recorded addresses, address hints) and its own refusals.
//
// Not thread-safe. Costs: O(log n) per segment added, found or removed,
// for n live segments; O(1) per event.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "allocator/device_backend.h"

namespace cachealloc {

class SimulatedMemory {
 public:
  // Live segments: address -> bytes asked for. Ordered, for placement and
  // overlap checks.
  using Segments = std::map<uintptr_t, size_t>;

  // capacity: bytes. alignment: a segment holds its size rounded up to a
  // multiple of this (1: exactly its size).
  SimulatedMemory(size_t capacity, size_t alignment)
      : capacity_(capacity), alignment_(alignment) {}

  // The bytes a segment of `bytes` holds.
  size_t footprint(size_t bytes) const { return (bytes + alignment_ - 1) / alignment_ * alignment_; }
  // Whether a segment of `bytes` (> 0) fits in the free bytes, wherever it
  // would go.
  bool has_room(size_t bytes) const {
    return bytes != 0 && footprint(bytes) <= capacity_ - used_;
  }
  // Whether [address, address + extent) overlaps a live segment's
  // footprint. Precondition: the range does not wrap around.
  bool overlaps(uintptr_t address, size_t extent) const {
    auto next = segments_.lower_bound(address);
    if (next != segments_.end() && next->first - address < extent) return true;
    if (next == segments_.begin()) return false;
    auto prev = std::prev(next);
    return address - prev->first < footprint(prev->second);
  }
  // Precondition: has_room(bytes) and !overlaps(address, footprint(bytes)).
  void add(uintptr_t address, size_t bytes) {
    segments_.emplace(address, bytes);
    used_ += footprint(bytes);
  }
  // The live segment at `address` of exactly `bytes`, or segments().end().
  Segments::const_iterator find(uintptr_t address, size_t bytes) const {
    auto it = segments_.find(address);
    return it != segments_.end() && it->second == bytes ? it : segments_.end();
  }
  // Removes a segment find() returned; returns the segment after it.
  Segments::const_iterator remove(Segments::const_iterator it) {
    used_ -= footprint(it->second);
    return segments_.erase(it);
  }

  const Segments& segments() const { return segments_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  DeviceMemoryInfo info() const { return {capacity_ - used_, capacity_}; }

  // Events. An event recorded pending stays so until complete(); one
  // recorded otherwise is complete at once. Ids count up from 1.
  EventId record_event(bool pending) {
    if (pending) pending_.insert(next_event_);
    return next_event_++;
  }
  bool event_completed(EventId event) const { return !pending_.contains(event); }
  // Unknown or completed events are ignored.
  void complete_event(EventId event) { pending_.erase(event); }
  void complete_all_events() { pending_.clear(); }
  // The event recorded last (0 before the first).
  EventId last_event() const { return next_event_ - 1; }

 private:
  const size_t capacity_;
  const size_t alignment_;
  size_t used_ = 0;  // sum of the live segments' footprints
  Segments segments_;
  EventId next_event_ = 1;
  absl::flat_hash_set<EventId> pending_;
};

}  // namespace cachealloc
