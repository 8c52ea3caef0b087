// Replay throughput: recorded traces fed through a fresh engine in lockstep
// (replay_trace with default options: every emitted event compared with the
// recorded one, final segments checked, no snapshot built).
//
//   BM_Replay/<trace>   each reference trace in tests/data/traces (recorded
//                       from PyTorch 2.11 on an H100); traces recorded under a
//                       memory fraction replay with that limit, read from the
//                       trace's .json, as `cachealloc replay --memory-limit`;
//   BM_ReplaySynthetic  a >= 10 M-event trace made in memory: an engine on a
//                       SimulatedDevice runs a random alloc/free workload with
//                       an unbounded HistoryRecorder, and its history becomes
//                       the RecordedTrace (as parse_trace would build it).
//
// Traces are parsed (or generated) once, outside the timed loop; one
// iteration is one whole replay_trace() call, wall time. The events_per_s
// counter is recorded events replayed per second; a divergence fails the
// benchmark with its description. Figures and how to rerun: docs/benchmarks.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "allocator/config/config.h"
#include "allocator/engine/device_allocator.h"
#include "allocator/sim/simulated_device.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "pickle/pickle_reader.h"
#include "replay/engine_trace.h"
#include "replay/replayer.h"
#include "replay/trace.h"
#include "stats/history.h"

namespace cachealloc {
namespace {

namespace fs = std::filesystem;

constexpr char kTraceSuffix[] = ".pickle.gz";

struct TraceFile {
  std::string name;  // "resnet18"
  std::string path;  // .../traces/resnet18.pickle.gz
};

// The reference traces, by name.
std::vector<TraceFile> find_traces(const fs::path& dir) {
  std::vector<TraceFile> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    const size_t suffix = sizeof(kTraceSuffix) - 1;
    if (file.size() > suffix && file.ends_with(kTraceSuffix))
      out.push_back({file.substr(0, file.size() - suffix), entry.path().string()});
  }
  std::sort(out.begin(), out.end(),
            [](const TraceFile& a, const TraceFile& b) { return a.name < b.name; });
  return out;
}

// The number after `"key":` in a flat JSON object, or nullopt when the key is
// absent or its value is not a number (null). Enough for the two numeric
// fields of a trace's .json; not a JSON parser.
std::optional<double> json_number(const std::string& text, const std::string& key) {
  const size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return std::nullopt;
  const size_t colon = text.find(':', at);
  if (colon == std::string::npos) return std::nullopt;
  const char* start = text.c_str() + colon + 1;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start) return std::nullopt;
  return v;
}

// Bytes allowed during recording: floor(memory_fraction * device_total_memory)
// from "<trace>.json" beside the pickle; nullopt when no fraction was set.
std::optional<size_t> recorded_memory_limit(const TraceFile& t) {
  const std::string json_path =
      t.path.substr(0, t.path.size() - (sizeof(kTraceSuffix) - 1)) + ".json";
  std::ifstream in(json_path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto fraction = json_number(text.str(), "memory_fraction");
  const auto total = json_number(text.str(), "device_total_memory");
  if (!fraction || !total) return std::nullopt;
  return static_cast<size_t>(std::floor(*fraction * *total));
}

std::string describe(const Divergence& d) {
  std::ostringstream s;
  s << "diverged at device " << d.device << " event " << d.index << ": expected "
    << d.expected.action << " addr " << d.expected.address << " size " << d.expected.size
    << ", got " << d.got.action << " addr " << d.got.address << " size " << d.got.size
    << (d.got.note.empty() ? "" : " (" + d.got.note + ")");
  return s.str();
}

// Times replay_trace(trace, options) and reports events per second.
void time_replays(benchmark::State& state, const RecordedTrace& trace,
                  const ReplayOptions& options) {
  size_t events_per_replay = 0;
  for (const auto& device : trace.devices) events_per_replay += device.size();
  size_t replayed = 0;
  size_t empty_cache_calls = 0;
  for (auto _ : state) {
    const ReplayResult r = replay_trace(trace, options);
    if (r.divergence) {
      state.SkipWithError(describe(*r.divergence).c_str());
      break;
    }
    replayed += r.events;
    empty_cache_calls = r.empty_cache_calls;
  }
  state.SetItemsProcessed(static_cast<int64_t>(replayed));
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(replayed), benchmark::Counter::kIsRate);
  state.counters["events"] = static_cast<double>(events_per_replay);
  state.counters["empty_cache_calls"] = static_cast<double>(empty_cache_calls);
}

// ---- reference traces -----------------------------------------------------

struct LoadedTrace {
  RecordedTrace trace;
  ReplayOptions options;
};

// Parsed on first use and kept: parsing is never timed, and a filtered run
// parses only the traces it replays.
const LoadedTrace& load(const TraceFile& file) {
  static std::map<std::string, std::unique_ptr<LoadedTrace>> cache;
  std::unique_ptr<LoadedTrace>& slot = cache[file.path];
  if (!slot) {
    slot = std::make_unique<LoadedTrace>();
    slot->trace = parse_trace(read_pickle_file(file.path), /*keep_frames=*/false);
    slot->options.memory_limit = recorded_memory_limit(file);
  }
  return *slot;
}

void BM_Replay(benchmark::State& state, const TraceFile& file) {
  const LoadedTrace* loaded = nullptr;
  try {
    loaded = &load(file);
  } catch (const std::exception& e) {
    state.SkipWithError((file.path + ": " + e.what()).c_str());
    return;
  }
  time_replays(state, loaded->trace, loaded->options);
  if (loaded->options.memory_limit)
    state.counters["memory_limit_bytes"] = static_cast<double>(*loaded->options.memory_limit);
}

// ---- synthetic long trace -------------------------------------------------

constexpr size_t kSyntheticEvents = 10'000'000;
constexpr size_t kSyntheticMaxLive = 512;          // live blocks at most
constexpr uint64_t kSyntheticEmptyCacheEvery = 1 << 20;  // steps between empty_cache()
constexpr StreamId kSyntheticStreams[] = {0, 0, 0, 0, 0, 0, 0, 0x51};  // 1 in 8 on a side stream

// Runs a random workload (request sizes log-uniform in [1 B, 64 MiB), both
// pools, two streams, up to kSyntheticMaxLive live blocks, an empty_cache()
// now and then) on an engine with an unbounded HistoryRecorder until the
// history holds `min_events` entries, and returns that history as a
// RecordedTrace with the engine's final segments, default config.
RecordedTrace make_synthetic_trace(size_t min_events) {
  const AllocatorConfig config;
  int64_t now_us = 0;
  HistoryRecorder history([&now_us] { return now_us; });
  history.enable(std::numeric_limits<size_t>::max() / 2, /*keep_context=*/false);
  SimulatedDevice device(ReplayOptions{}.device_memory);
  DeviceCachingAllocator engine(0, config, device);
  engine.add_observer(&history);

  std::mt19937_64 rng(0x5eed);
  std::uniform_real_distribution<double> log2_size(0.0, 26.0);  // 1 B .. 64 MiB
  std::uniform_int_distribution<size_t> stream_pick(0, std::size(kSyntheticStreams) - 1);
  std::bernoulli_distribution allocate(0.5);
  std::vector<Block*> live;
  for (uint64_t step = 1; history.size() < min_events; ++step) {
    ++now_us;
    if (step % kSyntheticEmptyCacheEvery == 0) engine.empty_cache();
    if (live.empty() || (live.size() < kSyntheticMaxLive && allocate(rng))) {
      const auto bytes = static_cast<size_t>(std::exp2(log2_size(rng)));
      live.push_back(engine.malloc(bytes, kSyntheticStreams[stream_pick(rng)]));
    } else {
      std::swap(live[rng() % live.size()], live.back());
      engine.free(live.back());
      live.pop_back();
    }
  }

  const std::vector<TraceEntry> entries = history.entries();
  history.disable();  // frees the ring
  return trace_from_history(entries, engine.segments(), config);
}

void BM_ReplaySynthetic(benchmark::State& state) {
  // Built on first use (a few seconds, untimed) and kept for repetitions.
  static const RecordedTrace trace = make_synthetic_trace(kSyntheticEvents);
  time_replays(state, trace, ReplayOptions{});
}

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  using namespace cachealloc;
  const int cpu = bench::pin_to_one_cpu();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("pinned_cpu", std::to_string(cpu));

  // $CACHEALLOC_TRACE_DIR replaces the built-in tests/data/traces (to run a
  // copied binary elsewhere).
  const char* trace_dir = std::getenv("CACHEALLOC_TRACE_DIR");
  const fs::path dir = trace_dir ? fs::path(trace_dir) : fs::path(CACHEALLOC_TRACES_DIR);
  if (trace_dir && !fs::is_directory(dir)) {
    std::fprintf(stderr, "CACHEALLOC_TRACE_DIR='%s' is not a directory\n", trace_dir);
    return 2;
  }
  static const std::vector<TraceFile> traces = find_traces(dir);
  if (traces.empty())
    std::fprintf(stderr, "warning: no *%s traces in %s\n", kTraceSuffix, dir.c_str());
  for (const TraceFile& t : traces)
    benchmark::RegisterBenchmark(("BM_Replay/" + t.name).c_str(), BM_Replay, t)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  benchmark::RegisterBenchmark("BM_ReplaySynthetic", BM_ReplaySynthetic)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(1);

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
