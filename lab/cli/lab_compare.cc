// cachealloc compare: one trace's requests replayed under several
// configurations, side by side (table, JSON, HTML report, snapshots).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
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
#include "lab/cli/lab_html.h"
#include "lab/cli/lab_input.h"
#include "lab/cli/lab_options.h"
#include "lab/cli/output_file.h"
#include "lab/lab_config.h"
#include "lab/whatif.h"
#include "pickle/pickle_writer.h"

namespace cachealloc {
namespace {

constexpr const char* kCompareUsage =
    "usage: cachealloc compare TRACE [--conf TEXT]... [--memory-limit BYTES]\n"
    "                          [--html OUT.html] [--snapshot-dir DIR] [--json]\n"
    "                          [--recorded-limit BYTES] [--device N]\n"
    "                          [--peak-blocks N] [--series-points N]\n"
    "                          [--snapshot-entries N] [--check-invariants]\n"
    "                          [--no-address-hints] [--placement P] [--policy NAME]\n"
    "                          [--quiet | --progress]\n"
    "\n"
    "Replays the requests recorded in TRACE (a snapshot pickle, .pickle or\n"
    ".pickle.gz, from PyTorch or cachealloc) under each --conf on a fresh\n"
    "engine and a simulated device, and compares peak reserved and allocated\n"
    "memory, fragmentation at the reserved peak (1 - allocated/reserved at that\n"
    "moment), device allocations and frees, retries and OOMs.\n"
    "\n"
    "  --conf TEXT          a configuration (repeatable; default: trace):\n"
    "                         trace                 the trace's recorded settings\n"
    "                         \"\"                    native defaults\n"
    "                         max_split_size_mb:128,roundup_power2_divisions:4,\n"
    "                         garbage_collection_threshold:0.8 (needs a limit),\n"
    "                         max_non_split_rounding_mb:64   native options\n"
    "                         expandable_segments:True[,options]  expandable segments\n"
    "                         policy:NAME[,options] a placement policy (see --policy)\n"
    "  --memory-limit B     bytes each replay may reserve (1073741824, 40GiB);\n"
    "                       requests beyond it OOM, are counted, and skipped\n"
    "  --html OUT           write a self-contained HTML report\n"
    "  --snapshot-dir DIR   write each replay as a snapshot pickle for\n"
    "                       pytorch.org/memory_viz\n"
    "  --json               print one JSON object instead of the table\n"
    "  --recorded-limit B   the limit TRACE was recorded under, to tell the\n"
    "                       allocator's own releases from empty_cache() calls\n"
    "  --device N           which device's trace (default: the only one)\n"
    "  --peak-blocks N      describe the N largest live blocks at the peak\n"
    "                       (default 10 with --html, else 0)\n"
    "  --series-points N    time-series resolution (default 1000); given, --json\n"
    "                       adds each config's \"series\": [first request,\n"
    "                       reserved, allocated] per bucket, each the bucket's\n"
    "                       largest\n"
    "  --snapshot-entries N history kept per snapshot (default 100000)\n"
    "  --check-invariants   check the engine after every request (slow)\n"
    "  --no-address-hints   place segments by --placement only, not where the trace\n"
    "                       recorded them (the engine breaks ties by address)\n"
    "  --placement P        where a segment goes without a hint: first-fit\n"
    "                       (default), top-down, as the CUDA driver mostly does,\n"
    "                       or shuffled:SEED, a seeded random order of addresses\n"
    "  --policy NAME        placement policy of every config naming none: native\n"
    "                       (default), stitch, rescue, unmap_on_free\n"
    "                       (docs/policies.md)\n"
    "  --quiet / --progress never / always report progress on stderr (default:\n"
    "                       only for traces of a million events or more)\n"
    "\n"
    "Options take their value as --opt VALUE or --opt=VALUE; bytes may be\n"
    "written 1073741824, 2e9, 40GiB or 1.5GiB (K, M, G, T: powers of 1024).\n"
    "\n"
    "exit status: 0 done, 2 bad input (usage, unreadable trace, bad config)\n";

struct CompareArgs {
  LabCommonArgs common;  // TRACE, --conf, --json, --device, ... (lab_options.h)
  std::optional<size_t> memory_limit;
  std::optional<std::string> html, snapshot_dir;
  std::optional<size_t> peak_blocks;
  size_t series_points = 1000;
  bool series_in_json = false;  // --series-points given: the series go into --json
  size_t snapshot_entries = 100000;
  bool check_invariants = false;
};

CompareArgs parse_args(const std::vector<std::string>& args) {
  CompareArgs c;
  std::optional<size_t> series_points, snapshot_entries;
  c.common = parse_lab_args("compare", args, [&](CLI::App& app) {
    add_bytes_option(app, "--memory-limit", c.memory_limit);
    add_text_option(app, "--html", c.html);
    add_text_option(app, "--snapshot-dir", c.snapshot_dir);
    add_count_option(app, "--peak-blocks", c.peak_blocks);
    add_count_option(app, "--series-points", series_points);
    add_count_option(app, "--snapshot-entries", snapshot_entries);
    app.add_flag("--check-invariants", c.check_invariants);
  });
  if (series_points) c.series_points = std::max<size_t>(1, *series_points);
  c.series_in_json = series_points.has_value();
  if (snapshot_entries) c.snapshot_entries = std::max<size_t>(1, *snapshot_entries);
  return c;
}

std::string slug(const std::string& label) {
  std::string s;
  for (char ch : label.substr(0, 60))
    s += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-') ? ch : '_';
  return s.empty() ? "defaults" : s;
}

std::string json_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Driver calls for pages (page_handles.h), as a JSON object.
std::string page_calls_json(const PageCalls& c) {
  auto n = [](size_t v) { return std::to_string(v); };
  return "{\"creates\": " + n(c.creates) + ", \"maps\": " + n(c.maps) +
         ", \"unmaps\": " + n(c.unmaps) + ", \"releases\": " + n(c.releases) +
         ", \"set_access\": " + n(c.set_access) + ", \"syncs\": " + n(c.syncs) +
         ", \"total\": " + n(c.total()) + "}";
}

std::string result_json(const WhatIfResult& r, const std::string& snapshot_path, bool series) {
  auto n = [](size_t v) { return std::to_string(v); };
  const double rate = r.seconds > 0 ? 1.0 / r.seconds : 0.0;
  std::string s = "{\"conf\": " + json_string(r.config.text) +
                  ", \"label\": " + json_string(r.config.label()) +
                  ", \"policy\": " + json_string(r.config.policy) +
                  ", \"peak_reserved\": " + n(r.peak_reserved) +
                  ", \"peak_allocated\": " + n(r.peak_allocated) +
                  ", \"allocated_at_peak\": " + n(r.allocated_at_peak) +
                  ", \"fragmentation_at_peak\": " + json_double(r.fragmentation_at_peak) +
                  ", \"peak_request\": " + n(r.peak_request) +
                  ", \"device_allocs\": " + n(r.device_allocs) +
                  ", \"device_frees\": " + n(r.device_frees) + ", \"retries\": " + n(r.retries) +
                  ", \"ooms\": " + n(r.ooms) + ", \"fallbacks\": " + n(r.fallbacks) +
                  ", \"page_calls\": " + page_calls_json(r.page_calls) +
                  ", \"page_calls_late\": " + page_calls_json(r.page_calls_late) +
                  ", \"late_request\": " + n(r.late_request) +
                  ", \"fallback_skips\": " + n(r.fallback_skips) +
                  ", \"recorded_ooms_succeeded\": " + n(r.recorded_ooms_succeeded) +
                  ", \"final_reserved\": " + n(r.final_reserved) +
                  ", \"final_allocated\": " + n(r.final_allocated) +
                  ", \"requests\": " + n(r.requests) +
                  ", \"seconds\": " + json_double(r.seconds) +
                  ", \"requests_per_s\": " + json_double(static_cast<double>(r.requests) * rate) +
                  ", \"events_per_s\": " + json_double(static_cast<double>(r.recorded_events) * rate) +
                  ", \"snapshot\": " + (snapshot_path.empty() ? "null" : json_string(snapshot_path));
  if (r.peak) {
    s += ", \"peak_blocks\": [";
    for (size_t i = 0; i < r.peak->largest_blocks.size(); ++i) {
      const LiveBlock& b = r.peak->largest_blocks[i];
      s += std::string(i ? ", " : "") + "{\"address\": " + n(b.address) + ", \"size\": " +
           n(b.size) + ", \"requested\": " + n(b.requested) + ", \"stream\": " + n(b.stream) +
           ", \"allocated_at\": " + n(b.allocated_at) + "}";
    }
    s += "], \"peak_segments\": " + n(r.peak->segments.size());
  }
  if (series) {
    s += ", \"series\": [";
    for (size_t i = 0; i < r.series.size(); ++i) {
      const SeriesPoint& p = r.series[i];
      s += std::string(i ? ", " : "") + "[" + n(p.first_request) + ", " + n(p.reserved) + ", " +
           n(p.allocated) + "]";
    }
    s += "]";
  }
  return s + "}";
}

void print_table(const LabInput& in, const std::optional<size_t>& limit,
                 const std::vector<WhatIfResult>& results) {
  const RequestStream& st = in.stream;
  std::printf("trace %s, device %d: %zu events -> %zu requests (%zu empty_cache calls, "
              "%zu recorded OOMs)\n",
              in.path.c_str(), st.device, st.recorded_events, st.requests.size(),
              st.empty_cache_calls, st.recorded_ooms);
  std::printf("memory limit: %s\n\n",
              limit ? (lab_bytes(*limit) + " (" + std::to_string(*limit) + " bytes)").c_str()
                    : "none");
  size_t width = 6;  // the widest label: labels are never cut
  for (const auto& r : results) width = std::max(width, r.config.label().size());
  std::printf("%-*s  %-10s  %13s  %14s  %9s  %10s  %9s  %7s  %5s  %9s\n", static_cast<int>(width),
              "config", "policy", "peak reserved", "peak allocated", "frag@peak", "dev allocs",
              "dev frees", "retries", "OOMs", "time");
  for (const auto& r : results) {
    char frag[16];
    std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * r.fragmentation_at_peak);
    std::printf("%-*s  %-10s  %13s  %14s  %9s  %10zu  %9zu  %7zu  %5zu  %9s\n",
                static_cast<int>(width), r.config.label().c_str(),
                r.config.policy.c_str(), lab_bytes(r.peak_reserved).c_str(),
                lab_bytes(r.peak_allocated).c_str(), frag, r.device_allocs, r.device_frees,
                r.retries, r.ooms, lab_seconds(r.seconds).c_str());
  }
  if (!st.fallible.empty()) {
    // A prediction's trace: say how its fallible requests fared.
    std::printf("\n%zu fallible request(s) in %zu group(s) (OOMs above exclude them):\n",
                st.fallible.size(), st.fallible_groups);
    for (const auto& r : results)
      std::printf("  %-*s  %zu fell back, %zu not made after a fallback\n", static_cast<int>(width),
                  r.config.label().c_str(), r.fallbacks, r.fallback_skips);
  }
  for (const auto& r : results)
    if (r.peak && !r.peak->largest_blocks.empty()) {
      std::printf("\n%s: at the reserved peak (request %zu), %zu live blocks; largest:\n",
                  r.config.label().c_str(), r.peak->request_index, r.peak->live_blocks);
      for (const LiveBlock& b : r.peak->largest_blocks)
        std::printf("  %12s  requested %zu bytes, stream %zu, since request %zu\n",
                    lab_bytes(b.size).c_str(), b.requested, static_cast<size_t>(b.stream),
                    b.allocated_at);
    }
}

int run_compare(const CompareArgs& args) {
  const LabCommonArgs& common = args.common;
  for (const std::string& text : common.confs) parse_lab_config(text, AllocatorConfig{}, common.policy);  // fail fast
  LabProgress progress(false);
  const LabInput in = load_lab_input(common.trace, common.input, progress);
  if (!args.memory_limit)
    for (const std::string& text : common.confs) {
      const LabConfig config = parse_lab_config(text, in.stream.recorded_config, common.policy);
      warn_gc_without_limit("compare", config.label(), config.config.garbage_collection_threshold);
    }
  if (args.snapshot_dir) std::filesystem::create_directories(*args.snapshot_dir);

  std::vector<WhatIfResult> results;
  std::vector<std::string> snapshot_paths;
  for (size_t i = 0; i < common.confs.size(); ++i) {
    const LabConfig config = parse_lab_config(common.confs[i], in.stream.recorded_config, common.policy);
    WhatIfOptions options;
    options.memory_limit = args.memory_limit;
    options.series_points = args.series_points;
    options.peak_blocks = args.peak_blocks.value_or(args.html ? 10 : 0);
    options.snapshot_entries = args.snapshot_dir ? args.snapshot_entries : 0;
    options.check_invariants = args.check_invariants;
    options.address_hints = common.address_hints;
    options.placement = common.placement;
    const std::string which = "config " + std::to_string(i + 1) + "/" +
                              std::to_string(common.confs.size()) + " '" + config.label() + "'";
    if (progress.enabled())
      options.progress = [&](size_t done, size_t total) {
        progress.note(which + ": " + std::to_string(done) + "/" + std::to_string(total) + " requests");
      };
    progress.note("replaying " + which);
    set_activity("replaying " + which);
    results.push_back(run_whatif(in.stream, config, options));
    std::string path;
    if (args.snapshot_dir) {
      path = (std::filesystem::path(*args.snapshot_dir) /
              (in.name + "." + std::to_string(i + 1) + "." + slug(config.label()) + ".pickle"))
                 .string();
      set_activity("writing " + path);
      write_output_file(path, write_pickle(*results.back().snapshot), "snapshot");
      results.back().snapshot.reset();
      progress.note("wrote " + path);
    }
    snapshot_paths.push_back(path);
  }

  if (args.html) {
    set_activity("writing " + *args.html);
    LabReport report{in, args.memory_limit, results};
    write_output_file(*args.html, render_lab_html(report), "HTML report");
    progress.note("wrote " + *args.html);
  }

  if (common.json) {
    const RequestStream& st = in.stream;
    auto n = [](size_t v) { return std::to_string(v); };
    std::string s = "{\"trace\": " + json_string(in.path) + ", \"device\": " + n(st.device) +
                    ", \"events\": " + n(st.recorded_events) + ", \"requests\": " +
                    n(st.requests.size()) + ", \"empty_cache_calls\": " + n(st.empty_cache_calls) +
                    ", \"recorded_ooms\": " + n(st.recorded_ooms) + ", \"deferred_frees\": " +
                    n(st.deferred_frees) + ", \"unmatched_frees\": " + n(st.unmatched_frees) +
                    ", \"memory_limit\": " + (args.memory_limit ? n(*args.memory_limit) : "null") +
                    ", \"address_hints\": " + (common.address_hints ? "true" : "false") +
                    ", \"placement\": \"" + segment_placement_name(common.placement) + "\"" +
                    ", \"html\": " + (args.html ? json_string(*args.html) : "null") +
                    ", \"configs\": [";
    for (size_t i = 0; i < results.size(); ++i)
      s += (i ? ", " : "") + result_json(results[i], snapshot_paths[i], args.series_in_json);
    std::cout << s << "]}\n";
  } else {
    print_table(in, args.memory_limit, results);
  }
  return 0;
}

}  // namespace

int compare_main(const std::vector<std::string>& args) {
  return run_lab_command("compare", kCompareUsage, args,
                         [&args] { return run_compare(parse_args(args)); });
}

}  // namespace cachealloc
