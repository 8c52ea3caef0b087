#include "allocator/policy/page_donors.h"

#include <algorithm>

#include "allocator/engine/expandable/expandable_segment.h"

namespace cachealloc {

std::vector<PageDonor> page_donors(PolicyEngine& engine, uintptr_t start, size_t bytes) {
  std::vector<PageDonor> donors;
  engine.for_each_free_block([&](Block* b) {
    if (!b->expandable) return;
    if (b->address + b->size == start || b->address == start + bytes) return;  // joined
    const size_t pages =
        PolicyEngine::whole_page_bytes(*engine.segment_of(b->address), b->address, b->size);
    if (pages > 0) donors.push_back({b, pages});
  });
  std::sort(donors.begin(), donors.end(), [](const PageDonor& a, const PageDonor& b) {
    return a.pages != b.pages ? a.pages > b.pages : a.block->address < b.block->address;
  });
  return donors;
}

}  // namespace cachealloc
