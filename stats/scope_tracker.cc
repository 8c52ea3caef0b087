#include "stats/scope_tracker.h"

#include <algorithm>
#include <atomic>
#include <string>

namespace cachealloc {
namespace {

// Process-wide, so ids stay unique across devices and re-initializations.
std::atomic<uint64_t> next_scope_id{1};

}  // namespace

void ScopeTracker::on_event(const EngineEvent& e) {
  const auto size = static_cast<int64_t>(e.size);
  switch (e.kind) {
    case EngineEventKind::kAlloc:
      allocated_ += size;
      if (!stack_.empty()) {
        ScopeResult& s = stack_.back().self;
        s.self_bytes_allocated += size;
        ++s.self_allocations;
        s.self_peak_allocated = std::max(s.self_peak_allocated, allocated_);
      }
      break;
    case EngineEventKind::kFreeRequested:
    case EngineEventKind::kFree:
      // As allocated_bytes: memory stops counting when the caller frees it,
      // even if the block still waits for stream events.
      allocated_ -= size;
      if (!stack_.empty()) {
        ScopeResult& s = stack_.back().self;
        s.self_bytes_freed += size;
        ++s.self_frees;
      }
      break;
    case EngineEventKind::kSegmentAlloc:
    case EngineEventKind::kSegmentMap:
      reserved_ += size;
      if (!stack_.empty()) {
        ScopeResult& s = stack_.back().self;
        s.self_peak_reserved = std::max(s.self_peak_reserved, reserved_);
      }
      break;
    case EngineEventKind::kSegmentFree:
    case EngineEventKind::kSegmentUnmap:
      reserved_ -= size;
      break;
    default:
      break;  // no change in allocated or reserved bytes
  }
}

uint64_t ScopeTracker::open() {
  OpenScope scope;
  scope.id = next_scope_id.fetch_add(1, std::memory_order_relaxed);
  ScopeResult& s = scope.self;
  s.depth = static_cast<int64_t>(stack_.size());
  s.allocated_at_open = allocated_;
  s.self_peak_allocated = allocated_;  // the scope is innermost from here
  s.reserved_at_open = reserved_;
  s.self_peak_reserved = reserved_;
  stack_.push_back(scope);
  return scope.id;
}

ScopeResult ScopeTracker::close(uint64_t id) {
  if (stack_.empty())
    throw ScopeError("cannot close scope " + std::to_string(id) + ": no scope is open");
  if (stack_.back().id != id) {
    for (size_t i = 0; i + 1 < stack_.size(); ++i)
      if (stack_[i].id == id)
        throw ScopeError("cannot close scope " + std::to_string(id) +
                         ": it is not the innermost open scope (" +
                         std::to_string(stack_.size() - 1 - i) +
                         " scope(s) opened inside it are still open, innermost " +
                         std::to_string(stack_.back().id) + "; close them first)");
    throw ScopeError("cannot close scope " + std::to_string(id) +
                     ": it is not open (already closed, or opened on another device)");
  }
  const OpenScope& top = stack_.back();
  ScopeResult r = top.self;
  r.allocated_at_close = allocated_;
  r.reserved_at_close = reserved_;
  r.peak_allocated = std::max(r.self_peak_allocated, top.children_peak_allocated);
  r.peak_reserved = std::max(r.self_peak_reserved, top.children_peak_reserved);
  r.bytes_allocated = r.self_bytes_allocated + top.children_bytes_allocated;
  r.bytes_freed = r.self_bytes_freed + top.children_bytes_freed;
  r.allocations = r.self_allocations + top.children_allocations;
  r.frees = r.self_frees + top.children_frees;
  stack_.pop_back();

  if (!stack_.empty()) {
    OpenScope& parent = stack_.back();
    parent.children_peak_allocated = std::max(parent.children_peak_allocated, r.peak_allocated);
    parent.children_peak_reserved = std::max(parent.children_peak_reserved, r.peak_reserved);
    parent.children_bytes_allocated += r.bytes_allocated;
    parent.children_bytes_freed += r.bytes_freed;
    parent.children_allocations += r.allocations;
    parent.children_frees += r.frees;
    // The parent is innermost again from this moment.
    ScopeResult& p = parent.self;
    p.self_peak_allocated = std::max(p.self_peak_allocated, allocated_);
    p.self_peak_reserved = std::max(p.self_peak_reserved, reserved_);
  }
  return r;
}

}  // namespace cachealloc
