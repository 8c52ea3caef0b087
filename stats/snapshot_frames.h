// Stacks (ContextPtr) as a snapshot's "frames" lists, sharing what the
// stacks share, as native's snapshot does (it builds one dict per distinct
// frame and one list per distinct traceback):
//
//   - one list per context: the entries and blocks that hold one context
//     (a block and its alloc/free entries; replayed entries whose recorded
//     frames were one pickle list) hold one list;
//   - one dict per distinct frame (same name text, same file name text, same
//     line), shared by every list that holds the frame;
//   - the strings are the contexts' own (SharedString boxes), not copies.
//
// The pickle writer writes a shared list, dict or string once and refers to
// it after that, so both the tree and the pickle follow the distinct stacks
// and frames, not the number of references to them. Without this, a replayed
// trace whose entries each referenced one long name from many frames needed
// the name's length times the references, twice (tree and writer).
#pragma once

#include <string>
#include <tuple>
#include <utility>

#include "allocator/base/call_context.h"
#include "allocator/base/strong_hash.h"
#include "pickle/py_value.h"

namespace cachealloc {

// Not thread-safe; use one per snapshot being built. Holds a reference to
// every context it converted (so that an address it keys on is never reused
// by another context while it lives). Memory: one list per context, one dict
// per distinct frame, one 24-byte PyValue per frame reference.
class SnapshotFrames {
 public:
  // The frames list for `context`: [{"name", "filename", "line"}, ...],
  // innermost first; a new empty list for null. The same context gives the
  // same (shared) list. Throws std::bad_alloc only.
  PyValue list(const ContextPtr& context);

 private:
  PyValue frame(const StackFrame& f);

  // Keyed by the text's address: frames that share a SharedString (one
  // captured code object, one string of a read pickle) are found without
  // hashing their text. Equal texts in different boxes get separate dicts,
  // as they would from native.
  using FrameKey = std::tuple<const std::string*, const std::string*, int>;
  // StrongHashMaps: a snapshot may run out of host memory part way, and
  // these must still be destroyable then (allocator/base/strong_hash.h).
  StrongHashMap<FrameKey, PyValue> frames_;
  StrongHashMap<const CallContext*, std::pair<ContextPtr, PyValue>> lists_;
};

}  // namespace cachealloc
