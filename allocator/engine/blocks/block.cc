// Block (block.h): the message of a broken block invariant.
#include "allocator/engine/blocks/block.h"

#include "allocator/base/errors.h"

namespace cachealloc {

void block_invariant_broken(const std::string& what, const Block* b) {
  throw InvariantViolation("invariant broken: " + what + " (block at " +
                           std::to_string(b->address) + ", " + std::to_string(b->size) +
                           " bytes)");
}

}  // namespace cachealloc
