// cachealloc replay: a recorded trace fed through the engine on a simulated
// device, checked event by event against the recording (replay/).
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "allocator/base/errors.h"
#include "lab/cli/command_line.h"
#include "lab/cli/json_out.h"
#include "lab/cli/lab_args.h"
#include "lab/cli/lab_commands.h"
#include "lab/cli/lab_options.h"
#include "lab/cli/output_file.h"
#include "pickle/pickle_reader.h"
#include "pickle/pickle_writer.h"
#include "replay/replayer.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

constexpr const char* kReplayUsage =
    "usage: cachealloc replay [--json] [--memory-limit BYTES] [--conf STR]\n"
    "                         [--snapshot OUT] [--device-memory BYTES]\n"
    "                         [--check-invariants] TRACE\n"
    "\n"
    "Replays the requests recorded in TRACE (a snapshot pickle, .pickle or\n"
    ".pickle.gz, as torch.cuda.memory._dump_snapshot writes it) through the\n"
    "cachealloc engine on a simulated device and checks, event by event, that\n"
    "every allocation lands at the recorded address and every segment_alloc,\n"
    "segment_free and oom happens where it was recorded.\n"
    "\n"
    "  --json              print one JSON object: events, divergence, memory_stats,\n"
    "                      devices (see below)\n"
    "  --memory-limit B    allowed bytes (as set_per_process_memory_fraction);\n"
    "                      bytes may be written 1073741824, 2e9, 40GiB or 1.5GiB\n"
    "                      (K, M, G, T are powers of 1024, with or without B/iB)\n"
    "  --conf STR          PYTORCH_CUDA_ALLOC_CONF-style config (default: the\n"
    "                      trace's allocator_settings)\n"
    "  --snapshot OUT      write the replayed state and history as a pickle\n"
    "  --device-memory B   simulated device capacity (default 85017493504)\n"
    "  --check-invariants  check the engine's invariants after every request\n"
    "\n"
    "Options take their value as --opt VALUE or --opt=VALUE.\n"
    "\n"
    "Statistics are reported for each device that has recorded events (a\n"
    "trace recorded on cuda:1 has an empty device 0). With --json, \"devices\"\n"
    "maps each such device's index to {\"events\", \"memory_stats\"}, and\n"
    "\"memory_stats\" is the traced device's when exactly one device has\n"
    "events, null when several do.\n"
    "\n"
    "exit status: 0 clean replay, 1 divergence, 2 bad input (also: an output\n"
    "file that cannot be written)\n";

std::string describe_json(const EventDescription& e) {
  std::string s = "{\"action\": " + json_string(e.action) +
                  ", \"addr\": " + std::to_string(e.address) +
                  ", \"size\": " + std::to_string(e.size) +
                  ", \"stream\": " + std::to_string(e.stream);
  if (!e.note.empty()) s += ", \"note\": " + json_string(e.note);
  return s + "}";
}

// {"key": value, ...} of all 122 statistics, in key order.
std::string stats_json(const DeviceStats& stats) {
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : stats.key_values()) {
    s += (first ? "" : ", ") + json_string(k) + ": " + std::to_string(v);
    first = false;
  }
  return s + "}";
}

std::string describe_text(const EventDescription& e) {
  std::string s = e.action + " addr=" + std::to_string(e.address) +
                  " size=" + std::to_string(e.size) + " stream=" + std::to_string(e.stream);
  if (!e.note.empty()) s += " (" + e.note + ")";
  return s;
}

}  // namespace

int replay_main(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::cout << kReplayUsage;
      return 0;
    }
  bool json = false;
  ReplayOptions options;
  std::optional<std::string> snapshot_path, conf;
  std::optional<size_t> memory_limit, device_memory;
  Positional trace_path;
  CLI::App app{"", "replay"};
  configure_command_line(app);
  add_trace_positional(app, trace_path);
  app.add_flag("--json", json);
  add_bytes_option(app, "--memory-limit", memory_limit);
  add_bytes_option(app, "--device-memory", device_memory);
  add_text_option(app, "--conf", conf);
  add_text_option(app, "--snapshot", snapshot_path);
  app.add_flag("--check-invariants", options.check_invariants);
  try {
    parse_command_line(app, args);
    trace_path.only_trace();
  } catch (const LabUsageError& e) {
    // As an unknown command: the message, then the usage, on stderr.
    std::cerr << "cachealloc: " << e.what() << "\n\n" << kReplayUsage;
    return 2;
  }
  if (conf) options.config = AllocatorConfig::parse(*conf);
  options.memory_limit = memory_limit;
  if (device_memory) options.device_memory = *device_memory;
  options.build_snapshot = snapshot_path.has_value();

  set_activity("reading " + trace_path.only_trace());
  const RecordedTrace trace =
      parse_trace(read_pickle_file(trace_path.only_trace()), options.build_snapshot);
  if (!options.memory_limit) {
    const AllocatorConfig& in_force = options.config ? *options.config : trace.config;
    warn_gc_without_limit("replay", conf ? *conf : "the trace's settings",
                          in_force.garbage_collection_threshold);
  }
  set_activity("replaying " + trace_path.only_trace());
  const ReplayResult r = replay_trace(trace, options);

  if (snapshot_path && r.snapshot) {
    set_activity("writing " + *snapshot_path);
    write_output_file(*snapshot_path, write_pickle(*r.snapshot), "snapshot");
  }

  // Report the devices that have events: a trace recorded on cuda:1 has
  // device_traces [[], [...]], and device 0's statistics are all zero.
  std::vector<size_t> traced;
  for (size_t d = 0; d < trace.devices.size() && d < r.stats.size(); ++d)
    if (!trace.devices[d].empty()) traced.push_back(d);
  if (json) {
    std::string s = "{\"events\": " + std::to_string(r.events) + ", \"divergence\": ";
    if (r.divergence) {
      s += "{\"index\": " + std::to_string(r.divergence->index) +
           ", \"device\": " + std::to_string(r.divergence->device) +
           ", \"expected\": " + describe_json(r.divergence->expected) +
           ", \"got\": " + describe_json(r.divergence->got) + "}";
    } else {
      s += "null";
    }
    s += ", \"empty_cache_calls\": " + std::to_string(r.empty_cache_calls);
    s += ", \"seconds\": " + std::to_string(r.seconds);
    // One traced device: its stats; none: a fresh device's (all zero);
    // several: null, so that no reader takes one device for the whole.
    s += ", \"memory_stats\": ";
    if (traced.size() == 1) s += stats_json(r.stats[traced.front()]);
    else if (traced.empty()) s += stats_json(DeviceStats{});
    else s += "null";
    s += ", \"devices\": {";
    for (size_t i = 0; i < traced.size(); ++i) {
      const size_t d = traced[i];
      s += std::string(i ? ", " : "") + "\"" + std::to_string(d) + "\": {\"events\": " +
           std::to_string(trace.devices[d].size()) +
           ", \"memory_stats\": " + stats_json(r.stats[d]) + "}";
    }
    s += "}}";
    std::cout << s << "\n";
  } else {
    std::cout << "replayed " << r.events << " events in " << r.seconds << " s";
    if (r.seconds > 0) std::cout << " (" << r.events / r.seconds / 1e6 << " M events/s)";
    std::cout << "\n";
    if (r.divergence) {
      std::cout << "DIVERGENCE at device " << r.divergence->device << " event "
                << r.divergence->index << "\n  expected: " << describe_text(r.divergence->expected)
                << "\n  got:      " << describe_text(r.divergence->got) << "\n";
    } else {
      std::cout << "no divergence: every address, segment and OOM as recorded\n";
    }
    std::cout << "empty_cache() calls inferred: " << r.empty_cache_calls << "\n";
    if (traced.empty()) std::cout << "no device has recorded events\n";
    for (size_t d : traced) {
      std::cout << "device " << d << " (" << trace.devices[d].size() << " recorded events):\n";
      const auto values = r.stats[d].key_values();
      for (const char* key : {"allocated_bytes.all.peak", "reserved_bytes.all.peak",
                              "allocated_bytes.all.current", "reserved_bytes.all.current",
                              "num_device_alloc", "num_device_free", "num_alloc_retries",
                              "num_ooms"})
        for (const auto& [k, v] : values)
          if (k == key) std::cout << "  " << k << " = " << v << "\n";
    }
  }
  return r.divergence ? 1 : 0;
}


}  // namespace cachealloc
