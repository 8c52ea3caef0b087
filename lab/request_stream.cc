#include "lab/request_stream.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "allocator/engine/blocks/size_policy.h"
#include "replay/trace_runs.h"

namespace cachealloc {
namespace {

constexpr uint32_t kScratchSlot = std::numeric_limits<uint32_t>::max();

class Extractor {
 public:
  Extractor(const RecordedTrace& trace, int device, const ExtractionOptions& options)
      : events_(trace.devices[static_cast<size_t>(device)]),
        config_(trace.config),
        options_(options) {
    out_.device = device;
    out_.recorded_config = trace.config;
    out_.recorded_events = events_.size();
    out_.requests.reserve(events_.size() / 2 + 16);
    out_.time_us.reserve(events_.size() / 2 + 16);
  }

  RequestStream run();

 private:
  bool request_could_release(size_t first, size_t request, size_t reserved_before) const;
  void push(RequestKind kind, uint64_t size, uint32_t slot, StreamId stream, int64_t time_us);
  uint32_t take_slot();
  void give_back_slot(uint32_t slot) { free_slots_.push_back(slot); }
  uint16_t stream_index(StreamId stream);

  const std::vector<RecordedEvent>& events_;
  const AllocatorConfig& config_;
  const ExtractionOptions& options_;
  RequestStream out_;
  absl::flat_hash_map<uintptr_t, uint32_t> live_;      // address -> slot
  absl::flat_hash_map<uintptr_t, uint32_t> deferred_;  // address -> slot, awaiting completion
  absl::flat_hash_map<StreamId, uint16_t> stream_of_;
  absl::flat_hash_map<uint32_t, uint32_t> fallible_group_;  // recorded -> dense
  std::vector<uint32_t> free_slots_;
  uint32_t next_slot_ = 0;
};

// The trace-only counterpart of the lockstep replayer's engine check: could
// the request at `request` have returned segments to the device itself?
// Only a request that missed the cache can (it then reserved a segment, or
// raised OOM), and only through garbage collection or the retry path, which
// need a memory limit (or a full device, which a trace cannot show).
bool Extractor::request_could_release(size_t first, size_t request,
                                      size_t reserved_before) const {
  const RecordedEvent& r = events_[request];
  if (r.action == EventKind::kFreeRequested) return false;
  if (r.action == EventKind::kOom) return true;  // OOM always ran the retry path
  bool missed_cache = false;
  bool classic_release = false;
  for (size_t k = first; k < request; ++k) {
    missed_cache |= events_[k].action == EventKind::kSegmentAlloc ||
                    events_[k].action == EventKind::kSegmentMap;
    classic_release |= events_[k].action == EventKind::kSegmentFree;
  }
  if (!missed_cache) return false;
  const std::optional<size_t>& limit = options_.recorded_limit;
  // Garbage collection returns whole classic segments only: it never
  // unmaps an expandable segment's pages.
  if (config_.garbage_collection_threshold > 0.0 && classic_release) {
    if (!limit) return true;  // a GC config is only recorded to be used with a limit
    const auto threshold = static_cast<size_t>(config_.garbage_collection_threshold *
                                               static_cast<double>(*limit));
    if (reserved_before > threshold) return true;
  }
  if (limit && r.size <= kMaxRequestSize) {
    const size_t segment =
        segment_size_for(round_request_size(r.size, config_), config_.large_segment_size);
    if (reserved_before + segment > *limit) return true;
  }
  return false;
}

void Extractor::push(RequestKind kind, uint64_t size, uint32_t slot, StreamId stream,
                     int64_t time_us) {
  Request r;
  r.kind = kind;
  r.size = size;
  r.slot = slot;
  // Only requests that reserve memory use a stream; the others leave it 0.
  if (kind == RequestKind::kAlloc || kind == RequestKind::kRetryOom) r.stream = stream_index(stream);
  out_.requests.push_back(r);
  out_.time_us.push_back(time_us);
}

uint32_t Extractor::take_slot() {
  if (!free_slots_.empty()) {
    const uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  if (next_slot_ == kScratchSlot - 1)
    throw TraceFormatError("trace: more than 4 billion allocations alive at once");
  return next_slot_++;
}

uint16_t Extractor::stream_index(StreamId stream) {
  auto [it, inserted] = stream_of_.try_emplace(stream, static_cast<uint16_t>(out_.streams.size()));
  if (inserted) {
    if (out_.streams.size() == std::numeric_limits<uint16_t>::max())
      throw TraceFormatError("trace: more than 65535 streams");
    out_.streams.push_back(stream);
  }
  return it->second;
}

RequestStream Extractor::run() {
  const size_t n = events_.size();
  size_t reserved = 0;  // bytes the recorded allocator held, from segment events
  size_t i = 0;
  const int64_t start_us = n > 0 ? events_.front().time_us : 0;
  for (const InitialBlock& b : options_.live_at_start) {
    const uint32_t slot = take_slot();
    if (!live_.try_emplace(b.address, slot).second)
      throw TraceFormatError("trace: device " + std::to_string(out_.device) +
                             ": two blocks live at the start at one address");
    push(RequestKind::kAlloc, b.size, slot, b.stream, start_us);
    ++out_.initial_blocks;
  }
  while (i < n) {
    const size_t j = side_effects_end(events_, i);
    const size_t reserved_before = reserved;
    for (size_t k = i; k < j; ++k) {
      const RecordedEvent& e = events_[k];
      if (e.action == EventKind::kSegmentAlloc || e.action == EventKind::kSegmentMap)
        reserved += e.size;
      else if (is_segment_release(e))
        reserved -= std::min(reserved, e.size);
    }
    // Deferred frees the trace completes before this request.
    for (size_t k = i; k < j; ++k) {
      if (events_[k].action != EventKind::kFreeCompleted) continue;
      auto it = deferred_.find(events_[k].address);
      if (it == deferred_.end()) continue;
      push(RequestKind::kCompleteFree, 0, it->second, events_[k].stream, events_[k].time_us);
      give_back_slot(it->second);
      deferred_.erase(it);
    }
    bool lead_has_segment_free = false;
    leading_release_run(events_, i, j, &lead_has_segment_free);
    if (lead_has_segment_free && (j == n || !request_could_release(i, j, reserved_before))) {
      push(RequestKind::kEmptyCache, 0, 0, 0, events_[j < n ? j : i].time_us);
      ++out_.empty_cache_calls;
    }
    if (j == n) break;

    const RecordedEvent& r = events_[j];
    size_t consumed_to = j + 1;
    switch (r.action) {
      case EventKind::kAlloc: {
        const uint32_t slot = take_slot();
        if (!live_.try_emplace(r.address, slot).second)
          throw TraceFormatError("trace: device " + std::to_string(out_.device) + " entry " +
                                 std::to_string(r.source_index) +
                                 ": alloc at an address that is already allocated");
        for (size_t k = i; k < j; ++k)
          if (events_[k].action == EventKind::kSegmentAlloc) {
            out_.hints.push_back(SegmentHint{out_.requests.size(), events_[k].address, events_[k].size});
            break;  // native reserves at most one segment per request
          }
        if (r.context) out_.contexts.emplace_back(out_.requests.size(), r.context);
        if (r.fallible_group != kNotFallible) {
          // Dense group numbers: a replay keeps one flag per group.
          auto [g, added] = fallible_group_.try_emplace(
              r.fallible_group, static_cast<uint32_t>(out_.fallible_groups));
          if (added) ++out_.fallible_groups;
          out_.fallible.push_back(FallibleRequest{out_.requests.size(), g->second});
        }
        push(RequestKind::kAlloc, r.size, slot, r.stream, r.time_us);
        break;
      }
      case EventKind::kOom:
        push(RequestKind::kRetryOom, r.size, kScratchSlot, r.stream, r.time_us);
        ++out_.recorded_ooms;
        break;
      case EventKind::kFreeRequested: {
        const bool immediate = j + 1 < n &&
                               events_[j + 1].action == EventKind::kFreeCompleted &&
                               events_[j + 1].address == r.address;
        if (immediate) consumed_to = j + 2;
        auto it = live_.find(r.address);
        if (it == live_.end()) {
          ++out_.unmatched_frees;
          break;
        }
        const uint32_t slot = it->second;
        live_.erase(it);
        if (immediate) {
          push(RequestKind::kFree, 0, slot, r.stream, r.time_us);
          give_back_slot(slot);
        } else {
          push(RequestKind::kFreeDeferred, 0, slot, r.stream, r.time_us);
          deferred_[r.address] = slot;
          ++out_.deferred_frees;
        }
        break;
      }
      default:
        break;  // side effects never reach here (nor kinds a trace does not hold)
    }
    i = consumed_to;
  }
  out_.slots = next_slot_;
  if (out_.recorded_ooms > 0) {
    const uint32_t scratch = next_slot_;
    out_.slots = next_slot_ + 1;
    for (Request& q : out_.requests)
      if (q.kind == RequestKind::kRetryOom) q.slot = scratch;
  }
  if (out_.streams.empty()) out_.streams.push_back(0);
  return std::move(out_);
}

}  // namespace

std::vector<int> devices_with_events(const RecordedTrace& trace) {
  std::vector<int> out;
  for (size_t d = 0; d < trace.devices.size(); ++d)
    if (!trace.devices[d].empty()) out.push_back(static_cast<int>(d));
  return out;
}

const CallContext* context_of(const RequestStream& stream, size_t request) {
  auto it = std::lower_bound(stream.contexts.begin(), stream.contexts.end(), request,
                             [](const auto& entry, size_t k) { return entry.first < k; });
  return it != stream.contexts.end() && it->first == request ? it->second.get() : nullptr;
}

RequestStream extract_requests(const RecordedTrace& trace, int device,
                               const ExtractionOptions& options) {
  if (device < 0 || static_cast<size_t>(device) >= trace.devices.size())
    throw TraceFormatError("trace: no device " + std::to_string(device) + " (the trace has " +
                           std::to_string(trace.devices.size()) + ")");
  return Extractor(trace, device, options).run();
}

}  // namespace cachealloc
