// One device's lockstep replay: the engine on a RecordedAddressDevice, fed the
// recorded requests, its emitted events compared with the recorded ones.
// Internal to replay/ (replayer.cc drives it; tests use replay_trace).
//
// Where the trace has two explanations for a run of events (an
// empty_cache() or the request's own release; polling or the OOM retry's
// synchronization), run() takes the likelier one and lists the point;
// replay_trace replays the device again with a point flipped where the
// first choice leads to a divergence (docs/design.md, "Replay").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "allocator/engine/device_allocator.h"
#include "replay/recorded_address_device.h"
#include "replay/replay_options.h"
#include "replay/trace.h"
#include "replay/trace_runs.h"
#include "stats/device_stats.h"
#include "stats/history.h"

namespace cachealloc::replay_detail {

struct Emitted {
  EventKind action;
  uintptr_t address;
  size_t size;
  StreamId stream;
};

// Collects what the engine did during one request, in trace terms.
class EmitLog : public EngineObserver {
 public:
  void on_event(const EngineEvent& e) override {
    switch (e.kind) {
      case EventKind::kSegmentAlloc:
      case EventKind::kSegmentFree:
      case EventKind::kSegmentMap:
      case EventKind::kSegmentUnmap: add(e.kind, e.address, e.size, e); break;
      case EventKind::kAlloc:
      case EventKind::kFreeRequested:
      case EventKind::kFreeCompleted: add(e.kind, e.address, e.requested, e); break;
      case EventKind::kFree:  // both halves, as the trace records them
        add(EventKind::kFreeRequested, e.address, e.requested, e);
        add(EventKind::kFreeCompleted, e.address, e.requested, e);
        break;
      case EventKind::kOom: add(EventKind::kOom, 0, e.size, e); break;
      case EventKind::kAllocRetry:
      case EventKind::kSyncAllStreams:
      case EventKind::kSnapshot:
      case EventKind::kUserDefined: break;  // not traced (snapshot, annotation: not engine events)
    }
  }
  std::vector<Emitted> events;

 private:
  void add(EventKind a, uintptr_t addr, size_t size, const EngineEvent& e) {
    events.push_back(Emitted{a, addr, size, e.stream});
  }
};

// Replays one device's trace.
class LockstepReplay {
 public:
  // `flipped`: the ambiguous points (see ambiguous()) to replay with their
  // second explanation.
  LockstepReplay(int device, const std::vector<RecordedEvent>& events,
               const AllocatorConfig& config, const ReplayOptions& options,
               absl::flat_hash_set<size_t> flipped)
      : device_index_(device),
        events_(events),
        options_(options),
        flipped_(std::move(flipped)),
        backend_(options.device_memory),
        engine_(device, config, backend_),
        stats_(config.max_split_size_stat()),
        // In lockstep the k-th entry the engine emits for a request is the
        // k-th recorded event from the request's first one: give each entry
        // its recorded time.
        history_([this] {
          const size_t k = std::min(clock_cursor_++, events_.size() - 1);
          return events_.empty() ? int64_t{0} : events_[k].time_us;
        }) {
    engine_.add_observer(&stats_);
    engine_.add_observer(&log_);
    if (options.build_snapshot) {
      history_.enable(std::numeric_limits<size_t>::max() / 2, true);
      engine_.add_observer(&history_);
    }
    if (options.memory_limit) engine_.set_memory_limit(*options.memory_limit);
    backend_.set_reservation_source(
        [this](size_t bytes, size_t page) { return reservation_base(bytes, page); });
  }

  std::optional<Divergence> run(size_t& empty_cache_calls, size_t& done, size_t total);
  // Where run() had two explanations and took the first (unless flipped):
  // a run of segment frees before a request (an empty_cache() call, or the
  // request's own release), or leading completions (the request's polling,
  // or its OOM retry's synchronization). In replay order.
  // Each point is an id, point(k, kind): k indexes the device's events.
  const std::vector<size_t>& ambiguous() const { return ambiguous_; }
  // The index (into the device's events) of the run ambiguous point `p`
  // lies in, and its trace index.
  static size_t point_event(size_t p) { return p / kPointKinds; }
  size_t source_index(size_t p) const { return events_[point_event(p)].source_index; }
  std::optional<Divergence> check_final(const RecordedTrace& trace);
  DeviceStats stats() const { return stats_.stats(); }
  std::vector<SegmentView> segments() const { return engine_.segments(); }
  std::vector<TraceEntry> history() const { return history_.entries(); }

 private:
  // Compares what the engine emitted with events_[first, last).
  std::optional<Divergence> compare(size_t first, size_t last, const std::string& note);
  // The note a segment divergence gets when it looks like a large segment
  // size the trace's settings text does not show; "" otherwise.
  std::string large_segment_hint(const EventDescription& want, const EventDescription& have) const;
  bool request_would_release(const RecordedEvent& request) const;
  // Where an expandable segment reserved now lies: the address of the
  // first segment_map from the current run on, on the current request's
  // stream, in whole `page`s, outside every live reservation (a segment's
  // first mapping is at its base); 0 if the trace shows none.
  uintptr_t reservation_base(size_t bytes, size_t page);
  // Whether events_[first, last) can be an empty_cache() now: its event
  // completions, then frees of exactly the segments it would free (every
  // segment with no block allocated: blocks waiting for events are freed
  // and merged first), in its order.
  bool empty_cache_would_free(size_t first, size_t last) const;
  Divergence diverge(size_t index, EventDescription expected, EventDescription got) const {
    return Divergence{device_index_, index, std::move(expected), std::move(got)};
  }

  const int device_index_;
  const std::vector<RecordedEvent>& events_;
  const ReplayOptions& options_;
  enum PointKind : size_t { kReleaseRun, kLeadingCompletions, kImmediateFree, kPointKinds };
  static size_t point(size_t k, PointKind kind) { return k * kPointKinds + kind; }
  const absl::flat_hash_set<size_t> flipped_;
  std::vector<size_t> ambiguous_;
  RecordedAddressDevice backend_;
  DeviceCachingAllocator engine_;
  StatsCollector stats_;
  HistoryRecorder history_;
  EmitLog log_;
  size_t clock_cursor_ = 0;  // recorded event whose time the next entry gets
  size_t run_start_ = 0;         // first event of the run being replayed
  // Indices of the segment_map events, for reservation_base (built on
  // first use: a lookahead per reservation over these, not every event).
  std::vector<size_t> map_indices_;
  bool map_indices_built_ = false;
  StreamId request_stream_ = 0;  // stream of the request being replayed
  absl::flat_hash_map<uintptr_t, Block*> live_;          // allocated blocks
  absl::flat_hash_map<uintptr_t, EventId> delayed_frees_;  // block -> event
  // Delayed frees replayed as completed by a synchronization only (a free
  // point flipped): never completed by the replay itself.
  absl::flat_hash_set<uintptr_t> completed_by_sync_;
  // The index of the completion of the last such free (a side effect).
  size_t completion_as_side_effect_ = SIZE_MAX;
  void forget_delayed(uintptr_t address) {
    delayed_frees_.erase(address);
    completed_by_sync_.erase(address);
  }
  // The stream the replay records a waiting free's event on (see run()).
  StreamId waiting_stream(size_t free_requested_index);
  // Index of each waiting free_requested -> index of its free_completed
  // (events_.size() if the trace never completes it). Built on first use.
  absl::flat_hash_map<size_t, size_t> completions_;
  bool completions_built_ = false;
  // Whether any free in the trace waits for events (its completion is not
  // the next event); only then may a free followed by its completion have
  // waited too.
  const bool has_waiting_frees_ = any_waiting_free(events_);
  static bool any_waiting_free(const std::vector<RecordedEvent>& events) {
    for (size_t k = 0; k < events.size(); ++k)
      if (events[k].action == EventKind::kFreeRequested && !completes_at_once(events, k))
        return true;
    return false;
  }
};

}  // namespace cachealloc::replay_detail
