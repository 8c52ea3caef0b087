#include "replay/replayer.h"

#include <chrono>
#include <limits>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "allocator/device_allocator.h"
#include "allocator/errors.h"
#include "allocator/size_policy.h"
#include "replay/replay_device.h"
#include "replay/trace_runs.h"
#include "stats/history.h"
#include "stats/snapshot.h"

namespace cachealloc {
namespace {

struct Emitted {
  RecordedAction action;
  uintptr_t address;
  size_t size;
  StreamId stream;
};

// Collects what the engine did during one request, in trace terms.
class EmitLog : public EngineObserver {
 public:
  void on_event(const EngineEvent& e) override {
    switch (e.kind) {
      case EngineEventKind::kSegmentAlloc: add(RecordedAction::kSegmentAlloc, e.address, e.size, e); break;
      case EngineEventKind::kSegmentFree: add(RecordedAction::kSegmentFree, e.address, e.size, e); break;
      case EngineEventKind::kAlloc: add(RecordedAction::kAlloc, e.address, e.requested, e); break;
      case EngineEventKind::kFreeRequested: add(RecordedAction::kFreeRequested, e.address, e.requested, e); break;
      case EngineEventKind::kFreeCompleted: add(RecordedAction::kFreeCompleted, e.address, e.requested, e); break;
      case EngineEventKind::kFree:
        add(RecordedAction::kFreeRequested, e.address, e.requested, e);
        add(RecordedAction::kFreeCompleted, e.address, e.requested, e);
        break;
      case EngineEventKind::kOom: add(RecordedAction::kOom, 0, e.size, e); break;
      case EngineEventKind::kAllocRetry:
      case EngineEventKind::kSyncAllStreams: break;
    }
  }
  std::vector<Emitted> events;

 private:
  void add(RecordedAction a, uintptr_t addr, size_t size, const EngineEvent& e) {
    events.push_back(Emitted{a, addr, size, e.stream});
  }
};

EventDescription describe(const RecordedEvent& e) {
  return EventDescription{recorded_action_name(e.action),
                          e.action == RecordedAction::kOom ? e.device_free : e.address,
                          e.size, e.stream, ""};
}
EventDescription describe(const Emitted& e) {
  return EventDescription{recorded_action_name(e.action), e.address, e.size, e.stream, ""};
}
bool same(const RecordedEvent& r, const Emitted& e) {
  return r.action == e.action && r.size == e.size && r.stream == e.stream &&
         (r.action == RecordedAction::kOom || r.address == e.address);
}

// Replays one device's trace.
class DeviceReplay {
 public:
  DeviceReplay(int device, const std::vector<RecordedEvent>& events,
               const AllocatorConfig& config, const ReplayOptions& options)
      : device_index_(device),
        events_(events),
        options_(options),
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
  }

  std::optional<Divergence> run(size_t& empty_cache_calls, size_t& done, size_t total);
  std::optional<Divergence> check_final(const RecordedTrace& trace);
  DeviceStats stats() const { return stats_.stats(); }
  std::vector<SegmentView> segments() const { return engine_.segments(); }
  std::vector<TraceEntry> history() const { return history_.entries(); }

 private:
  // Compares what the engine emitted with events_[first, last).
  std::optional<Divergence> compare(size_t first, size_t last, const std::string& note);
  bool request_would_release(const RecordedEvent& request) const;
  Divergence diverge(size_t index, EventDescription expected, EventDescription got) const {
    return Divergence{device_index_, index, std::move(expected), std::move(got)};
  }

  const int device_index_;
  const std::vector<RecordedEvent>& events_;
  const ReplayOptions& options_;
  ReplayDevice backend_;
  DeviceCachingAllocator engine_;
  StatsCollector stats_;
  HistoryRecorder history_;
  EmitLog log_;
  size_t clock_cursor_ = 0;  // recorded event whose time the next entry gets
  absl::flat_hash_map<uintptr_t, Block*> live_;          // allocated blocks
  absl::flat_hash_map<uintptr_t, EventId> delayed_frees_;  // block -> event
};

std::optional<Divergence> DeviceReplay::compare(size_t first, size_t last,
                                                const std::string& note) {
  const auto& got = log_.events;
  const size_t expected_count = last - first;
  for (size_t k = 0; k < std::max(expected_count, got.size()); ++k) {
    if (k < expected_count && k < got.size() && same(events_[first + k], got[k])) continue;
    EventDescription want = k < expected_count ? describe(events_[first + k])
                                               : EventDescription{"nothing", 0, 0, 0, ""};
    EventDescription have = k < got.size() ? describe(got[k])
                                           : EventDescription{"nothing", 0, 0, 0, note};
    if (k < got.size() && !note.empty()) have.note = note;
    const size_t index = first + k < events_.size() ? events_[std::min(first + k, last - 1)].source_index
                                                    : events_.size();
    return diverge(index, want, have);
  }
  return std::nullopt;
}

// Whether the request, run now, could itself return segments to the device
// (garbage collection, or the OOM retry path). If not, segment frees
// recorded just before it can only come from an empty_cache() call.
bool DeviceReplay::request_would_release(const RecordedEvent& r) const {
  if (r.action == RecordedAction::kFreeRequested) return false;
  if (engine_.would_hit_cache(r.size, r.stream)) return false;
  if (engine_.would_collect_garbage()) return true;
  if (engine_.would_exceed_limit(r.size)) return true;
  const size_t segment = segment_size_for(round_request_size(r.size, engine_.config()));
  return const_cast<ReplayDevice&>(backend_).memory_info(0).free_bytes < segment;
}

std::optional<Divergence> DeviceReplay::run(size_t& empty_cache_calls, size_t& done,
                                            size_t total) {
  const size_t n = events_.size();
  size_t i = 0;
  while (i < n) {
    const size_t j = side_effects_end(events_, i);

    // Delayed frees that the trace completes before this request.
    if (!delayed_frees_.empty())
      for (size_t k = i; k < j; ++k)
        if (events_[k].action == RecordedAction::kFreeCompleted)
          if (auto it = delayed_frees_.find(events_[k].address); it != delayed_frees_.end())
            backend_.complete_event(it->second);

    // A leading run of frees that the request cannot explain: empty_cache().
    bool lead_has_segment_free = false;
    const size_t lead = leading_release_run(events_, i, j, &lead_has_segment_free);
    if (lead_has_segment_free && (j == n || !request_would_release(events_[j]))) {
      clock_cursor_ = i;
      log_.events.clear();
      engine_.empty_cache();
      ++empty_cache_calls;
      const size_t emitted = log_.events.size();
      if (emitted == 0 || emitted > j - i)
        return compare(i, lead, "empty_cache() freed a different set of segments");
      if (auto d = compare(i, i + emitted, "")) return d;
      for (size_t k = i; k < i + emitted; ++k)
        if (events_[k].action == RecordedAction::kFreeCompleted) delayed_frees_.erase(events_[k].address);
      i += emitted;
      done += emitted;
    }
    if (j == n) {
      if (i < n) return compare(i, n, "no request explains these events");
      break;
    }

    const RecordedEvent& r = events_[j];
    clock_cursor_ = i;
    for (size_t k = i; k < j; ++k)
      if (events_[k].action == RecordedAction::kSegmentAlloc) {
        backend_.prime(events_[k].address, events_[k].size);
        break;
      }
    log_.events.clear();
    std::string note;
    size_t consumed_to = j + 1;
    switch (r.action) {
      case RecordedAction::kAlloc:
      case RecordedAction::kOom:
        try {
          Block* b = engine_.malloc(r.size, r.stream, r.context);
          live_[b->address] = b;
          if (r.action == RecordedAction::kOom) note = "the request succeeded";
        } catch (const OutOfMemoryError& e) {
          if (r.action == RecordedAction::kAlloc) note = e.what();
        } catch (const CacheallocError& e) {
          note = e.what();
        }
        break;
      case RecordedAction::kFreeRequested: {
        auto it = live_.find(r.address);
        if (it == live_.end())
          return diverge(r.source_index, describe(r),
                         EventDescription{"nothing", 0, 0, 0, "no live allocation at this address"});
        Block* b = it->second;
        live_.erase(it);
        const bool immediate = j + 1 < n &&
                               events_[j + 1].action == RecordedAction::kFreeCompleted &&
                               events_[j + 1].address == r.address;
        if (immediate) {
          consumed_to = j + 2;
        } else {
          // Used on another stream: the free waits for an event the trace
          // completes later.
          engine_.record_stream(b, b->stream == 1 ? 2 : 1);
        }
        engine_.free(b, r.context);
        if (!immediate) delayed_frees_[r.address] = backend_.last_event();
        break;
      }
      case RecordedAction::kFreeCompleted:
      case RecordedAction::kSegmentAlloc:
      case RecordedAction::kSegmentFree:
        break;  // side effects never reach here
    }
    backend_.unprime();
    // (Most traces have no delayed frees: skip hashing every completed free.)
    if (!delayed_frees_.empty())
      for (const Emitted& e : log_.events)
        if (e.action == RecordedAction::kFreeCompleted) delayed_frees_.erase(e.address);
    if (auto d = compare(i, consumed_to, note)) return d;
    if (options_.check_invariants) engine_.check_invariants();
    done += consumed_to - i;
    if (options_.progress && (done >> 20) != ((done - (consumed_to - i)) >> 20))
      options_.progress(done, total);
    i = consumed_to;
  }
  return std::nullopt;
}

std::optional<Divergence> DeviceReplay::check_final(const RecordedTrace& trace) {
  std::vector<const RecordedSegment*> want;
  for (size_t k = 0; k < trace.final_segments.size(); ++k)
    if (trace.final_segment_devices[k] == device_index_) want.push_back(&trace.final_segments[k]);
  const std::vector<SegmentView> have = engine_.segments();
  auto state_of = [](const Block* b) {
    return std::string(b->allocated ? "active_allocated"
                       : !b->is_free() ? "active_pending_free" : "inactive");
  };
  const size_t end = events_.size();
  for (size_t k = 0; k < std::max(want.size(), have.size()); ++k) {
    EventDescription w{"segment", 0, 0, 0, "final state"}, h{"segment", 0, 0, 0, "final state"};
    if (k < want.size()) { w.address = want[k]->address; w.size = want[k]->total_size; }
    else w.action = "nothing";
    if (k < have.size()) {
      h.address = have[k].address;
      for (const Block* b : have[k].blocks) h.size += b->size;
    } else {
      h.action = "nothing";
    }
    if (k >= want.size() || k >= have.size() || w.address != h.address || w.size != h.size)
      return diverge(end, w, h);
    const auto& wb = want[k]->blocks;
    const auto& hb = have[k].blocks;
    bool blocks_match = wb.size() == hb.size();
    for (size_t b = 0; blocks_match && b < wb.size(); ++b)
      blocks_match = wb[b].first == hb[b]->size && wb[b].second == state_of(hb[b]);
    if (!blocks_match) {
      w.note = h.note = "final state: block layout of the segment differs";
      return diverge(end, w, h);
    }
  }
  return std::nullopt;
}

}  // namespace

ReplayResult replay_trace(const RecordedTrace& trace, const ReplayOptions& options) {
  const AllocatorConfig config = options.config ? *options.config : trace.config;
  ReplayResult result;
  size_t total = 0;
  for (const auto& d : trace.devices) total += d.size();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<DeviceReplay>> replays;
  size_t done = 0;
  for (size_t dev = 0; dev < trace.devices.size(); ++dev) {
    replays.push_back(std::make_unique<DeviceReplay>(static_cast<int>(dev), trace.devices[dev],
                                                     config, options));
    DeviceReplay& r = *replays.back();
    if (!result.divergence) result.divergence = r.run(result.empty_cache_calls, done, total);
    if (!result.divergence && options.check_final_segments && !trace.final_segments.empty())
      result.divergence = r.check_final(trace);
    result.stats.push_back(r.stats());
  }
  result.events = done;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.build_snapshot) {
    std::vector<SegmentView> segments;
    std::vector<std::vector<TraceEntry>> traces;
    for (const auto& r : replays) {
      auto s = r->segments();
      segments.insert(segments.end(), s.begin(), s.end());
      traces.push_back(r->history());
    }
    result.snapshot = make_snapshot(segments, traces, config);
  }
  return result;
}

}  // namespace cachealloc
