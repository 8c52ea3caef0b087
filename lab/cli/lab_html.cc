#include "lab/cli/lab_html.h"

#include <algorithm>
#include <string>

#include "lab/byte_unit.h"
#include "lab/cli/html_parts.h"

namespace cachealloc {
namespace {

std::string percent(double fraction) { return html_fmt("%.1f%%", 100.0 * fraction); }

// Configs whose replays came out the same (every count, peak and series
// point) are drawn and listed once, as "A = B": drawn apart they would hide
// each other.
struct Group {
  const WhatIfResult* result;  // the first of them
  std::string label;           // every label, joined by " = "
};

bool same_replay(const WhatIfResult& a, const WhatIfResult& b) {
  if (a.peak_reserved != b.peak_reserved || a.peak_allocated != b.peak_allocated ||
      a.peak_request != b.peak_request || a.device_allocs != b.device_allocs ||
      a.device_frees != b.device_frees || a.retries != b.retries || a.ooms != b.ooms ||
      a.final_reserved != b.final_reserved || a.series.size() != b.series.size())
    return false;
  for (size_t i = 0; i < a.series.size(); ++i)
    if (a.series[i].reserved != b.series[i].reserved || a.series[i].allocated != b.series[i].allocated)
      return false;
  return true;
}

std::vector<Group> groups_of(const std::vector<WhatIfResult>& results) {
  std::vector<Group> out;
  for (const WhatIfResult& r : results) {
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const Group& g) { return same_replay(*g.result, r); });
    if (same == out.end()) out.push_back(Group{&r, r.config.label()});
    else same->label += " = " + r.config.label();
  }
  return out;
}

// The row marked best: under a memory limit the fewest OOMs first (a
// config that OOMs less beats one that reserves less), then the lowest
// peak reserved. Every config compare runs is one a PyTorch user can set.
size_t best_row(const LabReport& report, const std::vector<Group>& groups) {
  size_t best = 0;
  for (size_t i = 1; i < groups.size(); ++i) {
    const WhatIfResult& r = *groups[i].result;
    const WhatIfResult& b = *groups[best].result;
    const size_t ooms = report.memory_limit ? r.ooms : 0;
    const size_t best_ooms = report.memory_limit ? b.ooms : 0;
    if (ooms < best_ooms || (ooms == best_ooms && r.peak_reserved < b.peak_reserved)) best = i;
  }
  return best;
}

std::string legend(const std::vector<Group>& groups) {
  std::string s = "<div class=\"legend\">";
  for (size_t i = 0; i < groups.size(); ++i)
    s += "<span><i class=\"sw\" style=\"background:" + std::string(html_colour(i)) + "\"></i>" +
         html_escape(groups[i].label) + "</span>";
  return s + "<span class=\"key\">━ reserved &nbsp; ╍ allocated &nbsp; ● reserved peak</span></div>\n";
}

std::string summary_table(const LabReport& report, const std::vector<Group>& groups,
                          const ByteUnit& unit) {
  const size_t best = best_row(report, groups);
  std::string s =
      "<table><tr><th class=\"l\">config</th><th class=\"l\">policy</th><th>peak reserved</th>"
      "<th>vs first</th><th>peak allocated</th><th>fragmentation at peak</th>"
      "<th>device allocs</th><th>device frees</th><th>retries</th><th>OOMs</th>"
      "<th>recorded OOMs now served</th><th>replay time</th></tr>\n";
  const double base = groups.empty() ? 0.0 : static_cast<double>(groups.front().result->peak_reserved);
  for (size_t i = 0; i < groups.size(); ++i) {
    const WhatIfResult& r = *groups[i].result;
    const double change = base > 0 ? static_cast<double>(r.peak_reserved) / base - 1.0 : 0.0;
    s += "<tr><td class=\"l\"><i class=\"sw\" style=\"background:" + std::string(html_colour(i)) +
         "\"></i>" + html_escape(groups[i].label) + "</td><td class=\"l\">" +
         r.config.policy + "</td><td" +
         (i == best && groups.size() > 1 ? " class=\"best\"" : "") + ">" +
         in_unit(r.peak_reserved, unit) + "</td><td>" +
         (i == 0 ? "" : html_fmt("%+.1f%%", 100.0 * change)) + "</td><td>" +
         in_unit(r.peak_allocated, unit) + "</td><td>" + percent(r.fragmentation_at_peak) +
         "</td><td>" + std::to_string(r.device_allocs) + "</td><td>" +
         std::to_string(r.device_frees) + "</td><td>" + std::to_string(r.retries) + "</td><td>" +
         std::to_string(r.ooms) + "</td><td>" + std::to_string(r.recorded_ooms_succeeded) +
         "</td><td>" + lab_seconds(r.seconds) + "</td></tr>\n";
  }
  return s + "</table>\n";
}

}  // namespace

std::string render_lab_html(const LabReport& report) {
  const RequestStream& st = report.input.stream;
  const std::vector<Group> groups = groups_of(report.results);
  size_t largest = report.memory_limit.value_or(0);
  std::vector<ChartLine> lines;
  for (const Group& g : groups) {
    largest = std::max(largest, g.result->peak_reserved);
    lines.push_back(ChartLine{g.label, g.result});
  }
  const ByteUnit unit = unit_for(largest);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
                  "cachealloc fragmentation lab: " + html_escape(report.input.name) +
                  "</title>\n<style>" + html_style() + "</style></head><body>\n";
  s += "<h1>Fragmentation lab: " + html_escape(report.input.name) + "</h1>\n";
  s += "<p class=\"sub\">" + html_escape(report.input.path) + " &middot; device " +
       std::to_string(st.device) + " &middot; " + std::to_string(st.recorded_events) +
       " events &rarr; " + std::to_string(st.requests.size()) + " requests &middot; " +
       std::to_string(st.empty_cache_calls) + " empty_cache() calls &middot; " +
       std::to_string(st.recorded_ooms) + " recorded OOMs &middot; memory limit " +
       (report.memory_limit ? in_unit(*report.memory_limit, unit) : std::string("none")) + "</p>\n";
  s += "<h2>Reserved and allocated memory</h2>\n" + legend(groups) +
       memory_chart(lines, st.requests.size(), report.memory_limit, unit);
  s += "<h2>Comparison</h2>\n" + summary_table(report, groups, unit);
  s += "<p class=\"sub\">Fragmentation at peak = 1 &minus; allocated / reserved at the request where "
       "reserved first reached its peak. Each replay feeds the trace's requests (sizes, streams, "
       "frees, empty_cache() calls) to a fresh engine on a simulated device; the allocator's own "
       "decisions are its own.</p>\n";
  bool any_expandable = false;
  for (const auto& r : report.results) any_expandable |= r.config.config.expandable_segments;
  if (any_expandable)
    s += "<p class=\"sub\">Under expandable_segments:True (native's own, as the engine runs it) "
         "device allocs/frees count page mappings/unmappings.</p>\n";
  bool any_peak = false;
  for (const auto& r : report.results) any_peak |= r.peak.has_value();
  if (any_peak) {
    s += "<h2>At the reserved peak</h2>\n";
    for (size_t i = 0; i < groups.size(); ++i)
      if (groups[i].result->peak) s += peak_section(*groups[i].result, groups[i].label, i, unit, st);
  }
  return s + "</body></html>\n";
}

}  // namespace cachealloc
