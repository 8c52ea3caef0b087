// Why an out-of-memory error happened and what would have avoided it, in
// words: the text cachealloc appends to native's OOM message and that
// `cachealloc explain SNAPSHOT` prints, from one snapshot (oom_state.h).
//
// The what-if part is advise()'s search (advise.h) over the recorded
// history (or the OOM recorder's request ring, where the snapshot says its
// trace came from there), run from the live state at its oldest entry, under
// the limit the OOM happened at: which settings would have run this
// history to the failed request without an OOM, and at what peak; or, when
// none would, how much more memory the best of them needs. A setting
// already in force is never suggested.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "lab/oom_state.h"
#include "pickle/py_value.h"

namespace cachealloc {

struct DiagnosisOptions {
  std::optional<int> device;            // default: the OOM's device
  std::optional<size_t> memory_limit;   // bytes; overrides the recorded limit
  // Wall-time bound of the what-if search (at an OOM: 500 ms); none offline.
  std::optional<std::chrono::milliseconds> budget;
  // Histories with more requests than this are not replayed (a note says
  // so): at roughly 150 replays per search they could not finish in time.
  size_t max_requests = 400000;
  unsigned threads = 1;                 // what-if workers (0: every core)
  size_t top_sites = 3;                 // allocation sites listed
  std::string snapshot_path;            // named in the text when set
};

// What the what-if search found, for tests and tools.
struct WhatIfVerdict {
  bool ran = false;
  std::string note;          // why it did not run, or what bounds its figures
  size_t requests = 0;       // replayed
  double seconds = 0;
  std::string current;       // conf line in force ("" = defaults)
  size_t current_needs = 0;  // bytes the current settings need (exact minimum)
  // Settings that fit under the limit, best first: (line, peak reserved).
  std::vector<std::pair<std::string, size_t>> fitting;
  std::string best_line;     // the setting needing least memory
  size_t best_needs = 0;     // its exact minimum, bytes
};

struct OomDiagnosis {
  OomState state;
  WhatIfVerdict whatif;
  std::string text;  // lines, each "- ...", under a one-line heading
};

// Throws PyValueError / TraceFormatError for a malformed snapshot.
OomDiagnosis diagnose_oom(const PyValue& snapshot, const DiagnosisOptions& options);

// "1.50 GiB (1610612736 bytes)".
std::string bytes_text(size_t bytes);

}  // namespace cachealloc
