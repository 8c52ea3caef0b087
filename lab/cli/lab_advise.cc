// cachealloc advise: which PYTORCH_CUDA_ALLOC_CONF a traced run should use
// (lab/advise.h), as a table, JSON, or an HTML page that leads with it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "lab/advise.h"
#include "lab/byte_unit.h"
#include "lab/cli/advise_html.h"
#include "lab/cli/command_line.h"
#include "lab/cli/json_out.h"
#include "lab/cli/lab_args.h"
#include "lab/cli/lab_commands.h"
#include "lab/cli/lab_input.h"
#include "lab/cli/lab_options.h"
#include "lab/cli/output_file.h"

namespace cachealloc {
namespace {

constexpr const char* kAdviseUsage =
    "usage: cachealloc advise TRACE [--memory-limit BYTES] [--device-memory BYTES]\n"
    "                         [--recorded-limit BYTES] [--html OUT.html] [--json]\n"
    "                         [--threads N] [--device N] [--no-address-hints] [--placement P]\n"
    "                         [--policy NAME]\n"
    "                         [--quiet | --progress]\n"
    "\n"
    "Searches native PyTorch's allocator settings (expandable_segments,\n"
    "max_split_size_mb, roundup_power2_divisions in both forms,\n"
    "max_non_split_rounding_mb, and garbage_collection_threshold under a\n"
    "limit) by replaying TRACE's requests, and recommends the\n"
    "PYTORCH_CUDA_ALLOC_CONF under which the run needs the least memory\n"
    "without an OOM (exact, as `cachealloc min-memory`), then the fewest OOMs\n"
    "under --memory-limit; among configs within 1 % of the best minimum, the\n"
    "fewest device calls. Identically behaving configs are merged.\n"
    "\n"
    "  --memory-limit B     the memory the run gets (e.g. its memory fraction\n"
    "                       times the device's memory): OOMs are counted under it\n"
    "  --device-memory B    the device's total memory: with --memory-limit,\n"
    "                       garbage_collection_threshold is searched and its\n"
    "                       recommendation carries per_process_memory_fraction\n"
    "  --recorded-limit B   the limit TRACE was recorded under (see compare)\n"
    "  --html OUT           write a self-contained page that opens with the answer\n"
    "  --json               print one JSON object instead of the table\n"
    "  --threads N          replay on N threads (default: every core)\n"
    "  --device N           which device's trace (default: the only one)\n"
    "  --no-address-hints   place segments by --placement only (see compare)\n"
    "  --placement P        first-fit (default), top-down or shuffled:SEED (see\n"
    "                       compare)\n"
    "  --policy NAME        run every candidate under this placement policy\n"
    "                       (see compare; default native)\n"
    "  --quiet / --progress never / always report progress on stderr\n"
    "\n"
    "Options take their value as --opt VALUE or --opt=VALUE; bytes may be\n"
    "written 1073741824, 2e9, 40GiB or 1.5GiB (K, M, G, T: powers of 1024).\n"
    "\n"
    "exit status: 0 done, 2 bad input (usage, unreadable trace)\n";

struct AdviseArgs {
  LabCommonArgs common;
  std::optional<size_t> memory_limit, device_memory, threads;
  std::optional<std::string> html;
};

AdviseArgs parse_args(const std::vector<std::string>& args) {
  AdviseArgs a;
  a.common = parse_lab_args("advise", args, [&](CLI::App& app) {
    add_bytes_option(app, "--memory-limit", a.memory_limit);
    add_bytes_option(app, "--device-memory", a.device_memory);
    add_count_option(app, "--threads", a.threads);
    add_text_option(app, "--html", a.html);
  });
  if (a.common.confs != std::vector<std::string>{"trace"})
    throw LabUsageError("advise chooses the configs itself: --conf is for compare and min-memory");
  if (a.threads && *a.threads == 0) throw LabUsageError("--threads must be at least 1");
  if (a.device_memory && a.memory_limit && *a.memory_limit > *a.device_memory)
    throw LabUsageError("--memory-limit (" + std::to_string(*a.memory_limit) +
                        ") is larger than --device-memory (" + std::to_string(*a.device_memory) + ")");
  return a;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string candidate_json(const AdviseCandidate& c) {
  auto n = [](size_t v) { return std::to_string(v); };
  std::string labels;
  for (const std::string& l : c.labels) labels += (labels.empty() ? "" : ", ") + json_string(l);
  return "{\"label\": " + json_string(c.label()) + ", \"labels\": [" + labels +
         "], \"line\": " + json_string(c.line) + ", \"keys\": " + n(c.keys) +
         ", \"round\": " + n(static_cast<size_t>(c.round)) +
         ", \"min_memory\": " + n(c.min.min_limit) +
         ", \"byte_refined\": " + (c.min.byte_refined ? "true" : "false") +
         ", \"peak_reserved_unlimited\": " + n(c.min.peak_reserved_unlimited) +
         ", \"peak_reserved\": " + n(c.peak_reserved) + ", \"ooms\": " + n(c.ooms) +
         ", \"retries\": " + n(c.retries) + ", \"device_allocs\": " + n(c.device_allocs) +
         ", \"device_frees\": " + n(c.device_frees) + ", \"probes\": " + n(c.min.probes) +
         ", \"seconds\": " + number(c.seconds) + "}";
}

void print_json(const LabInput& in, const AdviseArgs& args, const Advice& a, double html_seconds) {
  auto n = [](size_t v) { return std::to_string(v); };
  auto opt = [&](const std::optional<size_t>& v) { return v ? n(*v) : std::string("null"); };
  std::string notes;
  for (const std::string& note : a.notes) notes += (notes.empty() ? "" : ", ") + json_string(note);
  std::string s = "{\"trace\": " + json_string(in.path) + ", \"device\": " + n(in.stream.device) +
                  ", \"events\": " + n(in.stream.recorded_events) +
                  ", \"requests\": " + n(in.stream.requests.size()) +
                  ", \"memory_limit\": " + opt(args.memory_limit) +
                  ", \"device_memory\": " + opt(args.device_memory) +
                  ", \"recommendation\": " + json_string(a.env_line) +
                  ", \"recommended\": " + n(a.recommended) + ", \"baseline\": " + n(a.baseline) +
                  ", \"nothing_helps\": " + (a.nothing_helps ? "true" : "false") +
                  ", \"best_saving\": " + number(a.best_saving) +
                  ", \"saving\": " + number(a.ranked[a.baseline].min.min_limit == 0 ? 0.0 :
                        1.0 - static_cast<double>(a.ranked[a.recommended].min.min_limit) /
                                  static_cast<double>(a.ranked[a.baseline].min.min_limit)) +
                  ", \"headline\": " + json_string(a.headline) +
                  ", \"reason\": " + json_string(a.reason) + ", \"notes\": [" + notes +
                  "], \"configs_run\": " + n(a.configs_run) + ", \"probes\": " + n(a.probes) +
                  ", \"threads\": " + n(a.threads) + ", \"seconds\": " + number(a.seconds) +
                  ", \"html\": " + (args.html ? json_string(*args.html) : "null") +
                  ", \"html_seconds\": " + (args.html ? number(html_seconds) : "null") +
                  ", \"configs\": [";
  for (size_t i = 0; i < a.ranked.size(); ++i) s += (i ? ", " : "") + candidate_json(a.ranked[i]);
  std::cout << s << "]}\n";
}

void print_table(const LabInput& in, const AdviseArgs& args, const Advice& a) {
  const ByteUnit unit = unit_for(a.largest_bytes);
  constexpr size_t kLabelWidth = 72;
  std::printf("trace %s, device %d: %zu events -> %zu requests\n\n", in.path.c_str(),
              in.stream.device, in.stream.recorded_events, in.stream.requests.size());
  std::printf("%s\n", a.headline.c_str());
  if (!a.nothing_helps && a.recommended != a.baseline)  // the line to copy, alone
    std::printf("\n    PYTORCH_CUDA_ALLOC_CONF=%s\n\n",
                a.env_line.empty() ? "''" : a.env_line.c_str());
  std::printf("%s\n", a.reason.c_str());
  for (const std::string& note : a.notes) std::printf("note: %s\n", note.c_str());
  size_t width = 6;
  for (const AdviseCandidate& c : a.ranked) width = std::max(width, c.short_label(kLabelWidth).size());
  const bool limited = args.memory_limit.has_value();
  std::printf("\n%3s  %-*s  %12s  %8s  %13s  %5s  %12s  %6s\n", "#", static_cast<int>(width),
              "config", "min memory", "vs trace", "peak reserved", limited ? "OOMs" : "",
              "device calls", "probes");
  const size_t base = a.ranked[a.baseline].min.min_limit;
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    const AdviseCandidate& c = a.ranked[i];
    char vs[24] = "";
    if (base > 0 && i != a.baseline)
      std::snprintf(vs, sizeof vs, "%+.1f%%",
                    100.0 * (static_cast<double>(c.min.min_limit) / static_cast<double>(base) - 1.0));
    std::printf("%3zu  %-*s  %12s  %8s  %13s  %5s  %12zu  %6zu%s\n", i + 1, static_cast<int>(width),
                c.short_label(kLabelWidth).c_str(), in_unit(c.min.min_limit, unit).c_str(), vs,
                in_unit(c.peak_reserved, unit).c_str(),
                limited ? std::to_string(c.ooms).c_str() : "", c.device_allocs + c.device_frees,
                c.min.probes,
                i == a.recommended ? "  <- recommended" : i == a.baseline ? "  <- trace's own" : "");
  }
  std::printf("\nsearched %zu configs (%zu replays) in %.2f s on %u threads\n", a.configs_run,
              a.probes, a.seconds, a.threads);
}

double write_html(const LabInput& in, const AdviseArgs& args, const Advice& a) {
  const auto start = std::chrono::steady_clock::now();
  set_activity("replaying for and writing " + *args.html);
  write_output_file(*args.html,
                    build_advise_page(in, args.memory_limit, args.common.address_hints,
                                      args.common.placement, a),
                    "HTML report");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run_advise(const AdviseArgs& args) {
  LabProgress progress(false);
  LabInputOptions input = args.common.input;
  input.keep_frames = args.html.has_value();
  const LabInput in = load_lab_input(args.common.trace, input, progress);
  AdviseOptions options;
  options.memory_limit = args.memory_limit;
  options.device_memory = args.device_memory;
  options.address_hints = args.common.address_hints;
  options.placement = args.common.placement;
  options.policy = args.common.policy;
  if (args.threads) options.threads = static_cast<unsigned>(std::min<size_t>(*args.threads, 256));
  if (progress.enabled()) options.progress = [&](const std::string& line) { progress.note(line); };
  set_activity("searching the allocator settings for " + in.path);
  const Advice advice = advise(in.stream, options);
  double html_seconds = 0;
  if (args.html) {
    html_seconds = write_html(in, args, advice);
    progress.note("wrote " + *args.html);
  }
  if (args.common.json) print_json(in, args, advice, html_seconds);
  else print_table(in, args, advice);
  return 0;
}

}  // namespace

int advise_main(const std::vector<std::string>& args) {
  return run_lab_command("advise", kAdviseUsage, args,
                         [&args] { return run_advise(parse_args(args)); });
}

}  // namespace cachealloc
