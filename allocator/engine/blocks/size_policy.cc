#include "allocator/engine/blocks/size_policy.h"

#include <bit>

namespace cachealloc {

size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (size <= 4 || divisions <= 1 || std::has_single_bit(size)) return size;
  const size_t floor = std::bit_floor(size);
  // Step = floor / 2^floor(log2(divisions)).
  const size_t step = floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  const size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

}  // namespace cachealloc
