#include "lab/oom_diagnosis.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "allocator/base/errors.h"
#include "lab/advise.h"
#include "lab/conf_line.h"
#include "lab/whatif.h"
#include "replay/trace.h"

namespace cachealloc {
namespace {

// The setting that turns history on, as the message names it.
constexpr const char* kHistorySetting = "torch.cuda.memory._record_memory_history(max_entries=100000)";

std::string settings_name(const std::string& line) {
  return line.empty() ? "native's defaults" : line;
}

// Runs advise() over the device's history and words nothing: fills `v`.
void run_whatif_search(const PyValue& snapshot, const OomState& s, const DiagnosisOptions& options,
                       WhatIfVerdict& v) {
  if (s.history_entries == 0) {
    v.note = std::string("history recording is off, so there is no history to replay; turn it on with ") +
             kHistorySetting;
    return;
  }
  const RecordedTrace trace = parse_trace(snapshot, false);
  ExtractionOptions ex;
  ex.recorded_limit = s.request.allowed;
  ex.live_at_start = s.live_at_start;
  const RequestStream stream = extract_requests(trace, s.request.device, ex);
  v.current = conf_line(stream.recorded_config);
  v.requests = stream.requests.size();
  if (stream.requests.size() > options.max_requests) {
    v.note = "the history holds " + std::to_string(stream.requests.size()) +
             " requests, more than the " + std::to_string(options.max_requests) +
             " a bounded replay covers: not replayed here (`cachealloc explain` on the snapshot has no bound)";
    return;
  }
  AdviseOptions ao;
  ao.memory_limit = s.request.allowed;
  ao.threads = options.threads;
  const auto start = std::chrono::steady_clock::now();
  if (options.budget) ao.deadline = start + *options.budget;
  Advice advice;
  try {
    advice = advise(stream, ao);
  } catch (const WhatIfTimeout&) {
    v.note = "the what-if search of " + std::to_string(stream.requests.size()) +
             " requests stopped at its " + std::to_string(options.budget->count()) +
             " ms bound (`cachealloc explain` on the snapshot has no bound)";
    return;
  }
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  v.ran = true;
  const AdviseCandidate& base = advice.ranked[advice.baseline];
  v.current_needs = base.min.min_limit;
  size_t best = 0;
  for (size_t i = 0; i < advice.ranked.size(); ++i) {
    const AdviseCandidate& c = advice.ranked[i];
    if (c.min.min_limit < advice.ranked[best].min.min_limit) best = i;
    const bool current = i == advice.baseline || c.line == v.current;
    if (!current && s.request.allowed && c.ooms == 0) v.fitting.emplace_back(c.line, c.peak_reserved);
  }
  v.best_line = advice.ranked[best].line;
  v.best_needs = advice.ranked[best].min.min_limit;
  // A wrapped ring dropped its oldest records: the replay starts mid-run
  // even when nothing was live at the cut (the segments cached then are
  // unknown).
  const std::string cut =
      s.ring_wrapped ? "the request ring (" + format_size(s.ring_bytes) +
                           " a device) wrapped and kept only the newest requests, so the replay "
                           "starts mid-run"
                     : "the history starts mid-run";
  if (s.live_at_start.empty()) {
    if (s.ring_wrapped) v.note = cut + ", with no block live at its oldest entry";
    return;
  }
  v.note = cut + ": " + std::to_string(s.live_at_start.size()) + " blocks (" +
           bytes_text(s.live_at_start_bytes) +
           ") were live at its oldest entry; the replay allocates them first, in address order "
           "(their layout then was not recorded)";
}

}  // namespace

std::string bytes_text(size_t bytes) {
  if (bytes <= 1024) return format_size(bytes);
  return format_size(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

OomDiagnosis diagnose_oom(const PyValue& snapshot, const DiagnosisOptions& options) {
  OomDiagnosis d;
  d.state = read_oom_state(snapshot, options.device, options.memory_limit);
  const OomState& s = d.state;
  const OomRequest& r = s.request;
  std::string& t = d.text;
  t = "cachealloc diagnosis (device " + std::to_string(r.device) + "):\n";

  if (r.recorded) {
    t += "- the request:";
    if (r.requested) t += " " + bytes_text(r.requested) + " asked,";
    t += " rounded to " + bytes_text(r.rounded) + ", needing a new segment of " +
         bytes_text(r.allocation);
    if (r.allowed)
      t += "; " + bytes_text(*r.allowed) +
           (r.allowed_inferred ? " available (reserved plus the device's free bytes; no limit was "
                                 "recorded: pass --memory-limit if a memory fraction was set)"
                               : " allowed");
    t += "\n";
  } else {
    t += "- no out-of-memory error is recorded in this snapshot: its final state follows\n";
  }

  if (r.recorded && s.entries_after_oom > 0 && s.entries_after_oom < s.history_entries)
    t += "- this snapshot was taken " + std::to_string(s.entries_after_oom) +
         " history entries after the OOM: the segments below are its state then, not at the failure\n";
  t += "- " + bytes_text(s.reserved - std::min(s.reserved, s.allocated)) +
       " reserved but unallocated, in " + std::to_string(s.free_blocks) +
       " free blocks; the largest free block is " + bytes_text(s.largest_free);
  if (r.recorded && r.rounded > s.largest_free) t += ", smaller than the request";
  t += "\n";

  t += "- the live blocks pin " + std::to_string(s.pinned_segments) + " of " +
       std::to_string(s.segments) +
       " segments (a segment is released only when all its blocks are free); " +
       std::to_string(s.split_segments) + " of them are split, holding " +
       bytes_text(s.split_free_bytes) + " free in " + std::to_string(s.split_free_blocks) +
       " blocks\n";

  if (s.split_segments > 0) {
    if (!s.frames_recorded) {
      t += "- allocation sites: no frames were recorded with the live blocks (record them with " +
           std::string(kHistorySetting) + ")\n";
    } else {
      t += "- allocation sites pinning the most free bytes (free bytes of the split segments their "
           "live blocks are in):\n";
      for (size_t i = 0; i < s.sites.size() && i < options.top_sites; ++i) {
        const PinningSite& p = s.sites[i];
        t += "    " + bytes_text(p.free_bytes) + " in " + std::to_string(p.segments) +
             (p.segments == 1 ? " segment" : " segments") + ", " + format_size(p.live_bytes) +
             " live from " + p.where + "\n";
      }
    }
  }

  WhatIfVerdict& v = d.whatif;
  run_whatif_search(snapshot, s, options, v);
  if (!v.ran) {
    t += "- what-if: " + v.note + "\n";
  } else {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.0f ms", v.seconds * 1000.0);
    t += std::string("- what-if (") +
         (s.trace_from_ring ? "the flight recorder's request ring, " : "the recorded history, ") +
         std::to_string(v.requests) + " requests, replayed in " + ms + "): ";
    if (!r.allowed) {
      t += "under " + settings_name(v.current) + " it needs at least " + bytes_text(v.current_needs);
      if (v.best_line != v.current)
        t += "; with " + v.best_line + " " + bytes_text(v.best_needs);
    } else if (v.current_needs <= *r.allowed) {
      // A replay that starts mid-run (a cut history, a full ring) can miss
      // what made the OOM: a suggestion from it would be a guess.
      t += "the replay does not reproduce this OOM: under the settings in force (" +
           settings_name(v.current) + ") it needs " + bytes_text(v.current_needs) +
           ", within the " + bytes_text(*r.allowed) +
           " allowed, so it suggests nothing (a record from the start of the run would: history "
           "on from the start, or a larger request ring, CACHEALLOC_OOM_RING_MB)";
    } else if (!v.fitting.empty()) {
      const auto& [first, first_peak] = v.fitting.front();
      t += "with " + first + " this history peaks at " + bytes_text(first_peak) + " and fits";
      // A second, other way: not the first with more keys added.
      for (size_t i = 1; i < v.fitting.size(); ++i)
        if (v.fitting[i].first.find(first) == std::string::npos) {
          t += "; with " + v.fitting[i].first + " at " + bytes_text(v.fitting[i].second);
          break;
        }
      t += ". Under the settings in force (" + settings_name(v.current) + ") it needs " +
           bytes_text(v.current_needs) + ". Suggestion: PYTORCH_CUDA_ALLOC_CONF=" +
           v.fitting.front().first;
    } else {
      t += "no setting fits in " + bytes_text(*r.allowed) + ": the least any needs is " +
           bytes_text(v.best_needs) + " (" + settings_name(v.best_line) + "), " +
           bytes_text(v.best_needs - std::min(v.best_needs, *r.allowed)) +
           " more; under the settings in force (" + settings_name(v.current) + ") " +
           bytes_text(v.current_needs);
    }
    t += "\n";
    if (!v.note.empty()) t += "  (" + v.note + ")\n";
  }
  if (!options.snapshot_path.empty())
    t += "- snapshot: " + options.snapshot_path + " (opens in pytorch.org/memory_viz)\n";
  return d;
}

}  // namespace cachealloc
