// Where an allocation came from: the caller's stack, captured by the
// bindings (Python frames, C++ frames) and carried through the engine
// untouched so history entries and snapshots can show it.
#pragma once

#include <memory>
#include <vector>

#include "allocator/base/shared_string.h"

namespace cachealloc {

// The text is shared, not copied: a stack holds a reference to each name,
// so frames naming the same function or file (across stacks, or one
// string a pickle references many times) cost its bytes once.
struct StackFrame {
  SharedString name;      // function name
  SharedString filename;  // source file
  int line = 0;           // 1-based line number
};

struct CallContext {
  std::vector<StackFrame> frames;  // innermost first, as PyTorch lists them
  // A context object of the embedding framework, kept alive with this one
  // and handed back untouched (PyTorch's GatheredContext, so snapshots built
  // by PyTorch symbolize frames exactly as it does for its own allocator).
  std::shared_ptr<void> opaque;
};

// Shared and immutable: one captured stack may be referenced by the block,
// its segment and several history entries.
using ContextPtr = std::shared_ptr<const CallContext>;

}  // namespace cachealloc
