// Where an allocation came from: the caller's stack, captured by the
// bindings (Python frames, C++ frames) and carried through the engine
// untouched so history entries and snapshots can show it.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace cachealloc {

struct StackFrame {
  std::string name;      // function name
  std::string filename;  // source file
  int line = 0;          // 1-based line number
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
