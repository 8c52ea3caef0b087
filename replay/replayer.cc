#include "replay/replayer.h"

#include <chrono>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "replay/device_replay.h"
#include "stats/snapshot.h"

namespace cachealloc {
namespace {

using replay_detail::DeviceReplay;

// How many extra replays of one device replay_device may run to settle
// ambiguous points (each replays the device's trace from its start).
constexpr size_t kMaxAmbiguityRetries = 64;

// One device's replay, with what it counted.
struct DeviceOutcome {
  std::unique_ptr<DeviceReplay> replay;
  std::optional<Divergence> divergence;
  size_t empty_cache_calls = 0;
  size_t events = 0;  // replayed in step
};

// Replays device `dev`'s trace. A divergence after an ambiguous point may be
// that choice's fault: the trace is replayed again with the latest such
// point before the divergence taken the other way, keeping the flip while
// the replay gets further. The state before a point is the same either
// way, so a retry reaches at least that point. Bounded: a trace that no
// choice explains ends with the divergence that got furthest.
DeviceOutcome replay_device(const RecordedTrace& trace, size_t dev, const AllocatorConfig& config,
                            const ReplayOptions& options, size_t done_before, size_t total) {
  absl::flat_hash_set<size_t> flipped;
  auto attempt = [&] {
    DeviceOutcome o;
    o.replay = std::make_unique<DeviceReplay>(static_cast<int>(dev), trace.devices[dev], config,
                                              options, flipped);
    size_t done = done_before;  // run() reports progress over all devices
    o.divergence = o.replay->run(o.empty_cache_calls, done, total);
    o.events = done - done_before;
    return o;
  };
  DeviceOutcome best = attempt();
  size_t retries = 0;
  bool further = true;
  while (best.divergence && further && retries < kMaxAmbiguityRetries) {
    further = false;
    const std::vector<size_t> points = best.replay->ambiguous();
    // Flips `change` (one point, or two of one run: some runs need both of
    // their choices changed); keeps it if the replay gets further.
    auto try_flips = [&](std::initializer_list<size_t> change) {
      ++retries;
      for (size_t p : change) flipped.insert(p);
      DeviceOutcome other = attempt();
      if (!other.divergence || other.divergence->index > best.divergence->index) {
        best = std::move(other);
        return true;
      }
      for (size_t p : change) flipped.erase(p);
      return false;
    };
    for (auto p = points.rbegin(); p != points.rend() && retries < kMaxAmbiguityRetries; ++p) {
      if (best.replay->source_index(*p) > best.divergence->index || flipped.contains(*p))
        continue;
      if (try_flips({*p})) {
        further = true;
        break;
      }
      const auto q = std::next(p);
      if (q != points.rend() && !flipped.contains(*q) && retries < kMaxAmbiguityRetries &&
          DeviceReplay::point_event(*q) == DeviceReplay::point_event(*p) && try_flips({*p, *q})) {
        further = true;
        break;
      }
    }
  }
  return best;
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
    if (result.divergence) {  // an earlier device diverged: only its stats
      replays.push_back(std::make_unique<DeviceReplay>(static_cast<int>(dev), trace.devices[dev],
                                                       config, options,
                                                       absl::flat_hash_set<size_t>{}));
    } else {
      DeviceOutcome o = replay_device(trace, dev, config, options, done, total);
      done += o.events;
      result.empty_cache_calls += o.empty_cache_calls;
      result.divergence = std::move(o.divergence);
      replays.push_back(std::move(o.replay));
    }
    DeviceReplay& r = *replays.back();
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
