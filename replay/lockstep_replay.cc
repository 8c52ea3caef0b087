#include "replay/lockstep_replay.h"

#include <algorithm>
#include <tuple>

#include "allocator/base/errors.h"
#include "allocator/engine/blocks/size_policy.h"
#include "replay/trace_runs.h"
#include "stats/snapshot.h"

namespace cachealloc::replay_detail {
namespace {

EventDescription describe(const RecordedEvent& e) {
  return EventDescription{action_name(e.action),
                          e.action == EventKind::kOom ? e.device_free : e.address,
                          e.size, e.stream, ""};
}
EventDescription describe(const Emitted& e) {
  return EventDescription{action_name(e.action), e.address, e.size, e.stream, ""};
}
bool same(const RecordedEvent& r, const Emitted& e) {
  return r.action == e.action && r.size == e.size && r.stream == e.stream &&
         (r.action == EventKind::kOom || r.address == e.address);
}

}  // namespace


// A waiting free's block is marked used on a stream of its own, numbered by
// where the trace completes it. Why: the trace does not say which streams
// the block was used on, and the engine's event queues are ordered by
// stream id, so these numbers make it complete waiting frees in the
// recorded order, however many complete at one step (native walks its
// streams in hash order, and a stream's queue stops at its first pending
// event: any recorded order is possible). The ids lie above every pointer
// a real stream can have (2^62 and up), so they never equal a block's own
// stream.
StreamId LockstepReplay::waiting_stream(size_t free_requested_index) {
  if (!completions_built_) {
    completions_built_ = true;
    const size_t n = events_.size();
    absl::flat_hash_map<uintptr_t, size_t> next_completed;  // address -> index
    for (size_t k = n; k-- > 0;) {
      const RecordedEvent& e = events_[k];
      if (e.action == EventKind::kFreeCompleted) {
        next_completed[e.address] = k;
      } else if (e.action == EventKind::kFreeRequested && !completes_at_once(events_, k)) {
        const auto it = next_completed.find(e.address);
        completions_[k] = it == next_completed.end() ? n : it->second;
      }
    }
  }
  // Not listed: completed at once (a free point flipped).
  const auto it = completions_.find(free_requested_index);
  const size_t done =
      it != completions_.end() ? it->second : free_requested_index + 1;
  return (StreamId{1} << 62) + done;
}

// A snapshot keeps large_segment_size_mb only in its settings text, which a
// later settings call replaces, so replay may run with the default while the
// program ran with another size. A segment of a 1-10 MiB request recorded at
// a size other than the one replayed is that case's mark: say so.
std::string LockstepReplay::large_segment_hint(const EventDescription& want,
                                             const EventDescription& have) const {
  const size_t large = engine_.config().large_segment_size;
  const bool segment = want.action == have.action &&
                       (want.action == "segment_alloc" || want.action == "segment_map");
  if (!segment || have.size != large || want.size == large || want.size < kMinLargeAlloc)
    return "";
  return "replayed with a large segment of " + std::to_string(large) +
         " bytes; if the program set large_segment_size_mb in a settings call that a later "
         "call replaced, the trace's settings text no longer shows it: pass it with --conf";
}

std::optional<Divergence> LockstepReplay::compare(size_t first, size_t last,
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
    if (have.note.empty()) have.note = large_segment_hint(want, have);
    // Past the last event: one past the last event's trace index (trace
    // indices count skipped snapshot entries too, so events_.size() could
    // lie before it).
    const size_t index = first + k < events_.size()
                             ? events_[std::min(first + k, last - 1)].source_index
                             : (events_.empty() ? 0 : events_.back().source_index + 1);
    return diverge(index, want, have);
  }
  return std::nullopt;
}

// Whether the request, run now, could itself return segments to the device
// (garbage collection, or the OOM retry path). If not, segment frees
// recorded just before it can only come from an empty_cache() call.
bool LockstepReplay::request_would_release(const RecordedEvent& r) const {
  if (r.action == EventKind::kFreeRequested) return false;
  if (engine_.would_hit_cache(r.size, r.stream)) return false;
  if (engine_.would_collect_garbage()) return true;
  if (engine_.would_exceed_limit(r.size)) return true;
  const size_t segment = segment_size_for(round_request_size(r.size, engine_.config()),
                                         engine_.config().large_segment_size);
  return backend_.memory().free_bytes() < segment;
}

uintptr_t LockstepReplay::reservation_base(size_t bytes, size_t page) {
  (void)bytes;  // a reservation's size is the engine's; the trace shows none
  if (!map_indices_built_) {
    map_indices_built_ = true;
    for (size_t k = 0; k < events_.size(); ++k)
      if (events_[k].action == EventKind::kSegmentMap) map_indices_.push_back(k);
  }
  for (auto it = std::lower_bound(map_indices_.begin(), map_indices_.end(), run_start_);
       it != map_indices_.end(); ++it) {
    const RecordedEvent& e = events_[*it];
    if (e.stream == request_stream_ && e.size % page == 0 && !backend_.reserved(e.address))
      return e.address;
  }
  return 0;
}

bool LockstepReplay::empty_cache_would_free(size_t first, size_t last) const {
  std::vector<uintptr_t> recorded;
  bool freed_segment = false;
  for (size_t k = first; k < last; ++k) {
    if (is_segment_release(events_[k])) {
      recorded.push_back(events_[k].address);
      freed_segment = true;
    } else if (freed_segment) {
      return false;  // empty_cache() completes every event before it frees
    }
  }
  // What it frees, in its order: the large pool's, then the small pool's;
  // in each, the whole segments, then the unmapped pages of expandable
  // segments' free blocks, each in the pool's order (stream, size,
  // address).
  struct Freeable {
    bool is_small;
    bool unmap;
    StreamId stream;
    size_t size;
    uintptr_t address;     // of the segment or free block
    uintptr_t released;    // what the event shows: the segment or the pages
    auto key() const { return std::tie(is_small, unmap, stream, size, address); }
  };
  std::vector<Freeable> freeable;
  const auto& expandable = engine_.expandable_segment_list();
  for (const SegmentView& s : engine_.segments()) {
    if (s.is_expandable) {
      // Runs of blocks not handed out (those waiting for events are freed
      // and merged first): each unmaps the whole pages inside it.
      const ExpandableSegment* seg = nullptr;
      for (const auto& e : expandable)
        if (e->contains(s.address)) seg = e.get();
      if (!seg) return false;
      for (size_t b = 0; b < s.blocks.size();) {
        if (s.blocks[b]->allocated) {
          ++b;
          continue;
        }
        const uintptr_t start = s.blocks[b]->address;
        uintptr_t end = start;
        for (; b < s.blocks.size() && !s.blocks[b]->allocated; ++b) end += s.blocks[b]->size;
        const uintptr_t pages_start = seg->page_up(start), pages_end = seg->page_down(end);
        if (pages_start < pages_end)
          freeable.push_back({s.is_small, true, s.stream, end - start, start, pages_start});
      }
      continue;
    }
    size_t size = 0;
    bool any_allocated = false;
    for (const Block* b : s.blocks) {
      any_allocated |= b->allocated;
      size += b->size;
    }
    if (!any_allocated) freeable.push_back({s.is_small, false, s.stream, size, s.address, s.address});
  }
  if (freeable.size() != recorded.size()) return false;
  std::sort(freeable.begin(), freeable.end(),
            [](const Freeable& x, const Freeable& y) { return x.key() < y.key(); });
  for (size_t k = 0; k < recorded.size(); ++k)
    if (freeable[k].released != recorded[k]) return false;
  return true;
}

std::optional<Divergence> LockstepReplay::run(size_t& empty_cache_calls, size_t& done,
                                            size_t total) {
  const size_t n = events_.size();
  size_t i = 0;
  while (i < n) {
    size_t j = side_effects_end(events_, i);
    // A completion right after its free, replayed as a waiting free's
    // (a free point flipped), is a side effect of the next request.
    if (j == i && i == completion_as_side_effect_) j = side_effects_end(events_, i + 1);

    // Delayed frees that the trace completes before this request: those the
    // request's first step (native's process_events, which only queries
    // events) completed, recorded before anything else it did. Later ones
    // in the run come from a synchronization of every stream (the OOM
    // retry, empty_cache), which completes every event anyway; completing
    // them here would free their blocks too early, before a garbage
    // collection or release the trace records first. Even the leading ones
    // may be the OOM retry's (its events were still pending when the
    // request searched the cache, and the retry freed no segment): an
    // ambiguous point, tried the other way where polling diverges.
    // A malloc (or OOM) request polls events and may release memory; a free
    // (or the end of the trace) does neither.
    const bool request_polls = j < n && events_[j].action != EventKind::kFreeRequested;
    const bool leading_completion =
        i < j && events_[i].action == EventKind::kFreeCompleted && !delayed_frees_.empty();
    bool poll = true;
    if (leading_completion && request_polls) {
      ambiguous_.push_back(point(i, kLeadingCompletions));
      poll = !flipped_.contains(point(i, kLeadingCompletions));
    }
    if (leading_completion && poll)
      for (size_t k = i; k < j && events_[k].action == EventKind::kFreeCompleted; ++k)
        if (auto it = delayed_frees_.find(events_[k].address);
            it != delayed_frees_.end() && !completed_by_sync_.contains(it->first))
          backend_.complete_event(it->second);

    // A leading run of segment frees and completions with no request that
    // can have made it (a free, or the end of the trace) is an
    // empty_cache() call; without a segment_free, one that found no free
    // segment. (Completions alone before a malloc are replayed as its own
    // polling, which leaves the same state, num_sync_all_streams aside,
    // which no event shows.)
    bool lead_has_segment_free = false;
    const size_t lead = leading_release_run(events_, i, j, &lead_has_segment_free);
    bool as_empty_cache = lead > i && !request_polls;
    // Before a malloc, both an empty_cache() and the request's own release
    // may explain segment frees. First the likelier: the request where, as
    // replayed, it would release (it misses the cache, and garbage
    // collection is due or the limit or the device's free bytes refuse a
    // new segment), else the empty_cache(); flipped (replay_device_with_retries retries
    // it where the first choice leads to a divergence), the other. Where
    // the run cannot be an empty_cache(), only the request's release is.
    if (lead_has_segment_free && request_polls && empty_cache_would_free(i, lead)) {
      ambiguous_.push_back(point(i, kReleaseRun));
      as_empty_cache =
          request_would_release(events_[j]) == flipped_.contains(point(i, kReleaseRun));
    }
    if (as_empty_cache) {
      clock_cursor_ = i;
      run_start_ = i;
      log_.events.clear();
      engine_.empty_cache();
      ++empty_cache_calls;
      const size_t emitted = log_.events.size();
      if (emitted == 0 || emitted > j - i)
        return compare(i, lead, "empty_cache() freed a different set of segments");
      if (auto d = compare(i, i + emitted, "")) return d;
      for (size_t k = i; k < i + emitted; ++k)
        if (events_[k].action == EventKind::kFreeCompleted) forget_delayed(events_[k].address);
      i += emitted;
      done += emitted;
    }
    if (j == n) {
      if (i < n) return compare(i, n, "no request explains these events");
      break;
    }

    const RecordedEvent& r = events_[j];
    clock_cursor_ = i;
    run_start_ = i;
    request_stream_ = r.stream;
    for (size_t k = i; k < j; ++k)
      if (events_[k].action == EventKind::kSegmentAlloc) {
        backend_.prime(events_[k].address, events_[k].size);
        break;
      }
    log_.events.clear();
    std::string note;
    size_t consumed_to = j + 1;
    switch (r.action) {
      case EventKind::kAlloc:
      case EventKind::kOom:
        if (r.action == EventKind::kOom) backend_.refuse_all();
        // Before a request's segment_alloc, the trace shows the segments
        // it freed: the device refused it until then (on a GPU, other
        // processes and the CUDA context use memory too, and free bytes
        // are not a free range), whatever the replay device's free bytes
        // say. Releases for other reasons (garbage collection, the limit)
        // come first in any case.
        if (i < lead) {
          size_t frees = 0;
          for (size_t k = i; k < lead; ++k)
            frees += is_segment_release(events_[k]);
          backend_.refuse_until_releases(frees);
        }
        try {
          Block* b = engine_.malloc(r.size, r.stream, r.context);
          live_[b->address] = b;
          if (r.action == EventKind::kOom) note = "the request succeeded";
        } catch (const OutOfMemoryError& e) {
          if (r.action == EventKind::kAlloc) note = e.what();
        } catch (const CacheallocError& e) {
          note = e.what();
        }
        backend_.stop_refusing();
        break;
      case EventKind::kFreeRequested: {
        auto it = live_.find(r.address);
        if (it == live_.end())
          return diverge(r.source_index, describe(r),
                         EventDescription{"nothing", 0, 0, 0, "no live allocation at this address"});
        Block* b = it->second;
        live_.erase(it);
        bool immediate = completes_at_once(events_, j);
        // A completion right after the free may also be a free that waited
        // and was completed by the next malloc's OOM retry (its
        // synchronization; the malloc's polling would leave the state of an
        // immediate free). Ambiguous in a trace that has waiting frees,
        // before a request that can poll. Only side effects after the
        // completion (or nothing): no request follows that could have
        // synchronized, so the free was immediate.
        const size_t next_request = immediate ? side_effects_end(events_, j + 2) : n;
        if (immediate && has_waiting_frees_ && next_request < n &&
            events_[next_request].action != EventKind::kFreeRequested) {
          ambiguous_.push_back(point(j, kImmediateFree));
          immediate = !flipped_.contains(point(j, kImmediateFree));
          if (!immediate) {
            completed_by_sync_.insert(r.address);
            completion_as_side_effect_ = j + 1;
          }
        }
        if (immediate) {
          consumed_to = j + 2;
        } else {
          // Used on another stream: the free waits for an event the trace
          // completes later.
          engine_.record_stream(b, waiting_stream(j));
        }
        engine_.free(b, r.context);
        if (!immediate) delayed_frees_[r.address] = backend_.last_event();
        break;
      }
      default:
        break;  // side effects never reach here (nor kinds a trace does not hold)
    }
    backend_.unprime();
    // (Most traces have no delayed frees: skip hashing every completed free.)
    if (!delayed_frees_.empty())
      for (const Emitted& e : log_.events)
        if (e.action == EventKind::kFreeCompleted) forget_delayed(e.address);
    if (auto d = compare(i, consumed_to, note)) return d;
    if (options_.check_invariants) {
      engine_.check_invariants();
      backend_.check();
    }
    if (options_.after_request) options_.after_request(consumed_to, engine_);
    done += consumed_to - i;
    if (options_.progress && (done >> 20) != ((done - (consumed_to - i)) >> 20))
      options_.progress(done, total);
    i = consumed_to;
  }
  return std::nullopt;
}

std::optional<Divergence> LockstepReplay::check_final(const RecordedTrace& trace) {
  std::vector<const RecordedSegment*> want;
  for (size_t k = 0; k < trace.final_segments.size(); ++k)
    if (trace.final_segment_devices[k] == device_index_) want.push_back(&trace.final_segments[k]);
  const std::vector<SegmentView> have = engine_.segments();
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
      blocks_match = wb[b].first == hb[b]->size && wb[b].second == block_state_name(*hb[b]);
    if (!blocks_match) {
      w.note = h.note = "final state: block layout of the segment differs";
      return diverge(end, w, h);
    }
  }
  return std::nullopt;
}

}  // namespace cachealloc::replay_detail
