// The free blocks a policy may take whole pages from when a mapping needs
// room (stitch and rescue reclaim through it): shared so that both pick
// the same blocks in the same order.
//
// A donor is a free block of an expandable segment holding at least one
// whole page, other than the free blocks touching [start, start + bytes)
// (the mapping joins those). Order: most whole-page bytes first (the fewest
// unmap calls for the bytes needed), ties by address (so the order does not
// depend on the free index's). Cost: O(free blocks) to scan, then a sort.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/engine/port/policy_engine.h"

namespace cachealloc {

struct PageDonor {
  Block* block;
  size_t pages;  // bytes of whole pages inside the block
};

std::vector<PageDonor> page_donors(PolicyEngine& engine, uintptr_t start, size_t bytes);

}  // namespace cachealloc
