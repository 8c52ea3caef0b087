#include "lab/cli/html_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "allocator/base/call_context.h"

namespace cachealloc {
namespace {

// Distinguishable on white and for common colour-vision deficiencies.
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                    "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
const char* colour_at(size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

std::string escape_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string percent(double fraction) { return fmt("%.1f%%", 100.0 * fraction); }

// A step of 1, 2 or 5 x 10^k that cuts [0, span] into about `parts`.
double nice_step(double span, int parts) {
  const double raw = span / parts;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * magnitude >= raw) return m * magnitude;
  return 10.0 * magnitude;
}

std::string count_label(double v) {
  if (v >= 1e6) return fmt("%gM", v / 1e6);
  if (v >= 1e3) return fmt("%gk", v / 1e3);
  return fmt("%g", v);
}

// Chart geometry, in SVG pixels.
constexpr double kWidth = 1180, kHeight = 430;
constexpr double kLeft = 84, kRight = 24, kTop = 16, kBottom = 52;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

}  // namespace

std::string memory_chart(const std::vector<ChartLine>& lines, size_t request_count,
                         std::optional<size_t> limit, const ByteUnit& byte_unit) {
  const size_t requests = std::max<size_t>(1, request_count);
  double top = 1;
  for (const ChartLine& l : lines) top = std::max(top, static_cast<double>(l.result->peak_reserved));
  if (limit) top = std::max(top, static_cast<double>(*limit));
  // Y axis steps in the page's unit.
  const double unit = byte_unit.bytes;
  const char* unit_name = byte_unit.name;
  const double y_step = nice_step(top * 1.05 / unit, 5) * unit;
  const double y_max = std::ceil(top * 1.05 / y_step) * y_step;
  auto x = [&](double request) { return kLeft + kPlotW * request / static_cast<double>(requests); };
  auto y = [&](double bytes) { return kTop + kPlotH * (1.0 - bytes / y_max); };

  std::string s = "<svg class=\"chart\" width=\"" + fmt("%g", kWidth) +
                  "\" height=\"" + fmt("%g", kHeight) + "\" viewBox=\"0 0 " + fmt("%g", kWidth) +
                  " " + fmt("%g", kHeight) + "\" role=\"img\" aria-label=\"memory over time\">\n";
  s += "<rect x=\"" + fmt("%g", kLeft) + "\" y=\"" + fmt("%g", kTop) + "\" width=\"" +
       fmt("%g", kPlotW) + "\" height=\"" + fmt("%g", kPlotH) + "\" fill=\"#fbfbfc\" stroke=\"#ccc\"/>\n";
  for (double v = 0; v <= y_max + y_step / 2; v += y_step) {
    s += "<line x1=\"" + fmt("%g", kLeft) + "\" x2=\"" + fmt("%g", kLeft + kPlotW) + "\" y1=\"" +
         fmt("%.1f", y(v)) + "\" y2=\"" + fmt("%.1f", y(v)) + "\" stroke=\"#e4e4e4\"/>";
    s += "<text x=\"" + fmt("%g", kLeft - 8) + "\" y=\"" + fmt("%.1f", y(v) + 4) +
         "\" font-size=\"12\" text-anchor=\"end\" fill=\"#444\">" + fmt("%g", v / unit) + " " +
         unit_name + "</text>\n";
  }
  const double x_step = nice_step(static_cast<double>(requests), 8);
  for (double v = 0; v <= static_cast<double>(requests); v += x_step) {
    s += "<line x1=\"" + fmt("%.1f", x(v)) + "\" x2=\"" + fmt("%.1f", x(v)) + "\" y1=\"" +
         fmt("%g", kTop) + "\" y2=\"" + fmt("%g", kTop + kPlotH) + "\" stroke=\"#eeeeee\"/>";
    s += "<text x=\"" + fmt("%.1f", x(v)) + "\" y=\"" + fmt("%g", kTop + kPlotH + 18) +
         "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#444\">" + count_label(v) + "</text>\n";
  }
  s += "<text x=\"" + fmt("%g", kLeft + kPlotW / 2) + "\" y=\"" + fmt("%g", kHeight - 10) +
       "\" font-size=\"13\" text-anchor=\"middle\" fill=\"#222\">requests replayed</text>\n";

  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& series = lines[i].result->series;
    // Each bucket drawn as a flat step at its maximum, so peaks keep their height.
    auto path = [&](bool reserved) {
      std::string d;
      for (size_t b = 0; b < series.size(); ++b) {
        const double end = b + 1 < series.size() ? static_cast<double>(series[b + 1].first_request)
                                                 : static_cast<double>(requests);
        const double v = static_cast<double>(reserved ? series[b].reserved : series[b].allocated);
        d += (b == 0 ? "M" : "L") + fmt("%.1f", x(static_cast<double>(series[b].first_request))) +
             "," + fmt("%.1f", y(v)) + "L" + fmt("%.1f", x(end)) + "," + fmt("%.1f", y(v));
      }
      return d;
    };
    s += "<path d=\"" + path(false) + "\" fill=\"none\" stroke=\"" + colour_at(i) +
         "\" stroke-width=\"1.4\" stroke-dasharray=\"5 3\" stroke-opacity=\"0.8\"/>\n";
    s += "<path d=\"" + path(true) + "\" fill=\"none\" stroke=\"" + colour_at(i) +
         "\" stroke-width=\"2\" stroke-linejoin=\"round\"/>\n";
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const WhatIfResult& r = *lines[i].result;
    s += "<circle cx=\"" + fmt("%.1f", x(static_cast<double>(r.peak_request))) + "\" cy=\"" +
         fmt("%.1f", y(static_cast<double>(r.peak_reserved))) + "\" r=\"4.5\" fill=\"" + colour_at(i) +
         "\" stroke=\"#fff\" stroke-width=\"1.5\"><title>" + escape_text(lines[i].label) +
         ": peak reserved " + in_unit(r.peak_reserved, byte_unit) + " at request " +
         std::to_string(r.peak_request) + "</title></circle>\n";
  }
  if (limit) {
    const double ly = y(static_cast<double>(*limit));
    s += "<line x1=\"" + fmt("%g", kLeft) + "\" x2=\"" + fmt("%g", kLeft + kPlotW) + "\" y1=\"" +
         fmt("%.1f", ly) + "\" y2=\"" + fmt("%.1f", ly) +
         "\" stroke=\"#c00\" stroke-width=\"1.2\" stroke-dasharray=\"8 4\"/>";
    s += "<text x=\"" + fmt("%g", kLeft + kPlotW - 6) + "\" y=\"" + fmt("%.1f", ly - 6) +
         "\" font-size=\"12\" text-anchor=\"end\" fill=\"#c00\">memory limit " +
         in_unit(*limit, byte_unit) + "</text>\n";
  }
  return s + "</svg>\n";
}


namespace {

// Segments with the most unused bytes, to one scale (the largest segment
// at the peak is full width): grey is reserved but not allocated, colour
// is allocated.
std::string segment_map(const PeakMoment& peak, const char* fill, const ByteUnit& unit) {
  constexpr size_t kShown = 32;
  constexpr double kBarW = 420, kRowH = 11, kGap = 4, kLabelW = 190;
  std::vector<const SegmentUse*> order;
  for (const SegmentUse& s : peak.segments) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const SegmentUse* a, const SegmentUse* b) {
    return a->bytes - a->allocated_bytes > b->bytes - b->allocated_bytes;
  });
  if (order.size() > kShown) order.resize(kShown);
  size_t largest = 1;
  for (const SegmentUse& s : peak.segments) largest = std::max(largest, s.bytes);
  const double scale = kBarW / static_cast<double>(largest);  // pixels per byte
  const double height = static_cast<double>(order.size()) * (kRowH + kGap) + 4;
  std::string s = "<svg width=\"" + fmt("%g", kBarW + kLabelW) +
                  "\" height=\"" + fmt("%g", height) + "\">\n";
  for (size_t row = 0; row < order.size(); ++row) {
    const SegmentUse& seg = *order[row];
    const double top = 2 + static_cast<double>(row) * (kRowH + kGap);
    const double bar = std::max(2.0, scale * static_cast<double>(seg.bytes));
    s += "<rect x=\"0\" y=\"" + fmt("%g", top) + "\" width=\"" + fmt("%.2f", bar) + "\" height=\"" +
         fmt("%g", kRowH) + "\" fill=\"#dcdcdc\"/>";
    for (const auto& [offset, bytes] : seg.allocated_runs) {
      const double x0 = scale * static_cast<double>(offset);
      const double w = std::max(0.6, scale * static_cast<double>(bytes));
      s += "<rect x=\"" + fmt("%.2f", x0) + "\" y=\"" + fmt("%g", top) + "\" width=\"" +
           fmt("%.2f", w) + "\" height=\"" + fmt("%g", kRowH) + "\" fill=\"" + fill + "\"/>";
    }
    s += "<text x=\"" + fmt("%g", kBarW + 8) + "\" y=\"" + fmt("%g", top + kRowH - 1) +
         "\" font-size=\"11\" fill=\"#333\">" + in_unit(seg.bytes, unit) + (seg.is_small ? " small" : "") +
         ", " + percent(static_cast<double>(seg.allocated_bytes) / static_cast<double>(seg.bytes)) +
         " used</text>\n";
  }
  return s + "</svg>\n";
}

// The recorded stack of an allocation: its innermost frames.
std::string frames_cell(const CallContext* context) {
  if (!context || context->frames.empty()) return "";
  constexpr size_t kFrames = 6;
  std::string s;
  for (size_t i = 0; i < std::min(kFrames, context->frames.size()); ++i) {
    const StackFrame& f = context->frames[i];
    s += (i ? "<br>" : "") + escape_text(f.name.str()) + " <span class=\"dim\">" +
         escape_text(f.filename.str()) + ":" + std::to_string(f.line) + "</span>";
  }
  if (context->frames.size() > kFrames)
    s += "<br><span class=\"dim\">&hellip; " + std::to_string(context->frames.size() - kFrames) +
         " more</span>";
  return s;
}

}  // namespace

std::string peak_section(const WhatIfResult& r, const std::string& label, size_t index,
                         const ByteUnit& unit, const RequestStream& stream) {
  const PeakMoment& p = *r.peak;
  size_t unused = 0;
  for (const SegmentUse& s : p.segments) unused += s.bytes - s.allocated_bytes;
  std::string s = "<h3 id=\"peak-" + std::to_string(index + 1) + "\"><i class=\"sw\" style=\"background:" +
                  std::string(colour_at(index)) + "\"></i>" +
                  escape_text(label) + "</h3>\n<p class=\"sub\">request " +
                  std::to_string(p.request_index) + ": reserved " + in_unit(p.reserved, unit) +
                  ", allocated " + in_unit(p.allocated, unit) + ", " +
                  std::to_string(p.segments.size()) + " segments, " +
                  std::to_string(p.live_blocks) + " live blocks, " + in_unit(unused, unit) +
                  " reserved but unallocated</p>\n<div class=\"cols\"><div><div class=\"cap\">" +
                  (p.segments.size() > 32 ? "the 32 segments with the most unused bytes (of " +
                                                std::to_string(p.segments.size()) + ")"
                                          : std::string("every segment, most unused bytes first")) +
                  "; to scale, grey = reserved, not allocated</div>\n" + segment_map(p, colour_at(index), unit) +
                  "</div><div><div class=\"cap\">largest live blocks</div>\n"
                  "<table><tr><th>#</th><th>size</th><th>requested (B)</th><th>stream</th>"
                  "<th>since request</th><th class=\"l\">address</th>" +
                  (stream.contexts.empty() ? "" : "<th class=\"l\">allocated at</th>") + "</tr>\n";
  for (size_t i = 0; i < p.largest_blocks.size(); ++i) {
    const LiveBlock& b = p.largest_blocks[i];
    char addr[32];
    std::snprintf(addr, sizeof addr, "0x%zx", static_cast<size_t>(b.address));
    s += "<tr><td>" + std::to_string(i + 1) + "</td><td>" + in_unit(b.size, unit) + "</td><td>" +
         std::to_string(b.requested) + "</td><td>" + std::to_string(b.stream) + "</td><td>" +
         std::to_string(b.allocated_at) + "</td><td class=\"l mono\">" + addr + "</td>" +
         (stream.contexts.empty()
              ? ""
              : "<td class=\"l frames\">" + frames_cell(context_of(stream, b.allocated_at)) + "</td>") +
         "</tr>\n";
  }
  return s + "</table></div></div>\n";
}


const char* html_style() {
  return
    "body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;"
    "margin:22px 30px;color:#1d1d1f;background:#fff}"
    "h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px}"
    "h3{font-size:15px;margin:20px 0 4px}.sub{color:#555;font-size:13px;margin:2px 0 8px}"
    "table{border-collapse:collapse;font-size:13px}"
    "th,td{padding:4px 9px;text-align:right;border-bottom:1px solid #e3e3e3;white-space:nowrap}"
    "th{background:#f3f4f6;font-weight:600;white-space:normal;vertical-align:bottom}.l{text-align:left}.mono{font-family:monospace}"
    ".sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;"
    "vertical-align:-1px}.best{font-weight:700;color:#0a7d32}"
    ".legend{display:flex;flex-wrap:wrap;gap:6px 22px;font-size:13px;margin:4px 0 6px}"
    ".legend .key{color:#555}.cols{display:flex;gap:36px;align-items:flex-start;flex-wrap:wrap}"
    ".cap{font-size:12px;color:#555;margin-bottom:4px}svg text{font-family:inherit}"
    "svg.chart{max-width:100%;height:auto}.dim{color:#777}"
    ".frames{font-family:monospace;font-size:11px;white-space:nowrap}"
    ".answer{border:2px solid #0a7d32;border-radius:6px;padding:10px 16px;margin:10px 0 14px;"
    "background:#f3faf5}.answer.none{border-color:#8a6d00;background:#fffbea}"
    ".answer .line{font-family:monospace;font-size:15px;font-weight:700}"
    ".bar{display:inline-block;height:10px;background:#1f77b4;vertical-align:middle}"
    "td.bar-cell{text-align:left;min-width:200px}"
    "td.cfg{white-space:normal;max-width:460px;overflow-wrap:anywhere}";
}


const char* html_colour(size_t i) { return colour_at(i); }
std::string html_escape(const std::string& s) { return escape_text(s); }
std::string html_fmt(const char* format, double v) { return fmt(format, v); }

}  // namespace cachealloc
