// cachealloc min-memory: the smallest memory limit at which a trace's
// requests run without OOM, per configuration (lab/min_memory.h).
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "lab/cli/advise_html.h"
#include "lab/cli/command_line.h"
#include "lab/cli/json_out.h"
#include "lab/cli/lab_args.h"
#include "lab/cli/lab_commands.h"
#include "lab/cli/lab_input.h"
#include "lab/cli/lab_options.h"
#include "lab/cli/output_file.h"
#include "lab/lab_config.h"
#include "lab/min_memory.h"
#include "lab/whatif_device.h"

namespace cachealloc {
namespace {

constexpr const char* kMinMemoryUsage =
    "usage: cachealloc min-memory TRACE [--conf TEXT]... [--json] [--html OUT]\n"
    "                             [--recorded-limit BYTES] [--device N]\n"
    "                             [--no-address-hints] [--placement P]\n"
    "                             [--also-placement P]... [--policy NAME]\n"
    "                             [--quiet | --progress]\n"
    "\n"
    "For each --conf (as in `cachealloc compare`; default: trace), finds the\n"
    "smallest memory limit in bytes at which TRACE's requests run without a\n"
    "single OOM: bisection over limits in 2 MiB units (the granularity of\n"
    "reserved memory), then verified: the limit runs clean, one byte less\n"
    "does not.\n"
    "\n"
    "  --json               print one JSON object instead of the table\n"
    "  --html OUT           also write a self-contained page: every minimum, to scale\n"
    "  --recorded-limit B   the limit TRACE was recorded under (see compare)\n"
    "  --device N           which device's trace (default: the only one)\n"
    "  --no-address-hints   place segments by --placement only (see compare)\n"
    "  --placement P        first-fit (default), top-down or shuffled:SEED (see\n"
    "                       compare)\n"
    "  --also-placement P   search each config again under placement P too\n"
    "                       (repeatable; the trace is read once); rows name\n"
    "                       their placement\n"
    "  --policy NAME        placement policy (see compare; default native)\n"
    "  --quiet / --progress never / always report progress on stderr\n"
    "\n"
    "Options take their value as --opt VALUE or --opt=VALUE; bytes may be\n"
    "written 1073741824, 2e9, 40GiB or 1.5GiB (K, M, G, T: powers of 1024).\n"
    "\n"
    "exit status: 0 done, 2 bad input (usage, unreadable trace, bad config)\n";

int run_min_memory(const LabCommonArgs& args, const std::optional<std::string>& html,
                   const std::vector<SegmentPlacement>& also) {
  for (const std::string& text : args.confs) parse_lab_config(text, AllocatorConfig{}, args.policy);  // fail fast
  LabProgress progress(false);
  const LabInput in = load_lab_input(args.trace, args.input, progress);
  std::vector<MinMemoryResult> results;
  std::vector<SegmentPlacement> placements{args.placement};
  placements.insert(placements.end(), also.begin(), also.end());
  std::vector<SegmentPlacement> placed;  // results[i]'s placement
  for (const SegmentPlacement& placement : placements)
  for (const std::string& text : args.confs) {
    const LabConfig config = parse_lab_config(text, in.stream.recorded_config, args.policy);
    MinMemoryOptions options;
    options.address_hints = args.address_hints;
    options.placement = placement;
    placed.push_back(placement);
    if (progress.enabled())
      options.progress = [&](size_t limit, bool clean) {
        progress.note("'" + config.label() + "': limit " + std::to_string(limit) + " bytes " +
                      (clean ? "runs clean" : "OOMs"));
      };
    progress.note("searching the minimum for '" + config.label() + "'");
    set_activity("searching the minimum memory for '" + config.label() + "'");
    results.push_back(find_min_memory(in.stream, config, options));
  }

  if (html) {
    set_activity("writing " + *html);
    write_output_file(*html, render_min_memory_html(in, results), "HTML report");
    progress.note("wrote " + *html);
  }
  auto n = [](size_t v) { return std::to_string(v); };
  if (args.json) {
    std::string s = "{\"trace\": " + json_string(in.path) + ", \"device\": " +
                    n(in.stream.device) + ", \"events\": " + n(in.stream.recorded_events) +
                    ", \"requests\": " + n(in.stream.requests.size()) + ", \"configs\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      const MinMemoryResult& r = results[i];
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.6g", r.seconds);
      s += std::string(i ? ", " : "") + "{\"conf\": " + json_string(r.config.text) +
           ", \"label\": " + json_string(r.config.label()) +
           ", \"policy\": " + json_string(r.config.policy) +
           ", \"placement\": " + json_string(segment_placement_name(placed[i])) +
           ", \"min_memory\": " + n(r.min_limit) +
           ", \"peak_reserved_unlimited\": " + n(r.peak_reserved_unlimited) +
           ", \"probes\": " + n(r.probes) +
           ", \"byte_refined\": " + (r.byte_refined ? "true" : "false") +
           ", \"seconds\": " + seconds + "}";
    }
    std::cout << s << "]}\n";
    return 0;
  }
  std::printf("trace %s, device %d: %zu events -> %zu requests\n\n", in.path.c_str(),
              in.stream.device, in.stream.recorded_events, in.stream.requests.size());
  // With --also-placement each row's label names its placement too.
  auto label = [&](size_t i) {
    return also.empty() ? results[i].config.label()
                        : results[i].config.label() + " @ " + segment_placement_name(placed[i]);
  };
  size_t width = 6;
  for (size_t i = 0; i < results.size(); ++i) width = std::max(width, label(i).size());  // never cut
  std::printf("%-*s  %-10s  %16s  %12s  %18s  %6s  %9s\n", static_cast<int>(width), "config",
              "policy", "min memory (B)", "min memory", "unlimited peak", "probes", "time");
  for (size_t i = 0; i < results.size(); ++i) {
    const MinMemoryResult& r = results[i];
    std::printf("%-*s  %-10s  %16zu  %12s  %18s  %6zu  %9s\n", static_cast<int>(width),
                label(i).c_str(), r.config.policy.c_str(),
                r.min_limit, lab_bytes(r.min_limit).c_str(),
                lab_bytes(r.peak_reserved_unlimited).c_str(), r.probes,
                lab_seconds(r.seconds).c_str());
  }
  return 0;
}

}  // namespace

int min_memory_main(const std::vector<std::string>& args) {
  return run_lab_command("min-memory", kMinMemoryUsage, args, [&args] {
    std::optional<std::string> html;
    std::vector<std::string> also_texts;  // one value per --also-placement, as --conf
    const LabCommonArgs common = parse_lab_args("min-memory", args, [&html, &also_texts](CLI::App& app) {
      add_text_option(app, "--html", html);
      add_list_option(app, "--also-placement", also_texts);
    });
    std::vector<SegmentPlacement> also;
    for (const std::string& text : also_texts) {
      try {
        also.push_back(parse_segment_placement(text));
      } catch (const std::invalid_argument& e) {
        throw LabUsageError(std::string("--also-placement: ") + e.what());
      }
    }
    if (html && !also.empty())
      throw LabUsageError("--also-placement: not with --html (the page shows one placement)");
    return run_min_memory(common, html, also);
  });
}

}  // namespace cachealloc
