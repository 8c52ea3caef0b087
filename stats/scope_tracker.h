// Exact memory high-water marks of nested scopes, without resetting any
// global peak: the observer behind cachealloc.profiler.
//
// A scope is opened and closed by the caller (profiler code around a model
// layer, a function, a step); scopes on one device nest strictly (LIFO).
// While scopes are open, each engine event updates only the innermost one,
// so the cost per event is O(1) whatever the nesting depth. When a scope
// closes, its totals and total peak are folded into its parent.
//
// Units: bytes for *_bytes and peaks (block sizes, as memory_stats counts
// "allocated_bytes": a 1000 B request is a 1024 B block), plain counts for
// allocations/frees. "Allocated" is the device's allocated_bytes.all.current
// (up on kAlloc, down on kFreeRequested or kFree); "reserved" is
// reserved_bytes.all.current (segment events).
//
// Invariants, for every open scope S:
//   total peak of S = max(self peak of S, total peaks of S's closed children)
//   self peak of S  = max of `allocated` over the moments S was innermost
//                     (its open, every event while innermost, and the
//                     close of each direct child)
//   bytes allocated (total) = self bytes allocated + children's totals
//   allocated_at_close - allocated_at_open = bytes_allocated - bytes_freed
//
// Thread-safety: none of its own. Every call (events, open, close) must run
// under the device's lock (CachingAllocator::with_device), which is what
// orders a scope's open and close exactly against allocations.
#pragma once

#include <cstdint>
#include <vector>

#include "allocator/base/errors.h"
#include "allocator/engine/observe/engine_observer.h"

namespace cachealloc {

// Closing a scope that is not open, or not the innermost one.
class ScopeError : public CacheallocError {
 public:
  using CacheallocError::CacheallocError;
};

// What one closed scope saw. Bytes, except counts and depth.
struct ScopeResult {
  int64_t depth = 0;               // 0 = outermost open scope on the device
  int64_t allocated_at_open = 0;   // allocated bytes when the scope opened
  int64_t allocated_at_close = 0;  // ... and when it closed
  int64_t peak_allocated = 0;      // highest allocated while open, children included
  int64_t self_peak_allocated = 0; // highest allocated while this scope was innermost
  int64_t bytes_allocated = 0;     // block bytes handed out while open (children included)
  int64_t bytes_freed = 0;         // block bytes taken back while open (children included)
  int64_t self_bytes_allocated = 0;  // ... while innermost only
  int64_t self_bytes_freed = 0;
  int64_t allocations = 0;         // blocks handed out while open (children included)
  int64_t frees = 0;               // blocks taken back while open (children included)
  int64_t self_allocations = 0;
  int64_t self_frees = 0;
  int64_t reserved_at_open = 0;    // reserved bytes when the scope opened
  int64_t reserved_at_close = 0;
  int64_t peak_reserved = 0;       // highest reserved while open, children included
  int64_t self_peak_reserved = 0;  // highest reserved while innermost

  // How far the scope pushed memory above where it started (>= 0).
  int64_t peak_above_open() const { return peak_allocated - allocated_at_open; }
  int64_t self_peak_above_open() const { return self_peak_allocated - allocated_at_open; }
};

class ScopeTracker : public EngineObserver {
 public:
  // `allocated` and `reserved`: the device's current values when the
  // tracker is attached (0 for a fresh engine).
  explicit ScopeTracker(int64_t allocated = 0, int64_t reserved = 0)
      : allocated_(allocated), reserved_(reserved) {}

  void on_event(const EngineEvent& e) override;

  // Opens a scope nested in the innermost open one; returns its id, unique
  // in the process (ids are never reused, so a stale id cannot close a
  // newer scope). O(1) amortized.
  uint64_t open();
  // Closes the innermost scope, which must be `id`, and returns what it saw.
  // Throws ScopeError when no scope is open, when `id` is not open on this
  // device, or when `id` is open but not innermost (naming the innermost);
  // nothing changes then. O(1).
  ScopeResult close(uint64_t id);

  size_t depth() const { return stack_.size(); }
  // Sets the device's current values, for a tracker that was detached from
  // the engine while no scope was open (the runtime attaches it only while
  // scopes are open, so idle profiling costs nothing per event).
  // Precondition: depth() == 0.
  void resync(int64_t allocated, int64_t reserved) {
    allocated_ = allocated;
    reserved_ = reserved;
  }
  int64_t allocated() const { return allocated_; }
  int64_t reserved() const { return reserved_; }

 private:
  struct OpenScope {
    uint64_t id = 0;
    ScopeResult self;          // depth, *_at_open, self_* fields
    int64_t children_peak_allocated = 0;  // max total peak of closed children
    int64_t children_peak_reserved = 0;
    int64_t children_bytes_allocated = 0;  // sums over closed children's totals
    int64_t children_bytes_freed = 0;
    int64_t children_allocations = 0;
    int64_t children_frees = 0;
  };

  int64_t allocated_;
  int64_t reserved_;
  std::vector<OpenScope> stack_;  // innermost last
};

}  // namespace cachealloc
