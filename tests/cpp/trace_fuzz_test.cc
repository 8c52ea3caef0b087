// Deterministic fuzzing of the untrusted-input path: pickle bytes ->
// read_pickle -> parse_trace -> replay_trace (and the lab's
// extract_requests -> run_whatif), on mutated copies of the bundled
// examples/traces snapshots (trace_mutator.h says how they are mutated).
//
// The rule checked: every input either goes through, or fails with one of
// the documented errors (PickleError, TraceFormatError, ConfigError, and for
// the lab SizeOverflowError). A crash, a sanitizer report, std::bad_alloc,
// any other exception, or one input taking more than kMaxSecondsPerInput
// fails the test; the input is saved so that it can be replayed and
// minimized.
//
// The default run is fixed (seed and count; see kDefaultIterations). For
// longer exploratory runs:
//   CACHEALLOC_FUZZ_ITERATIONS  inputs to try (default kDefaultIterations)
//   CACHEALLOC_FUZZ_SEED        run seed (default kDefaultSeed)
//   CACHEALLOC_FUZZ_FIRST       index of the first input (to re-run one)
//   CACHEALLOC_FUZZ_SEEDS_DIR   another directory of *.pickle.gz seeds
//   CACHEALLOC_FUZZ_CURRENT     file that holds each input while it runs
//                               (what a crash left behind)
//   CACHEALLOC_FUZZ_SAVE_DIR    where failing inputs go (default: temp dir)
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "allocator/base/errors.h"
#include "lab/lab_config.h"
#include "lab/request_stream.h"
#include "lab/whatif.h"
#include "pickle/pickle_reader.h"
#include "pickle/pickle_writer.h"
#include "replay/replayer.h"
#include "replay/trace.h"
#include "tests/cpp/trace_mutator.h"
#include "tests/cpp/test_env.h"

namespace cachealloc {
namespace {

// 9 to 10 s in a Release build on 2 cores (the machine's speed varies).
// Sanitized builds (scripts/sanitize.sh) are about 12 times slower per
// input: fewer there (about 45 s), so the checking run stays near its 10
// minutes.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kDefaultIterations = 8000;
#else
constexpr size_t kDefaultIterations = 20000;
#endif
constexpr uint64_t kDefaultSeed = 20240611;
// Events per seed window cut from a long trace: long enough to replay
// segment reuse, short enough that one input costs well under a millisecond.
constexpr size_t kWindowEvents = 120;
// A window with frames is kept shorter: frames are most of a snapshot.
constexpr size_t kFramedWindowEvents = 10;
// Recorded pickles up to this size are seeds as they are (bytes).
constexpr size_t kMaxRecordedSeedBytes = 64 << 10;
// One small input taking this long is a hang, not slowness (the slowest
// legitimate ones, what-if replays that map a 1 TiB request page by page,
// take about 3 s under ASan).
constexpr double kMaxSecondsPerInput = 10.0;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

// The bytes of a file, gunzipped if it is gzip (gzread passes other files
// through): for a recorded .pickle.gz, the pickle as Python wrote it.
std::string gunzip_file(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzopen(path.c_str(), "rb"), &gzclose);
  if (!gz) throw std::runtime_error("cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(gz.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  if (n < 0) throw std::runtime_error("cannot gunzip " + path);
  return out;
}

// `d` (a dict) without its "frames" field.
PyValue without_frames(const PyValue& d) {
  PyValue out = PyValue::dict();
  for (const auto& [k, v] : d.as_dict())
    if (!(k.kind() == PyValue::Kind::kStr && k.as_str() == "frames")) out.as_dict().emplace_back(k, v);
  return out;
}

// A copy of `snap` with only events [first, first + n) of each device
// (without their frames when strip_frames), and the final segments only for
// a window at the start (a later window's final state is unknown), without
// frames (parse_trace never reads those): a small seed that still has every
// field the parser reads.
PyValue window(const PyValue& snap, size_t first, size_t n, bool strip_frames) {
  PyValue out = PyValue::dict();
  for (const auto& [k, v] : snap.as_dict()) {
    const std::string key = k.kind() == PyValue::Kind::kStr ? k.as_str() : "";
    if (key == "device_traces") {
      PyValue devs = PyValue::list();
      for (const PyValue& d : v.items()) {
        PyValue events = PyValue::list();
        for (size_t i = first; i < std::min(d.items().size(), first + n); ++i)
          events.append(strip_frames ? without_frames(d.items()[i]) : d.items()[i]);
        devs.append(events);
      }
      out.as_dict().emplace_back(k, devs);
    } else if (key == "segments") {
      PyValue segs = PyValue::list();
      for (const PyValue& seg : v.items()) {
        if (first > 0) break;
        PyValue lean = without_frames(seg);
        for (auto& [sk, sv] : lean.as_dict()) {
          if (sk.as_str() != "blocks") continue;
          PyValue blocks = PyValue::list();
          for (const PyValue& b : sv.items()) blocks.append(without_frames(b));
          sv = blocks;
        }
        segs.append(lean);
      }
      out.as_dict().emplace_back(k, segs);
    } else {
      out.as_dict().emplace_back(k, v);
    }
  }
  return out;
}

struct Seed {
  std::string name;
  std::string bytes;  // a pickle
  PyValue tree;       // the same, read
  // Only byte mutations: a recorded pickle is there for Python's opcodes;
  // the windows cover its content, at a fraction of the cost per input.
  bool bytes_only = false;
};

// Seeds from each bundled example trace: its recorded bytes when small
// (Python's opcodes: FRAME, MEMOIZE, frames and all), a short window with
// frames, and three windows without (start, middle, end; only the first
// keeps the final segments).
std::vector<Seed> load_seeds() {
  std::vector<std::string> paths;
  for (const std::string& dir : {std::string(CACHEALLOC_EXAMPLES_DIR) + "/traces",
                                 std::string(std::getenv("CACHEALLOC_FUZZ_SEEDS_DIR")
                                                 ? std::getenv("CACHEALLOC_FUZZ_SEEDS_DIR")
                                                 : "")}) {
    if (dir.empty() || !std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().string().ends_with(".pickle.gz")) paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());  // Directory order is not fixed.
  std::vector<Seed> seeds;
  for (const std::string& path : paths) {
    const std::string name = std::filesystem::path(path).filename().string();
    const std::string recorded = gunzip_file(path);
    const PyValue snap = read_pickle(recorded);
    if (recorded.size() <= kMaxRecordedSeedBytes)
      seeds.push_back(Seed{name + " (recorded)", recorded, snap, /*bytes_only=*/true});
    size_t events = 0;
    for (const PyValue& d : snap.at("device_traces").items()) events = std::max(events, d.items().size());
    const PyValue framed = window(snap, 0, kFramedWindowEvents, false);
    seeds.push_back(Seed{name + " [0+, frames]", write_pickle(framed), framed});
    for (size_t first : {size_t{0}, events / 3, events - std::min(events, kWindowEvents)}) {
      const PyValue w = window(snap, first, kWindowEvents, true);
      seeds.push_back(Seed{name + " [" + std::to_string(first) + "+]", write_pickle(w), w});
    }
  }
  return seeds;
}

enum class Outcome { kReplayed, kDiverged, kPickleError, kTraceError, kConfigError, kLabError };

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kReplayed: return "replayed clean";
    case Outcome::kDiverged: return "replayed with divergence";
    case Outcome::kPickleError: return "PickleError";
    case Outcome::kTraceError: return "TraceFormatError";
    case Outcome::kConfigError: return "ConfigError";
    case Outcome::kLabError: return "lab error (TraceFormatError/ConfigError/SizeOverflowError)";
  }
  return "?";
}

struct PipelineOptions {
  bool keep_frames = false;       // and build_snapshot, then write it
  bool check_invariants = false;
  bool lab = false;               // extract_requests + run_whatif too
  std::optional<size_t> memory_limit;
  size_t device_memory = ReplayOptions{}.device_memory;
};

PipelineOptions random_options(TraceMutator& m) {
  PipelineOptions o;
  o.keep_frames = m.one_in(8);
  o.check_invariants = m.one_in(4);
  o.lab = m.one_in(3);
  if (m.one_in(8)) {
    const size_t limits[] = {0, 1, size_t{1} << 20, size_t{1} << 21, size_t{1} << 30,
                             size_t{3} << 30, ~size_t{0}};
    o.memory_limit = limits[m.below(std::size(limits))];
  }
  if (m.one_in(10)) {
    const size_t sizes[] = {0, 1, size_t{1} << 21, size_t{1} << 30, ~size_t{0}};
    o.device_memory = sizes[m.below(std::size(sizes))];
  }
  return o;
}

// Runs one input through everything. Returns the documented outcome; any
// other exception propagates to the caller.
Outcome run_pipeline(std::string_view bytes, const PipelineOptions& o) {
  PyValue snap;
  try {
    snap = read_pickle(bytes);
  } catch (const PickleError&) {
    return Outcome::kPickleError;
  }
  RecordedTrace trace;
  try {
    trace = parse_trace(snap, o.keep_frames);
  } catch (const TraceFormatError&) {
    return Outcome::kTraceError;
  } catch (const ConfigError&) {
    return Outcome::kConfigError;
  }
  ReplayOptions ro;
  ro.build_snapshot = o.keep_frames;
  ro.check_invariants = o.check_invariants;
  ro.memory_limit = o.memory_limit;
  ro.device_memory = o.device_memory;
  ReplayResult r;
  try {
    r = replay_trace(trace, ro);
  } catch (const ConfigError&) {
    return Outcome::kConfigError;
  }
  // The replayed snapshot is written as the CLI's --snapshot would, and must
  // read back.
  if (r.snapshot) read_pickle(write_pickle(*r.snapshot));
  if (o.lab) {
    try {
      std::vector<int> devices = devices_with_events(trace);
      if (devices.size() > 2) devices.resize(2);
      for (int d : devices) {
        const RequestStream stream = extract_requests(trace, d);
        WhatIfOptions wo;
        wo.memory_limit = o.memory_limit;
        wo.check_invariants = o.check_invariants;
        wo.peak_blocks = 4;
        wo.snapshot_entries = o.keep_frames ? 1000 : 0;
        // Placement policies replay the same inputs (docs/policies.md).
        for (const char* conf : {"trace", "expandable_segments:True", "policy:stitch",
                                 "policy:unmap_on_free", "policy:rescue"})
          run_whatif(stream, parse_lab_config(conf, trace.config), wo);
      }
    } catch (const TraceFormatError&) {
      return Outcome::kLabError;
    } catch (const ConfigError&) {
      return Outcome::kLabError;
    } catch (const SizeOverflowError&) {
      return Outcome::kLabError;
    }
  }
  return r.divergence ? Outcome::kDiverged : Outcome::kReplayed;
}

// Runs one input; "" when it went through or failed as documented, else
// what went wrong (an escaped exception, or a hang).
std::string check_input(std::string_view bytes, const PipelineOptions& options,
                        std::map<Outcome, size_t>& outcomes, double& seconds) {
  std::string problem;
  const auto start = std::chrono::steady_clock::now();
  try {
    ++outcomes[run_pipeline(bytes, options)];
  } catch (const std::exception& e) {
    problem = std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    problem = "an exception not derived from std::exception";
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (problem.empty() && seconds > kMaxSecondsPerInput)
    problem = "took " + std::to_string(seconds) + " s";
  return problem;
}

std::string describe(const PipelineOptions& o) {
  return "keep_frames=" + std::to_string(o.keep_frames) +
         " check_invariants=" + std::to_string(o.check_invariants) + " lab=" + std::to_string(o.lab);
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string save_dir() {
  if (const char* d = std::getenv("CACHEALLOC_FUZZ_SAVE_DIR")) return d;
  return std::filesystem::temp_directory_path().string();
}

TEST(TraceFuzz, EveryMutatedTraceReplaysOrFailsWithADocumentedError) {
  const std::vector<Seed> seeds = load_seeds();
  ASSERT_GE(seeds.size(), 2u) << "no seeds under " << CACHEALLOC_EXAMPLES_DIR << "/traces";
  for (const Seed& s : seeds) std::printf("  seed %-45s %8zu bytes\n", s.name.c_str(), s.bytes.size());
  const uint64_t run_seed = env_u64("CACHEALLOC_FUZZ_SEED", kDefaultSeed);
  const uint64_t first = env_u64("CACHEALLOC_FUZZ_FIRST", 0);
  const uint64_t count = env_u64("CACHEALLOC_FUZZ_ITERATIONS", kDefaultIterations);
  const char* current = std::getenv("CACHEALLOC_FUZZ_CURRENT");

  std::map<Outcome, size_t> outcomes;
  size_t failures = 0;
  double slowest = 0;
  uint64_t slowest_at = 0;
  for (uint64_t it = first; it < first + count && failures < 10; ++it) {
    // Each input depends only on (run seed, index): any one can be re-run.
    TraceMutator m(splitmix64(run_seed ^ splitmix64(it)));
    const Seed& seed = seeds[m.below(seeds.size())];
    std::string bytes;
    switch (seed.bytes_only ? 0 : m.below(8)) {
      case 0: case 1: case 2: bytes = m.mutate_bytes(seed.bytes); break;
      case 3: case 4: case 5: case 6: bytes = write_pickle(m.mutate_tree(seed.tree)); break;
      default: bytes = m.mutate_bytes(write_pickle(m.mutate_tree(seed.tree)));
    }
    const PipelineOptions options = random_options(m);
    if (current) write_file(current, bytes);

    double seconds = 0;
    const std::string problem = check_input(bytes, options, outcomes, seconds);
    if (seconds > slowest) slowest = seconds, slowest_at = it;
    if (!problem.empty()) {
      ++failures;
      const std::string path = save_dir() + "/trace_fuzz_" + std::to_string(run_seed) + "_" +
                               std::to_string(it) + ".pickle";
      write_file(path, bytes);
      ADD_FAILURE() << "input " << it << " (seed " << seed.name << ", " << bytes.size()
                    << " bytes, saved to " << path << "; " << describe(options) << "): " << problem;
    }
  }
  size_t total = 0;
  for (const auto& [o, n] : outcomes) {
    std::printf("  %-60s %zu\n", outcome_name(o), n);
    total += n;
  }
  std::printf("  slowest input: %llu (%.3f s)\n", static_cast<unsigned long long>(slowest_at),
              slowest);
  // The mutations must reach every stage, or the test checks little.
  if (count >= 1000 && failures == 0) {
    for (Outcome o : {Outcome::kReplayed, Outcome::kDiverged, Outcome::kPickleError,
                      Outcome::kTraceError, Outcome::kConfigError})
      EXPECT_GE(outcomes[o], total / 200) << outcome_name(o) << " is rarely reached";
  }
}

TEST(TraceFuzz, SavedCorpusReplaysOrFailsWithADocumentedError) {
  // Minimized inputs of the defects fuzzing found (fuzz_corpus/README.md),
  // each run with every stage and check on.
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(CACHEALLOC_FUZZ_CORPUS_DIR))
    if (entry.path().string().find(".pickle") != std::string::npos)
      paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  ASSERT_GE(paths.size(), 10u) << CACHEALLOC_FUZZ_CORPUS_DIR;
  std::map<Outcome, size_t> outcomes;
  for (const std::string& path : paths) {
    const std::string bytes = gunzip_file(path);
    PipelineOptions all;
    all.keep_frames = all.check_invariants = all.lab = true;
    for (const PipelineOptions& options : {PipelineOptions{}, all}) {
      double seconds = 0;
      const std::string problem = check_input(bytes, options, outcomes, seconds);
      EXPECT_EQ(problem, "") << path << " (" << describe(options) << ")";
    }
  }
}

}  // namespace
}  // namespace cachealloc
