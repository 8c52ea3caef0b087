#include "replay/replayer.h"

#include <chrono>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "replay/lockstep_replay.h"
#include "stats/snapshot.h"

namespace cachealloc {
namespace {

using replay_detail::LockstepReplay;

// How many extra replays of one device replay_device_with_retries may run
// to settle ambiguous points (each replays the device's trace from its start).
constexpr size_t kMaxAmbiguityRetries = 64;

// One device's replay, with what it counted.
struct DeviceOutcome {
  std::unique_ptr<LockstepReplay> replay;
  std::optional<Divergence> divergence;
  size_t empty_cache_calls = 0;
  size_t events = 0;  // replayed in step
};

// Replays device `dev`'s trace. A divergence after an ambiguous point may be
// that choice's fault: the trace is replayed again with the choices of one
// run before the divergence changed (the latest run whose change gets the
// replay further), and again from there while the replay gets further. The
// state before a run is the same whatever is chosen in it, so a retry
// reaches at least that run. Bounded: a trace that no choice explains ends
// with the divergence that got furthest.
DeviceOutcome replay_device_with_retries(const RecordedTrace& trace, size_t dev,
                                         const AllocatorConfig& config,
                                         const ReplayOptions& options, size_t done_before,
                                         size_t total) {
  absl::flat_hash_set<size_t> flipped;
  size_t retries = 0;
  auto attempt = [&] {
    DeviceOutcome o;
    o.replay = std::make_unique<LockstepReplay>(static_cast<int>(dev), trace.devices[dev],
                                                config, options, flipped);
    size_t done = done_before;  // run() reports progress over all devices
    o.divergence = o.replay->run(o.empty_cache_calls, done, total);
    o.events = done - done_before;
    return o;
  };
  auto further_than = [](const DeviceOutcome& a, const DeviceOutcome& b) {
    return !a.divergence || (b.divergence && a.divergence->index > b.divergence->index);
  };
  DeviceOutcome best = attempt();
  bool further = true;
  while (best.divergence && further && retries < kMaxAmbiguityRetries) {
    further = false;
    const std::vector<size_t> points = best.replay->ambiguous();
    // Latest run first. A run may hold two points (its segment frees, and
    // its leading completions), and each change of them (either one, or
    // both: some runs need both) is tried before one is kept: taking the
    // first that gets further can keep a wrong one that only gets a few
    // events further, after which no later change helps (self-replay seed
    // 12: an empty_cache() in place of the OOM retry's synchronization).
    for (auto p = points.rbegin(); p != points.rend() && retries < kMaxAmbiguityRetries;) {
      const size_t event = LockstepReplay::point_event(*p);
      std::vector<size_t> run;  // this run's points still open to a change
      for (; p != points.rend() && LockstepReplay::point_event(*p) == event; ++p)
        if (best.replay->source_index(*p) <= best.divergence->index && !flipped.contains(*p))
          run.push_back(*p);
      std::vector<std::vector<size_t>> changes;
      for (size_t q : run) changes.push_back({q});
      if (run.size() == 2) changes.push_back(run);
      std::optional<DeviceOutcome> chosen;
      std::vector<size_t> chosen_change;
      for (const std::vector<size_t>& change : changes) {
        if (retries == kMaxAmbiguityRetries) break;
        ++retries;
        for (size_t q : change) flipped.insert(q);
        DeviceOutcome other = attempt();
        for (size_t q : change) flipped.erase(q);
        if (further_than(other, chosen ? *chosen : best)) {
          chosen = std::move(other);
          chosen_change = change;
          if (!chosen->divergence) break;
        }
      }
      if (chosen) {
        for (size_t q : chosen_change) flipped.insert(q);
        best = std::move(*chosen);
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
  std::vector<std::unique_ptr<LockstepReplay>> replays;
  size_t done = 0;
  for (size_t dev = 0; dev < trace.devices.size(); ++dev) {
    if (result.divergence) {  // an earlier device diverged: only its stats
      replays.push_back(std::make_unique<LockstepReplay>(static_cast<int>(dev),
                                                         trace.devices[dev], config, options,
                                                         absl::flat_hash_set<size_t>{}));
    } else {
      DeviceOutcome o = replay_device_with_retries(trace, dev, config, options, done, total);
      done += o.events;
      result.empty_cache_calls += o.empty_cache_calls;
      result.divergence = std::move(o.divergence);
      replays.push_back(std::move(o.replay));
    }
    LockstepReplay& r = *replays.back();
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
