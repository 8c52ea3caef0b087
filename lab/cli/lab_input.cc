#include "lab/cli/lab_input.h"

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "allocator/base/errors.h"
#include "lab/cli/command_line.h"
#include "lab/cli/lab_args.h"
#include "pickle/pickle_reader.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

// Traces at least this long report their progress without being asked.
constexpr size_t kLongTraceEvents = 1000000;
// A compressed trace of this size holds roughly a million events or more.
constexpr uintmax_t kLongTraceFileBytes = uintmax_t{8} << 20;

std::string name_of(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* suffix : {".gz", ".pickle", ".pkl"})
    if (name.size() > std::string(suffix).size() && name.ends_with(suffix))
      name.resize(name.size() - std::string(suffix).size());
  return name;
}

}  // namespace

void LabProgress::note(const std::string& line) const {
  if (enabled_) std::cerr << "cachealloc: " << line << std::endl;
}

std::string lab_bytes(size_t bytes) { return format_size(bytes); }

std::string lab_seconds(double seconds) {
  char buf[32];
  if (seconds < 1.0) std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  return buf;
}

LabInput load_lab_input(const std::string& path, const LabInputOptions& options,
                        LabProgress& progress) {
  LabInput in;
  in.path = path;
  in.name = name_of(path);
  std::error_code ec;
  const uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  progress.enable_if(!options.quiet && (options.progress || (!ec && file_bytes >= kLongTraceFileBytes)));
  progress.note("reading " + path + (ec ? "" : " (" + lab_bytes(file_bytes) + ")"));
  set_activity("reading " + path);
  const RecordedTrace trace = parse_trace(read_pickle_file(path), options.keep_frames);
  for (const auto& d : trace.devices) in.trace_events += d.size();
  progress.enable_if(!options.quiet && in.trace_events >= kLongTraceEvents);

  int device = 0;
  const std::vector<int> with_events = devices_with_events(trace);
  if (options.device) {
    device = *options.device;
  } else if (with_events.size() > 1) {
    std::string list;
    for (int d : with_events) list += (list.empty() ? "" : ", ") + std::to_string(d);
    throw LabUsageError("the trace has events on devices " + list + ": choose one with --device N");
  } else if (with_events.size() == 1) {
    device = with_events.front();
  }
  ExtractionOptions extraction;
  extraction.recorded_limit = options.recorded_limit;
  set_activity("extracting the requests of device " + std::to_string(device) + " from " + path);
  in.stream = extract_requests(trace, device, extraction);
  progress.note(std::to_string(in.stream.recorded_events) + " events on device " +
                std::to_string(device) + " -> " + std::to_string(in.stream.requests.size()) +
                " requests (" + std::to_string(in.stream.empty_cache_calls) +
                " empty_cache calls, " + std::to_string(in.stream.recorded_ooms) +
                " recorded OOMs)");
  return in;
}

}  // namespace cachealloc
