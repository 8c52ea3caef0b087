// lab_speed: replay throughput of the fragmentation lab, one core.
//
//   lab_speed [--repeat N] [--memory-limit BYTES] [--no-lockstep] [--conf TEXT]... TRACE
//
// Parses TRACE once and reduces it to requests once (neither is timed),
// then times, best of N (default 5) wall-clock runs each:
//   lockstep  replay_trace() as `cachealloc replay` runs it: every event
//             compared with the recorded one (--memory-limit applies);
//   what-if   run_whatif() under each --conf (default: trace), as
//             `cachealloc compare` runs it (series kept, no peak rerun).
// Wall time is the replay loop's own clock; CPU time is this thread's, for
// the whole call, which is what one core does when the machine is shared.
// "events/s" counts recorded trace entries replayed per second (what the
// lockstep replayer consumes; the what-if replay covers the same entries
// with fewer, coarser requests), "requests/s" the what-if requests.
// Prints one JSON object per line, then a table on stderr.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "lab/lab_config.h"
#include "lab/request_stream.h"
#include "lab/whatif.h"
#include "pickle/pickle_reader.h"
#include "replay/replayer.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

struct Options {
  size_t repeat = 5;
  bool lockstep = true;
  std::optional<size_t> memory_limit;
  std::vector<std::string> confs;
  std::string trace;
};

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timing {
  double wall = 1e300;  // best wall-clock seconds of the replay loop
  double cpu = 1e300;   // best CPU seconds of this thread for the whole call
};

// `run` returns the wall time of its replay loop; the CPU time of the call
// (slightly more: it includes building the engine) is measured here. On a
// shared machine the CPU figure is the one that says what one core does.
template <class F>
Timing best_of(size_t repeat, F&& run) {
  Timing best;
  for (size_t i = 0; i < repeat; ++i) {
    const double start = cpu_seconds();
    best.wall = std::min(best.wall, run());
    best.cpu = std::min(best.cpu, cpu_seconds() - start);
  }
  return best;
}

void time_lockstep(const Options& o, const RecordedTrace& trace) {
  size_t events = 0;
  for (const auto& d : trace.devices) events += d.size();
  ReplayOptions lockstep;
  lockstep.memory_limit = o.memory_limit;
  bool diverged = false;
  const Timing t = best_of(o.repeat, [&] {
    const ReplayResult r = replay_trace(trace, lockstep);
    diverged |= r.divergence.has_value();
    return r.seconds;
  });
  const double ev = static_cast<double>(events);
  std::printf("{\"trace\": \"%s\", \"mode\": \"lockstep\", \"events\": %zu, \"seconds\": %.6f, "
              "\"cpu_seconds\": %.6f, \"events_per_s\": %.0f, \"events_per_cpu_s\": %.0f, "
              "\"diverged\": %s}\n",
              o.trace.c_str(), events, t.wall, t.cpu, ev / t.wall, ev / t.cpu,
              diverged ? "true" : "false");
  std::fprintf(stderr, "%-44s lockstep                      %6.2f M events/s (wall)  %6.2f (cpu)%s\n",
               o.trace.c_str(), ev / t.wall / 1e6, ev / t.cpu / 1e6, diverged ? "  (DIVERGED)" : "");
}

void time_whatif(const Options& o, const RequestStream& stream, const std::string& text) {
  const LabConfig config = parse_lab_config(text, stream.recorded_config);
  WhatIfOptions options;
  options.memory_limit = o.memory_limit;
  size_t peak = 0;
  const Timing t = best_of(o.repeat, [&] {
    const WhatIfResult r = run_whatif(stream, config, options);
    peak = r.peak_reserved;
    return r.seconds;
  });
  const double requests = static_cast<double>(stream.requests.size());
  const double covered = static_cast<double>(stream.recorded_events);
  std::printf("{\"trace\": \"%s\", \"mode\": \"whatif\", \"conf\": \"%s\", \"events\": %zu, "
              "\"requests\": %zu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
              "\"events_per_s\": %.0f, \"events_per_cpu_s\": %.0f, \"requests_per_s\": %.0f, "
              "\"requests_per_cpu_s\": %.0f, \"peak_reserved\": %zu}\n",
              o.trace.c_str(), text.c_str(), stream.recorded_events, stream.requests.size(), t.wall,
              t.cpu, covered / t.wall, covered / t.cpu, requests / t.wall, requests / t.cpu, peak);
  std::fprintf(stderr, "%-44s what-if %-22s %6.2f M events/s (wall)  %6.2f (cpu)  %6.2f M requests/s (cpu)\n",
               o.trace.c_str(), config.label().substr(0, 22).c_str(), covered / t.wall / 1e6,
               covered / t.cpu / 1e6, requests / t.cpu / 1e6);
}

int run(const Options& o) {
  const RecordedTrace trace = parse_trace(read_pickle_file(o.trace), false);
  ExtractionOptions extraction;
  extraction.recorded_limit = o.memory_limit;
  const std::vector<int> devices = devices_with_events(trace);
  const RequestStream stream = extract_requests(trace, devices.empty() ? 0 : devices.front(), extraction);
  if (o.lockstep) time_lockstep(o, trace);
  for (const std::string& text : o.confs) time_whatif(o, stream, text);
  return 0;
}

}  // namespace
}  // namespace cachealloc

int main(int argc, char** argv) {
  using namespace cachealloc;
  Options o;
  const char* usage = "usage: lab_speed [--repeat N] [--memory-limit BYTES] [--no-lockstep] [--conf TEXT]... TRACE\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) { std::cerr << usage; std::exit(2); }
      return argv[++i];
    };
    if (a == "--repeat") o.repeat = std::max<size_t>(1, std::strtoull(value().c_str(), nullptr, 10));
    else if (a == "--memory-limit") o.memory_limit = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--conf") o.confs.push_back(value());
    else if (a == "--no-lockstep") o.lockstep = false;
    else if (!a.empty() && a[0] == '-') { std::cerr << usage; return 2; }
    else o.trace = a;
  }
  if (o.trace.empty()) { std::cerr << usage; return 2; }
  if (o.confs.empty()) o.confs.push_back("trace");
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "lab_speed: " << e.what() << "\n";
    return 2;
  }
}
