// The first Block of every segment of one engine (and of every mapped range
// of its expandable segments): how it enumerates its segments. A segment's
// head Block lives as long as the segment (device_segments.h).
//
// A vector, not a hash set: once the device has handed out a segment (or
// mapped or unmapped pages), recording its head must not fail, since that
// step cannot be taken back. So the room comes first (reserve_one(), which
// may throw std::bad_alloc, changing nothing) and insert() then never
// allocates. A node-based set allocates in its insert, and absl's
// flat_hash_set cannot take a failed allocation (allocator/base/
// strong_hash.h).
//
// Order: unspecified (erase moves the last head into the hole); whoever
// needs address order sorts. Costs: insert O(1); erase and contains O(n) in
// the number of segments, paid only when segments come and go (beside a
// device call) and in invariant checks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "allocator/engine/blocks/block.h"

namespace cachealloc {

class SegmentHeads {
 public:
  using const_iterator = std::vector<Block*>::const_iterator;

  // Room for one more head: the next insert() cannot throw. Grows
  // geometrically (amortised O(1)). Throws std::bad_alloc, nothing changed.
  void reserve_one() {
    if (heads_.size() == heads_.capacity()) heads_.reserve(std::max<size_t>(16, 2 * heads_.size()));
  }
  // Records a new head. Precondition: not a head already; reserve_one()
  // since the last insert (then this never throws).
  void insert(Block* head) { heads_.push_back(head); }
  // Forgets a head (its segment was released, or it joined the range
  // below). Never throws; a Block that is no head is ignored.
  void erase(const Block* head) noexcept {
    auto it = std::find(heads_.begin(), heads_.end(), head);
    if (it == heads_.end()) return;
    *it = heads_.back();
    heads_.pop_back();
  }
  bool contains(const Block* head) const {
    return std::find(heads_.begin(), heads_.end(), head) != heads_.end();
  }
  size_t size() const { return heads_.size(); }
  const_iterator begin() const { return heads_.begin(); }
  const_iterator end() const { return heads_.end(); }

 private:
  std::vector<Block*> heads_;
};

}  // namespace cachealloc
