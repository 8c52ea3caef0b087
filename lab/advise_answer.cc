#include "lab/advise_answer.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "lab/advise_rank.h"
#include "lab/byte_unit.h"
#include "lab/conf_line.h"

namespace cachealloc {
namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * fraction);
  return buf;
}

}  // namespace

void answer(Advice& advice, const AdviseOptions& options) {
  const bool with_gc = options.memory_limit && options.device_memory;
  const auto& ranked = advice.ranked;
  // The row holding the trace's own config (names other than its own never
  // start with "trace").
  for (size_t i = 0; i < ranked.size(); ++i)
    for (const std::string& label : ranked[i].labels)
      if (label.rfind("trace", 0) == 0) advice.baseline = i;

  const AdviseCandidate& base = ranked[advice.baseline];
  const AdviseCandidate& top = ranked.front();
  size_t smallest = top.min.min_limit;
  for (const AdviseCandidate& c : ranked) smallest = std::min(smallest, c.min.min_limit);
  auto saving = [&](size_t bytes) {
    return base.min.min_limit == 0 ? 0.0
                                   : 1.0 - static_cast<double>(bytes) /
                                               static_cast<double>(base.min.min_limit);
  };
  advice.best_saving = saving(smallest);
  const double top_saving = saving(top.min.min_limit);
  advice.nothing_helps = advice.baseline == 0 ||
                         (top_saving < kNearBestFraction && top.ooms >= base.ooms);
  advice.recommended = advice.nothing_helps ? advice.baseline : 0;

  const AdviseCandidate& rec = ranked[advice.recommended];
  advice.env_line = rec.line;
  if (rec.config.config.garbage_collection_threshold > 0.0 && with_gc)
    advice.env_line = with_memory_fraction(rec.line, *options.memory_limit, *options.device_memory);

  size_t largest = options.memory_limit.value_or(0);
  for (const AdviseCandidate& c : ranked)
    largest = std::max({largest, c.peak_reserved, c.min.min_limit, c.min.peak_reserved_unlimited});
  advice.largest_bytes = largest;
  const ByteUnit unit = unit_for(largest);
  auto b = [&](size_t bytes) { return in_unit(bytes, unit); };
  const std::string env = "PYTORCH_CUDA_ALLOC_CONF=" + (advice.env_line.empty() ? std::string("''")
                                                                                 : advice.env_line);
  std::string limit_part;
  if (options.memory_limit)
    limit_part = " Under the " + b(*options.memory_limit) + " limit it OOMs " +
                 std::to_string(rec.ooms) + " times" +
                 (advice.nothing_helps ? "" : " (the trace's own settings: " + std::to_string(base.ooms) + ")") +
                 ".";
  if (base.min.min_limit == 0) {
    advice.headline = "The trace allocates no device memory: there is nothing to advise.";
  } else if (advice.nothing_helps) {
    advice.headline = "Keep the trace's settings (" + env + "): this run's peak is its working set, "
                      "not fragmentation: no setting saves more than " +
                      percent(std::max(0.0, advice.best_saving)) + ".";
    advice.reason = "It needs " + b(base.min.min_limit) + " to run without an OOM; the best of " +
                    std::to_string(advice.configs_run) + " configs needs " + b(smallest) + "." +
                    limit_part;
  } else {
    // The line to copy is printed on a line of its own (lab_advise.cc): a
    // value followed by ':' in the sentence was easy to copy with the colon.
    advice.headline = "Set PYTORCH_CUDA_ALLOC_CONF to the line shown; it needs " +
                      b(rec.min.min_limit) + " instead of " +
                      b(base.min.min_limit) + " (" +
                      (top_saving >= 0 ? percent(top_saving) + " less" : percent(-top_saving) + " more") +
                      ")" +
                      (rec.ooms < base.ooms ? " and OOMs " + std::to_string(rec.ooms) + " times under the "
                                              "limit instead of " + std::to_string(base.ooms)
                                            : "") +
                      ".";
    advice.reason = "Smallest memory without an OOM: " + b(rec.min.min_limit) + " (the trace's own "
                    "settings: " + b(base.min.min_limit) + "); peak reserved " + b(rec.peak_reserved) +
                    " (" + b(base.peak_reserved) + ")" +
                    (options.memory_limit ? " under the limit." : " with no limit.") + limit_part;
    if (rec.min.min_limit > smallest)
      advice.reason += " Of the configs within 1 % of the smallest minimum (" + b(smallest) + ") it " +
                       (options.memory_limit ? "OOMs least, then " : "") + "calls the device least (" +
                       std::to_string(rec.device_allocs + rec.device_frees) + " calls).";
  }
  if (options.memory_limit && rec.min.min_limit > *options.memory_limit)
    advice.reason += " No setting fits this run in " + b(*options.memory_limit) +
                     ": the least any needs is " + b(smallest) + ".";
}

}  // namespace cachealloc
