// Loading a trace for the fragmentation lab: read the snapshot pickle, pick
// the device, reduce it to requests, and say so on stderr when it is long.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "lab/request_stream.h"

namespace cachealloc {

// Progress lines on stderr ("cachealloc: ..."), only when enabled.
class LabProgress {
 public:
  explicit LabProgress(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  void enable_if(bool condition) { enabled_ = enabled_ || condition; }
  void note(const std::string& line) const;

 private:
  bool enabled_;
};

struct LabInput {
  std::string path;
  std::string name;        // file name without .pickle / .pickle.gz
  size_t trace_events = 0; // recorded entries, all devices
  RequestStream stream;
};

struct LabInputOptions {
  std::optional<int> device;            // default: the only device with events
  std::optional<size_t> recorded_limit; // see ExtractionOptions
  bool quiet = false;                   // no progress even for long traces
  bool progress = false;                // progress even for short traces
  // Keep the recorded stacks of allocations (RequestStream::contexts), for
  // reports; costs memory in proportion to the trace.
  bool keep_frames = false;
};

// Throws PickleError / TraceFormatError for unreadable or malformed files,
// LabUsageError when the device is missing or must be chosen.
LabInput load_lab_input(const std::string& path, const LabInputOptions& options,
                        LabProgress& progress);

// "1.50 GiB" for bytes; "12.3 ms" / "4.56 s" for seconds; "M events/s".
std::string lab_bytes(size_t bytes);
std::string lab_seconds(double seconds);

}  // namespace cachealloc
