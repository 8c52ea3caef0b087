#include "lab/whatif.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "allocator/base/errors.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/policy/policy_registry.h"
#include "stats/history.h"
#include "stats/snapshot.h"

namespace cachealloc {
namespace {

// The counters the lab reports; one switch per engine event.
class LabCounters : public EngineObserver {
 public:
  void on_event(const EngineEvent& e) override {
    switch (e.kind) {
      case EventKind::kSegmentAlloc:
      case EventKind::kSegmentMap: ++device_allocs; break;
      case EventKind::kSegmentFree:
      case EventKind::kSegmentUnmap: ++device_frees; break;
      case EventKind::kAllocRetry: ++retries; break;
      case EventKind::kOom: ++ooms; break;
      default: break;
    }
  }
  size_t device_allocs = 0, device_frees = 0, retries = 0, ooms = 0;
};

// One replay of a stream on the engine.
class Replay {
 public:
  Replay(const RequestStream& stream, const LabConfig& config, const WhatIfOptions& options,
         bool record_history)
      : stream_(stream),
        options_(options),
        device_(options.device_memory, options.placement),
        engine_(stream.device, config.config, device_, make_policy(config.policy)),
        history_([this] { return now_us_; }),
        live_(stream.slots, nullptr) {
    engine_.add_observer(&counters_);
    if (record_history) {
      history_.enable(options.snapshot_entries, false);
      engine_.add_observer(&history_);
    }
    if (options.memory_limit) engine_.set_memory_limit(*options.memory_limit);
    if (stream.deferred_frees > 0) pending_event_.assign(stream.slots, 0);
    fallen_back_.assign(stream.fallible_groups, 0);
  }

  // Replays requests [0, end); with `peak`, stops after request `end - 1`
  // and describes that moment into it.
  void run(size_t end, WhatIfResult& out, PeakMoment* peak);
  DeviceCachingAllocator& engine() { return engine_; }
  std::vector<TraceEntry> history() const { return history_.entries(); }

 private:
  void describe_moment(size_t k, PeakMoment& peak) const;

  const RequestStream& stream_;
  const WhatIfOptions& options_;
  WhatIfDevice device_;
  DeviceCachingAllocator engine_;
  LabCounters counters_;
  HistoryRecorder history_;
  int64_t now_us_ = 0;
  std::vector<Block*> live_;             // slot -> block, null when free or OOM'd
  std::vector<EventId> pending_event_;   // slot -> event of its deferred free
  std::vector<size_t> allocated_at_;     // slot -> request index (peak runs only)
  std::vector<uint8_t> fallen_back_;     // fallible group -> 1 once one of its requests OOM'd
  size_t fallbacks_ = 0;                 // fallible requests refused
  size_t allocated_ = 0;                 // bytes handed out now
};

void Replay::run(size_t end, WhatIfResult& out, PeakMoment* peak) {
  const Request* requests = stream_.requests.data();
  const StreamId* streams = stream_.streams.data();
  const bool timed = !stream_.time_us.empty() && options_.snapshot_entries > 0;
  if (peak) allocated_at_.assign(stream_.slots, 0);

  const size_t points = std::max<size_t>(1, options_.series_points);
  const size_t bucket = std::max<size_t>(1, (stream_.requests.size() + points - 1) / points);
  if (!peak) out.series.reserve(stream_.requests.size() / bucket + 1);
  size_t bucket_left = 0;
  const bool hinted = options_.address_hints && !stream_.hints.empty();
  const SegmentHint* hint = stream_.hints.data();
  const SegmentHint* const hints_end = hint + stream_.hints.size();
  const FallibleRequest* fallible = stream_.fallible.data();
  const FallibleRequest* const fallible_end = fallible + stream_.fallible.size();

  const bool bounded = options_.deadline != std::chrono::steady_clock::time_point::max();
  // Also checked before the first request: a search runs many short replays.
  if (bounded && std::chrono::steady_clock::now() > options_.deadline)
    throw WhatIfTimeout("what-if replay not started: past its time bound");
  // The middle allocation: page calls from it on are the late ones.
  size_t allocs = 0;
  for (size_t k = 0; k < end; ++k) allocs += requests[k].kind == RequestKind::kAlloc;
  size_t late = end;
  for (size_t k = 0, seen = 0; k < end; ++k)
    if (requests[k].kind == RequestKind::kAlloc && seen++ == allocs / 2) {
      late = k;
      break;
    }
  out.late_request = late;
  PageCalls at_late;
  for (size_t k = 0; k < end; ++k) {
    if (k == late) at_late = device_.memory().page_calls();
    const Request& q = requests[k];
    if (timed) now_us_ = stream_.time_us[k];
    if (hinted) {
      if (hint != hints_end && hint->request == k) {
        device_.offer_address(hint->address, hint->bytes);
        ++hint;
      } else {
        device_.offer_address(0, 0);
      }
    }
    Block* scratch = nullptr;  // a re-issued OOM that succeeded: freed after sampling
    // This request's FallibleRequest entry, if it has one (entries are in
    // request order, so one pointer walks them).
    const FallibleRequest* may_fail = nullptr;
    if (fallible != fallible_end && fallible->request == k) may_fail = fallible++;
    switch (q.kind) {
      case RequestKind::kAlloc:
      case RequestKind::kRetryOom:
        if (may_fail && fallen_back_[may_fail->group]) {
          // The program runs the fallback plan now: it asks for nothing.
          live_[q.slot] = nullptr;
          ++out.fallback_skips;
          break;
        }
        try {
          Block* b = engine_.malloc(q.size, streams[q.stream]);
          allocated_ += b->size;
          if (q.kind == RequestKind::kRetryOom) {
            ++out.recorded_ooms_succeeded;
            scratch = b;
          }
          live_[q.slot] = b;
          if (peak) allocated_at_[q.slot] = k;
        } catch (const OutOfMemoryError&) {
          live_[q.slot] = nullptr;
          if (may_fail) {
            // The program goes on without the block (request_stream.h).
            fallen_back_[may_fail->group] = 1;
            ++fallbacks_;
          } else if (options_.stop_at_first_oom) {
            out.stopped_at_oom = true;
            end = k + 1;
          }
        }
        break;
      case RequestKind::kFree:
        if (Block* b = live_[q.slot]) {
          allocated_ -= b->size;
          engine_.free(b);
          live_[q.slot] = nullptr;
        }
        break;
      case RequestKind::kFreeDeferred:
        pending_event_[q.slot] = 0;
        if (Block* b = live_[q.slot]) {
          allocated_ -= b->size;
          // Used on another stream, as the lockstep replayer marks it: the
          // engine waits for an event that completes at kCompleteFree.
          engine_.record_stream(b, b->stream == 1 ? 2 : 1);
          engine_.free(b);
          pending_event_[q.slot] = device_.last_event();
          live_[q.slot] = nullptr;
        }
        break;
      case RequestKind::kCompleteFree:
        if (pending_event_[q.slot] != 0) device_.complete_event(pending_event_[q.slot]);
        pending_event_[q.slot] = 0;
        break;
      case RequestKind::kEmptyCache:
        engine_.empty_cache();
        break;
    }
    if (options_.check_invariants) {
      engine_.check_invariants();
      device_.check();
    }

    const size_t reserved = engine_.reserved_bytes();
    if (reserved > out.peak_reserved) {
      out.peak_reserved = reserved;
      out.peak_request = k;
      out.allocated_at_peak = allocated_;
    }
    out.peak_allocated = std::max(out.peak_allocated, allocated_);
    if (!peak) {
      if (bucket_left == 0) {
        out.series.push_back(SeriesPoint{k, 0, 0});
        bucket_left = bucket;
      }
      --bucket_left;
      SeriesPoint& p = out.series.back();
      p.reserved = std::max(p.reserved, reserved);
      p.allocated = std::max(p.allocated, allocated_);
    }
    if (peak && k + 1 == end) {
      describe_moment(k, *peak);
      return;
    }
    if (scratch) {
      allocated_ -= scratch->size;
      engine_.free(scratch);
      live_[q.slot] = nullptr;
    }
    if (options_.progress && ((k + 1) & 0xFFFFF) == 0)
      options_.progress(k + 1, stream_.requests.size());
    if (((k + 1) & 0xFFF) == 0 && bounded && std::chrono::steady_clock::now() > options_.deadline)
      throw WhatIfTimeout("what-if replay stopped at its time bound after " +
                          std::to_string(k + 1) + " of " +
                          std::to_string(stream_.requests.size()) + " requests");
  }
  out.requests = end;
  out.page_calls = device_.memory().page_calls();
  out.page_calls_late = late < end ? out.page_calls - at_late : PageCalls{};
  out.device_allocs = counters_.device_allocs;
  out.device_frees = counters_.device_frees;
  out.retries = counters_.retries;
  // The engine counted every refusal, the fallible ones included.
  out.ooms = counters_.ooms - fallbacks_;
  out.fallbacks = fallbacks_;
  out.final_reserved = engine_.reserved_bytes();
  out.final_allocated = allocated_;
}

void Replay::describe_moment(size_t k, PeakMoment& peak) const {
  peak.request_index = k;
  peak.reserved = engine_.reserved_bytes();
  peak.allocated = allocated_;
  std::vector<LiveBlock> blocks;
  for (size_t slot = 0; slot < live_.size(); ++slot) {
    const Block* b = live_[slot];
    if (!b) continue;
    blocks.push_back(LiveBlock{b->address, b->size, b->requested_size, b->stream,
                               allocated_at_[slot]});
  }
  peak.live_blocks = blocks.size();
  const size_t keep = std::min(blocks.size(), options_.peak_blocks);
  std::partial_sort(blocks.begin(), blocks.begin() + static_cast<ptrdiff_t>(keep), blocks.end(),
                    [](const LiveBlock& a, const LiveBlock& b) {
                      return a.size != b.size ? a.size > b.size : a.address < b.address;
                    });
  blocks.resize(keep);
  peak.largest_blocks = std::move(blocks);
  for (const SegmentView& s : engine_.segments()) {
    SegmentUse use;
    use.address = s.address;
    use.is_small = s.is_small;
    use.blocks = s.blocks.size();
    for (const Block* b : s.blocks) {
      if (b->allocated) {
        use.allocated_bytes += b->size;
        auto& runs = use.allocated_runs;
        if (!runs.empty() && runs.back().first + runs.back().second == use.bytes)
          runs.back().second += b->size;
        else
          runs.emplace_back(use.bytes, b->size);
      } else if (b->is_free()) {
        use.largest_free = std::max(use.largest_free, b->size);
      }
      use.bytes += b->size;
    }
    peak.segments.push_back(use);
  }
}

WhatIfResult run_with(const RequestStream& stream, const LabConfig& config,
                      const WhatIfOptions& options) {
  WhatIfResult out;
  out.config = config;
  const bool snapshot = options.snapshot_entries > 0;
  auto replay = std::make_unique<Replay>(stream, config, options, snapshot);
  const auto start = std::chrono::steady_clock::now();
  replay->run(stream.requests.size(), out, nullptr);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.recorded_events = out.requests == stream.requests.size()
                            ? stream.recorded_events
                            : stream.recorded_events * out.requests /
                                  std::max<size_t>(1, stream.requests.size());
  out.fragmentation_at_peak =
      out.peak_reserved == 0
          ? 0.0
          : 1.0 - static_cast<double>(out.allocated_at_peak) / static_cast<double>(out.peak_reserved);
  if (snapshot) {
    out.snapshot = make_snapshot(replay->engine().segments(), {replay->history()}, config.config);
  }
  if (options.peak_blocks > 0 && out.peak_reserved > 0) {
    // Deterministic: the same requests on a fresh engine reach the same state.
    replay.reset();
    WhatIfOptions quiet = options;
    quiet.progress = nullptr;
    quiet.snapshot_entries = 0;
    Replay again(stream, config, quiet, false);
    WhatIfResult scratch;
    PeakMoment moment;
    again.run(out.peak_request + 1, scratch, &moment);
    out.peak = std::move(moment);
  }
  return out;
}

}  // namespace

WhatIfResult run_whatif(const RequestStream& stream, const LabConfig& config,
                        const WhatIfOptions& options) {
  return run_with(stream, config, options);
}

}  // namespace cachealloc
