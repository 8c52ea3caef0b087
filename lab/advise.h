// "Will it fit, and with which settings?" (issue 24): searches native's
// config space (advise_space.h) for the config under which a trace's
// requests need the least memory, ranks the candidates (advise_rank.h) and
// words the answer as a PYTORCH_CUDA_ALLOC_CONF line.
//
// Per candidate it runs min-memory (exact, each probe stopped at its first
// OOM) and, under a memory limit, one full replay under that limit (its
// OOMs, peak and device calls). Candidates run on `threads` workers: each
// replay has its own engine and simulated device, nothing is shared but
// the read-only request stream.
//
// Candidates that name the same options (equal conf_line) run once; those
// that behave identically (same minimum, peaks, OOMs and device calls) are
// merged into one row whose labels list every name ("trace = defaults").
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lab/lab_config.h"
#include "lab/min_memory.h"
#include "lab/request_stream.h"

namespace cachealloc {

struct AdviseOptions {
  std::optional<size_t> memory_limit;   // bytes the run may reserve
  // Bytes of the whole device: needed to write a garbage-collection
  // recommendation's memory fraction. Without it (or without a limit)
  // garbage_collection_threshold is not searched.
  std::optional<size_t> device_memory;
  bool address_hints = true;            // see WhatIfOptions
  SegmentPlacement placement = SegmentPlacement::kFirstFit;  // see WhatIfOptions
  // Every candidate runs under this placement policy (policy_registry.h).
  std::string policy = "native";
  unsigned threads = 0;                 // 0: every core the machine has
  // Called (serialized) as each candidate finishes.
  std::function<void(const std::string&)> progress;
  // Every replay stops there: advise() then throws WhatIfTimeout (the OOM
  // diagnosis bounds its search this way).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct AdviseCandidate {
  LabConfig config;                 // the representative (fewest keys)
  std::string line;                 // its conf_line ("" = defaults)
  std::vector<std::string> labels;  // every name merged into this row
  size_t keys = 0;                  // options the line sets
  int round = 1;                    // search round that first ran it (0: baselines)
  MinMemoryResult min;              // min_limit, unlimited peak, probes
  // Under the memory limit when one is given, else of the unlimited run.
  size_t peak_reserved = 0, device_allocs = 0, device_frees = 0;
  size_t ooms = 0;                  // under the limit
  size_t retries = 0;
  double seconds = 0;               // all replays of this candidate
  std::string label() const;        // labels joined by " = "
  // label(), but past `width` characters only as many names as fit and
  // "(= N more)".
  std::string short_label(size_t width) const;
};

struct Advice {
  std::vector<AdviseCandidate> ranked;  // best first
  size_t baseline = 0;     // index in ranked: the trace's own config
  size_t recommended = 0;  // index in ranked (the baseline when nothing helps)
  bool nothing_helps = false;
  // Fraction of the baseline's minimum memory that the candidate with the
  // smallest minimum saves (negative: none is below the baseline).
  double best_saving = 0;
  std::string env_line;    // PYTORCH_CUDA_ALLOC_CONF value to set ("" = defaults)
  std::string headline;    // the answer in one sentence
  std::string reason;      // why, with the numbers
  std::vector<std::string> notes;  // what was not searched, and why
  size_t largest_bytes = 0;  // the largest size any row or the limit shows (for one unit)
  size_t configs_run = 0, probes = 0;
  unsigned threads = 1;
  double seconds = 0;      // wall time of the whole search
};

// Throws std::runtime_error when even native defaults fail with no limit
// (a request larger than the simulated device), WhatIfTimeout past
// options.deadline.
Advice advise(const RequestStream& stream, const AdviseOptions& options);

}  // namespace cachealloc
