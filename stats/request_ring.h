// The OOM flight recorder's request ring: what a what-if replay needs at an
// out-of-memory error (lab/oom_diagnosis.h), recorded for one device while
// the recorder is on, whether or not history is: every allocation and free
// with its requested bytes, stream and order, and the segment events and
// OOMs, as native's trace actions. No frames, and no time (entries read
// back with time_us 0): a clock read per entry is what a history entry
// costs most on the GPU hosts' CPUs (rdtsc, about 19 ns in a recorder's
// step on the H100 host's Xeon: docs/benchmarks.md, clock_cost), and a
// replay needs only the order.
//
// Apart from the history (stats/history.h) on purpose: what PyTorch's
// _snapshot() shows must stay what the program asked for, and the
// program's _record_memory_history(enabled=None) must not blind the
// recorder.
//
// Bounded: `records` records of kRecordBytes each, allocated whole when the
// ring is made, so recording never allocates; when full, each new record
// overwrites the oldest. A record is one event: an allocation, a whole free
// (native's free_requested and free_completed entries), a deferred free's
// either half, a segment event, an OOM. Called under the engine's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "allocator/engine/observe/engine_observer.h"
#include "stats/history.h"

namespace cachealloc {

class RequestRing : public EngineObserver {
 public:
  static constexpr size_t kRecordBytes = 32;

  // Room for `records` records (0 counts as 1), allocated now. Throws
  // std::bad_alloc.
  explicit RequestRing(size_t records);

  void on_event(const EngineEvent& e) override;

  // The entries of the records kept, oldest first, in native's actions
  // (a whole free gives free_requested then free_completed), for `device`,
  // with no context and time_us 0.
  std::vector<TraceEntry> entries(int device) const;
  size_t capacity() const { return capacity_; }
  // Some record was overwritten: the ring holds the newest capacity()
  // records only.
  bool wrapped() const { return laps_ > 1 || (laps_ == 1 && next_ > 0); }

 private:
  struct Record {
    uintptr_t address;
    size_t size;      // traced_size(): requested bytes, or the segment's
    StreamId stream;
    EventKind action;  // kFree: a free_requested + free_completed pair
  };
  static_assert(sizeof(Record) == kRecordBytes);

  // Records the events the fast path does not: all but alloc and free.
  [[gnu::noinline]] void record_other(const EngineEvent& e);
  Record& next_record() {
    Record& r = ring_[next_];
    if (++next_ == capacity_) [[unlikely]] {
      next_ = 0;
      ++laps_;
    }
    return r;
  }

  const size_t capacity_;
  std::unique_ptr<Record[]> ring_;
  // Where the next record goes: the oldest record once laps_ > 0.
  size_t next_ = 0;
  // Times next_ went round to 0: from 1, every slot holds a record.
  size_t laps_ = 0;
};

}  // namespace cachealloc
