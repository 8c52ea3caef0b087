#include "lab/cli/advise_html.h"

#include <algorithm>
#include <string>

#include "lab/byte_unit.h"
#include "lab/cli/html_parts.h"

namespace cachealloc {
namespace {

std::string head(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
         html_escape(title) + "</title>\n<style>" + html_style() + "</style></head><body>\n";
}

std::string trace_line(const LabInput& in, const std::optional<size_t>& limit, const ByteUnit& unit) {
  const RequestStream& st = in.stream;
  return "<p class=\"sub\">" + html_escape(in.path) + " &middot; device " + std::to_string(st.device) +
         " &middot; " + std::to_string(st.recorded_events) + " events &rarr; " +
         std::to_string(st.requests.size()) + " requests &middot; " +
         std::to_string(st.recorded_ooms) + " recorded OOMs &middot; memory limit " +
         (limit ? in_unit(*limit, unit) : std::string("none")) + " &middot; sizes in " + unit.name +
         "</p>\n";
}

// A bar `bytes` long on a scale where `largest` is 240 pixels.
std::string bar(size_t bytes, size_t largest, const char* colour) {
  const double w = 240.0 * static_cast<double>(bytes) / static_cast<double>(std::max<size_t>(1, largest));
  return "<span class=\"bar\" style=\"width:" + html_fmt("%.1f", std::max(1.0, w)) +
         "px;background:" + colour + "\"></span> ";
}

std::string change(size_t value, size_t base) {
  if (base == 0 || value == base) return "";
  return html_fmt("%+.1f%%", 100.0 * (static_cast<double>(value) / static_cast<double>(base) - 1.0));
}

std::string configs_table(const AdviseReport& report, const ByteUnit& unit) {
  const Advice& a = report.advice;
  const size_t base = a.ranked[a.baseline].min.min_limit;
  size_t largest = 1;
  for (const AdviseCandidate& c : a.ranked) largest = std::max(largest, c.min.min_limit);
  const bool limited = report.memory_limit.has_value();
  std::string s =
      "<table><tr><th>#</th><th class=\"l\">config (identical behaviour merged)</th>"
      "<th class=\"l\">smallest memory without an OOM</th><th>vs trace</th><th>peak reserved" +
      std::string(limited ? " under the limit" : "") + "</th>" +
      (limited ? "<th>OOMs under the limit</th>" : "") +
      "<th>device calls</th><th>probes</th></tr>\n";
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    const AdviseCandidate& c = a.ranked[i];
    const bool rec = i == a.recommended, is_base = i == a.baseline;
    const char* colour = rec ? "#0a7d32" : is_base ? "#d62728" : "#1f77b4";
    s += std::string("<tr") + (rec ? " class=\"best\"" : "") + "><td>" + std::to_string(i + 1) +
         "</td><td class=\"l cfg\">" + html_escape(c.label()) +
         (rec ? " <b>&larr; recommended</b>" : "") + (is_base && !rec ? " <i>(the trace's own)</i>" : "") +
         "</td><td class=\"bar-cell\">" + bar(c.min.min_limit, largest, colour) +
         in_unit(c.min.min_limit, unit) + "</td><td>" + change(c.min.min_limit, base) + "</td><td>" +
         in_unit(c.peak_reserved, unit) + "</td>" +
         (limited ? "<td>" + std::to_string(c.ooms) + "</td>" : "") + "<td>" +
         std::to_string(c.device_allocs + c.device_frees) + "</td><td>" +
         std::to_string(c.min.probes) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

}  // namespace

std::string render_advise_html(const AdviseReport& report) {
  const Advice& a = report.advice;
  const LabInput& in = report.input;
  size_t largest = a.largest_bytes;
  for (const WhatIfResult* r : report.details) largest = std::max(largest, r->peak_reserved);
  const ByteUnit unit = unit_for(largest);

  std::string s = head("cachealloc advise: " + in.name);
  s += "<h1>Will it fit, and with which settings? " + html_escape(in.name) + "</h1>\n";
  s += trace_line(in, report.memory_limit, unit);
  s += std::string("<div class=\"answer") + (a.nothing_helps ? " none" : "") + "\">";
  s += "<div class=\"line\">PYTORCH_CUDA_ALLOC_CONF=" +
       html_escape(a.env_line.empty() ? "''" : a.env_line) + "</div>\n";
  s += "<p>" + html_escape(a.headline) + "</p><p>" + html_escape(a.reason) + "</p>";
  for (const std::string& note : a.notes) s += "<p class=\"sub\">" + html_escape(note) + "</p>";
  s += "</div>\n";
  s += "<h2>Every config searched, best first</h2>\n" + configs_table(report, unit);
  s += "<p class=\"sub\">Ranked by the smallest memory limit under which the run needs no OOM "
       "(exact: the limit runs clean, one byte less does not), then by OOMs under the given "
       "limit; among configs within 1 % of the best minimum, the fewest OOMs and then the "
       "fewest device calls (segment reservations and releases, page mappings and unmappings "
       "under expandable segments) come first. " +
       std::to_string(a.configs_run) + " configs, " + std::to_string(a.probes) + " replays, " +
       html_fmt("%.2f", a.seconds) + " s on " + std::to_string(a.threads) + " threads.</p>\n";
  if (!report.details.empty()) {
    std::vector<ChartLine> lines;
    for (size_t i = 0; i < report.details.size(); ++i)
      lines.push_back(ChartLine{report.detail_labels[i], report.details[i]});
    s += "<h2>Reserved and allocated memory";
    s += report.memory_limit ? " under the limit</h2>\n" : "</h2>\n";
    s += "<div class=\"legend\">";
    for (size_t i = 0; i < lines.size(); ++i)
      s += "<span><i class=\"sw\" style=\"background:" + std::string(html_colour(i)) + "\"></i>" +
           html_escape(lines[i].label) + "</span>";
    s += "<span class=\"key\">&#9473; reserved &nbsp; &#9549; allocated &nbsp; &#9679; reserved "
         "peak</span></div>\n";
    s += memory_chart(lines, in.stream.requests.size(), report.memory_limit, unit);
    s += "<h2>At the reserved peak</h2>\n";
    for (size_t i = 0; i < report.details.size(); ++i)
      if (report.details[i]->peak)
        s += peak_section(*report.details[i], report.detail_labels[i], i, unit, in.stream);
  }
  return s + "</body></html>\n";
}

std::string build_advise_page(const LabInput& in, std::optional<size_t> memory_limit,
                              bool address_hints, SegmentPlacement placement,
                              const Advice& a) {
  std::vector<size_t> rows{a.baseline};
  if (a.recommended != a.baseline) rows.push_back(a.recommended);
  std::vector<WhatIfResult> results;
  std::vector<std::string> labels;
  for (size_t row : rows) {
    WhatIfOptions w;
    w.memory_limit = memory_limit;
    w.address_hints = address_hints;
    w.placement = placement;
    w.peak_blocks = 10;
    results.push_back(run_whatif(in.stream, a.ranked[row].config, w));
    labels.push_back((row == a.baseline ? "trace's own: " : "recommended: ") + a.ranked[row].label());
  }
  AdviseReport report{in, memory_limit, a, {}, labels};
  for (const WhatIfResult& r : results) report.details.push_back(&r);
  return render_advise_html(report);
}

std::string render_min_memory_html(const LabInput& input, const std::vector<MinMemoryResult>& results) {
  size_t largest = 1;
  for (const MinMemoryResult& r : results)
    largest = std::max({largest, r.min_limit, r.peak_reserved_unlimited});
  const ByteUnit unit = unit_for(largest);
  size_t most = 1;
  for (const MinMemoryResult& r : results) most = std::max(most, r.min_limit);
  std::string s = head("cachealloc min-memory: " + input.name);
  s += "<h1>Smallest memory without an OOM: " + html_escape(input.name) + "</h1>\n";
  s += trace_line(input, std::nullopt, unit);
  if (!results.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < results.size(); ++i)
      if (results[i].min_limit < results[best].min_limit) best = i;
    s += "<div class=\"answer\"><p>" + html_escape(results[best].config.label()) + " needs the least: " +
         in_unit(results[best].min_limit, unit) + " (" + std::to_string(results[best].min_limit) +
         " bytes).</p></div>\n";
  }
  s += "<table><tr><th class=\"l\">config</th><th class=\"l\">smallest memory without an OOM</th>"
       "<th>bytes</th><th>vs first</th><th>peak reserved, no limit</th><th>probes</th></tr>\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const MinMemoryResult& r = results[i];
    s += "<tr><td class=\"l\">" + html_escape(r.config.label()) + "</td><td class=\"bar-cell\">" +
         bar(r.min_limit, most, html_colour(i)) + in_unit(r.min_limit, unit) + "</td><td>" +
         std::to_string(r.min_limit) + (r.byte_refined ? "&dagger;" : "") + "</td><td>" +
         change(r.min_limit, results.front().min_limit) + "</td><td>" +
         in_unit(r.peak_reserved_unlimited, unit) + "</td><td>" + std::to_string(r.probes) +
         "</td></tr>\n";
  }
  s += "</table>\n<p class=\"sub\">Each minimum is exact: the limit runs clean, one byte less "
       "does not. &dagger;: the last 2 MiB unit was bisected byte by byte (a garbage-collection "
       "threshold is a fraction of the exact limit).</p>\n";
  return s + "</body></html>\n";
}

}  // namespace cachealloc
