// The observers of one engine (stats counters, history, profilers;
// engine_observer.h) and the one way events reach them.
//
// An observer that runs out of host memory (a history ring growing) drops
// that event and the others still see it: the engine is mid-way through an
// operation when it emits and must finish it, so the exception stops here
// (counted in failures()).
// Invariant: failures() == events some observer dropped for want of memory.
// Cost: one virtual call per observer per event; none without observers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "allocator/engine/observe/engine_observer.h"

namespace cachealloc {

class EngineObservers {
 public:
  explicit EngineObservers(int device) : device_(device) {}
  EngineObservers(const EngineObservers&) = delete;
  EngineObservers& operator=(const EngineObservers&) = delete;

  // Not owned; each must outlive the engine or be removed first.
  void add(EngineObserver* observer) { observers_.push_back(observer); }
  void remove(EngineObserver* observer) { std::erase(observers_, observer); }

  // Stamps the device on `e` and hands it to every observer, in the order
  // they were added. Never throws std::bad_alloc from an observer.
  void emit(EngineEvent& e) {
    e.device = device_;
    for (EngineObserver* o : observers_) {
      try {
        o->on_event(e);
      } catch (const std::bad_alloc&) {
        ++failures_;
      }
    }
  }
  uint64_t failures() const { return failures_; }

 private:
  const int device_;
  std::vector<EngineObserver*> observers_;
  uint64_t failures_ = 0;
};

}  // namespace cachealloc
