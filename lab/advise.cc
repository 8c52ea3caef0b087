#include "lab/advise.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "lab/advise_answer.h"
#include "lab/advise_rank.h"
#include "lab/advise_space.h"
#include "lab/conf_line.h"
#include "lab/parallel_for.h"
#include "lab/whatif.h"

namespace cachealloc {
namespace {

size_t keys_in(const std::string& line) {
  if (line.empty()) return 0;
  size_t keys = 1, depth = 0;
  for (char c : line) {
    depth += c == '[';
    depth -= c == ']';
    keys += c == ',' && depth == 0;
  }
  return keys;
}

RankKey rank_key(const AdviseCandidate& c) {
  return RankKey{c.min.min_limit, c.ooms, c.device_allocs + c.device_frees, c.keys};
}

class Search {
 public:
  Search(const RequestStream& stream, const AdviseOptions& options)
      : stream_(stream), options_(options) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    threads_ = options.threads > 0 ? options.threads : cores;
  }

  // Runs every (name, config text) not run yet (by conf_line); returns the
  // indices into candidates_ of all of them in order. An empty name stands
  // for the config's line.
  std::vector<size_t> run(const std::vector<std::pair<std::string, std::string>>& named, int round);
  Advice finish(double seconds);
  std::vector<AdviseCandidate>& candidates() { return candidates_; }
  unsigned threads() const { return threads_; }

 private:
  void evaluate(AdviseCandidate& c) const;

  const RequestStream& stream_;
  const AdviseOptions& options_;
  unsigned threads_ = 1;
  std::vector<AdviseCandidate> candidates_;
  std::map<std::string, size_t> by_line_;
  std::mutex progress_mutex_;
};

void Search::evaluate(AdviseCandidate& c) const {
  MinMemoryOptions mm;
  mm.address_hints = options_.address_hints;
  mm.placement = options_.placement;
  mm.deadline = options_.deadline;
  c.min = find_min_memory(stream_, c.config, mm);
  c.seconds = c.min.seconds;
  c.peak_reserved = c.min.peak_reserved_unlimited;
  c.device_allocs = c.min.device_allocs_unlimited;
  c.device_frees = c.min.device_frees_unlimited;
  if (!options_.memory_limit) return;
  WhatIfOptions w;
  w.memory_limit = options_.memory_limit;
  w.address_hints = options_.address_hints;
  w.placement = options_.placement;
  w.series_points = 1;
  w.deadline = options_.deadline;
  const WhatIfResult r = run_whatif(stream_, c.config, w);
  c.seconds += r.seconds;
  c.peak_reserved = r.peak_reserved;
  c.device_allocs = r.device_allocs;
  c.device_frees = r.device_frees;
  c.ooms = r.ooms;
  c.retries = r.retries;
}

std::vector<size_t> Search::run(const std::vector<std::pair<std::string, std::string>>& named,
                                int round) {
  std::vector<size_t> out, fresh;
  for (const auto& [name, text] : named) {
    LabConfig config = parse_lab_config(text, stream_.recorded_config, options_.policy);
    const std::string line = conf_line(config.config);
    auto [it, inserted] = by_line_.try_emplace(line, candidates_.size());
    if (inserted) {
      AdviseCandidate c;
      c.config = std::move(config);
      c.line = line;
      c.keys = keys_in(line);
      c.round = round;
      candidates_.push_back(std::move(c));
      fresh.push_back(it->second);
    }
    AdviseCandidate& c = candidates_[it->second];
    const std::string& label = name.empty() ? line : name;  // unnamed: its line
    if (std::find(c.labels.begin(), c.labels.end(), label) == c.labels.end())
      c.labels.push_back(label);
    out.push_back(it->second);
  }
  parallel_for(fresh.size(), threads_, [&](size_t i) {
    AdviseCandidate& c = candidates_[fresh[i]];
    evaluate(c);
    if (options_.progress) {
      std::lock_guard<std::mutex> lock(progress_mutex_);
      options_.progress("'" + c.labels.front() + "': needs " + std::to_string(c.min.min_limit) +
                        " bytes (" + std::to_string(c.min.probes) + " probes)");
    }
  });
  return out;
}

// The best entry of `axis` (ranked against the defaults' row when
// `against_defaults`), or "" when the defaults rank first.
std::string best_of(AdviseAxis axis, bool against_defaults, const std::vector<AdviseCandidate>& all,
                    size_t defaults, const std::vector<AxisValue>& axes,
                    const std::vector<size_t>& index_of_axis_value) {
  std::vector<size_t> members;
  std::vector<std::string> entries;
  if (against_defaults) {
    members.push_back(defaults);
    entries.push_back("");
  }
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i].axis == axis) {
      members.push_back(index_of_axis_value[i]);
      entries.push_back(axes[i].entry);
    }
  if (members.empty()) return "";
  std::vector<RankKey> keys;
  for (size_t m : members) keys.push_back(rank_key(all[m]));
  const size_t best = rank_configs(keys).front();
  return members[best] == defaults ? "" : entries[best];
}

// Rows that behaved identically become one.
std::vector<AdviseCandidate> merge_identical(std::vector<AdviseCandidate> all) {
  std::vector<AdviseCandidate> out;
  auto signature = [](const AdviseCandidate& c) {
    return std::make_tuple(c.min.min_limit, c.min.peak_reserved_unlimited, c.peak_reserved,
                           c.device_allocs, c.device_frees, c.ooms, c.retries);
  };
  for (AdviseCandidate& c : all) {
    auto same = std::find_if(out.begin(), out.end(), [&](const AdviseCandidate& o) {
      return signature(o) == signature(c);
    });
    if (same == out.end()) {
      out.push_back(std::move(c));
      continue;
    }
    same->labels.insert(same->labels.end(), c.labels.begin(), c.labels.end());
    same->seconds += c.seconds;
    same->min.probes += c.min.probes;
    same->round = std::min(same->round, c.round);
    if (c.keys < same->keys) {
      // The simpler line represents the row; its labels stay in order.
      std::swap(same->config, c.config);
      std::swap(same->line, c.line);
      same->keys = c.keys;
    }
  }
  return out;
}

}  // namespace

std::string AdviseCandidate::label() const {
  std::string s;
  for (const std::string& l : labels) s += (s.empty() ? "" : " = ") + l;
  return s;
}

std::string AdviseCandidate::short_label(size_t width) const {
  std::string s = label();
  if (s.size() <= width) return s;
  s = labels.front();
  size_t shown = 1;
  while (shown < labels.size() && s.size() + 3 + labels[shown].size() + 14 <= width)
    s += " = " + labels[shown++];
  if (shown == labels.size()) return s;
  return s + " (= " + std::to_string(labels.size() - shown) + " more)";
}

Advice advise(const RequestStream& stream, const AdviseOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Search search(stream, options);
  Advice advice;
  const bool with_gc = options.memory_limit && options.device_memory;
  if (options.memory_limit && !options.device_memory)
    advice.notes.push_back(
        "garbage_collection_threshold was not searched: it acts only under a memory fraction, "
        "and writing one needs the device's total memory (--device-memory BYTES)");
  if (!options.memory_limit)
    advice.notes.push_back(
        "garbage_collection_threshold was not searched: it acts only under a memory limit "
        "(--memory-limit BYTES)");

  // Round zero and one together: the baselines and one option at a time.
  const std::vector<AxisValue> axes = first_round(with_gc);
  const std::string recorded = conf_line(stream.recorded_config);
  const std::string trace_name = recorded.empty() ? "trace" : "trace (" + recorded + ")";
  std::vector<std::pair<std::string, std::string>> named{{trace_name, "trace"}, {"defaults", ""}};
  for (const AxisValue& a : axes) named.emplace_back("", a.entry);
  std::vector<size_t> index = search.run(named, 1);
  for (size_t i : {index[0], index[1]}) search.candidates()[i].round = 0;
  const std::vector<size_t> axis_index(index.begin() + 2, index.end());
  std::map<AdviseAxis, std::string> winners;
  for (AdviseAxis axis : {AdviseAxis::kExpandable, AdviseAxis::kSplit, AdviseAxis::kRoundup,
                          AdviseAxis::kLargeSegment, AdviseAxis::kGc}) {
    std::string best = best_of(axis, true, search.candidates(), index[1], axes, axis_index);
    if (!best.empty()) winners[axis] = std::move(best);
  }
  const std::string best_split =
      best_of(AdviseAxis::kSplit, false, search.candidates(), index[1], axes, axis_index);

  std::vector<std::pair<std::string, std::string>> combos;
  for (const std::string& text : second_round(winners, best_split)) combos.emplace_back("", text);
  search.run(combos, 2);

  advice.configs_run = search.candidates().size();
  for (const AdviseCandidate& c : search.candidates()) advice.probes += c.min.probes;
  advice.threads = search.threads();

  std::vector<AdviseCandidate> rows = merge_identical(std::move(search.candidates()));
  std::vector<RankKey> keys;
  for (const AdviseCandidate& c : rows) keys.push_back(rank_key(c));
  for (size_t i : rank_configs(keys)) advice.ranked.push_back(std::move(rows[i]));
  answer(advice, options);
  advice.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return advice;
}

}  // namespace cachealloc
