// Implements the incident report: chart choice, inline SVG charts and the HTML page.
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "absl/time/time.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil {
namespace {

// Every chart a report may have, with the systems it is evidence for (empty: every report).
const std::vector<ReportChart>& AllCharts() {
  static const auto* charts = new std::vector<ReportChart>{
      {"Power and its limits",
       "W",
       {fid::kPowerUsage, fid::kPowerMgmtLimit, fid::kEnforcedPowerLimit},
       {}},
      {"Temperatures", "°C", {fid::kGpuTemp, fid::kMemoryTemp}, {}},
      {"Clocks", "MHz", {fid::kSmClock, fid::kMemClock}, {}},
      {"Clock event reasons (bitmask)", "", {fid::kClocksEventReasons}, {"power", "thermal"}},
      {"Throttling time",
       "µs",
       {fid::kPowerViolation, fid::kThermalViolation},
       {"power", "thermal"}},
      {"ECC errors",
       "",
       {fid::kEccSbeVolTotal, fid::kEccDbeVolTotal, fid::kEccSbeAggTotal, fid::kEccDbeAggTotal},
       {"memory"}},
      {"Retired pages and remapped rows",
       "",
       {fid::kRetiredSbe, fid::kRetiredDbe, fid::kRetiredPending, fid::kUncorrectableRemappedRows,
        fid::kCorrectableRemappedRows, fid::kRowRemapFailure},
       {"memory"}},
      {"PCIe replays", "", {fid::kPcieReplayCounter}, {"pcie"}},
      {"NVLink errors",
       "",
       {fid::kNvlinkCrcFlitErrors, fid::kNvlinkCrcDataErrors, fid::kNvlinkReplayErrors,
        fid::kNvlinkRecoveryErrors},
       {"nvlink"}},
      {"XID", "", {fid::kXidErrors}, {"driver"}},
      {"Utilisation", "%", {fid::kGpuUtil, fid::kMemCopyUtil}, {"driver"}},
  };
  return *charts;
}

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c",
                                   "#9467bd", "#8c564b", "#e377c2"};

std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Time(int64_t us) {
  if (us == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMicros(us), absl::UTCTimeZone());
}

const RecordingSeries* SeriesOf(const Recording& recording, FieldId field) {
  for (const RecordingSeries& series : recording.series) {
    if (series.field == field) return &series;
  }
  return nullptr;
}

bool HasNumbers(const RecordingSeries* series) {
  if (series == nullptr || series->type == FieldType::kString) return false;
  return std::any_of(series->samples.begin(), series->samples.end(), [](const auto& sample) {
    return sample.value.ok() && std::isfinite(sample.value.numeric());
  });
}

std::set<std::string> FailingSystems(const Recording& recording) {
  std::set<std::string> systems;
  for (const RecordingIncident& incident : recording.incidents) {
    if (incident.status == "FAIL" || incident.status == "WARN") systems.insert(incident.system);
  }
  return systems;
}

// One chart as SVG: a path per field (broken where a sample is missing or not ok), the trigger
// as a red line, the value range and the window's ends as labels.
std::string ChartSvg(const Recording& recording, const ReportChart& chart) {
  constexpr double kWidth = 900, kHeight = 220, kLeft = 70, kRight = 20, kTop = 20, kBottom = 30;
  const double t0 = static_cast<double>(recording.window_start_us);
  const double t1 =
      static_cast<double>(std::max(recording.window_end_us, recording.window_start_us + 1));
  double low = std::numeric_limits<double>::infinity(), high = -low;
  for (FieldId field : chart.fields) {
    const RecordingSeries* series = SeriesOf(recording, field);
    if (!HasNumbers(series)) continue;
    for (const RecordingSample& sample : series->samples) {
      if (!sample.value.ok() || !std::isfinite(sample.value.numeric())) continue;
      low = std::min(low, sample.value.numeric());
      high = std::max(high, sample.value.numeric());
    }
  }
  if (!(high >= low)) return "";
  if (high == low) {
    // A constant series: a band around it. Relative to the value, since past 2^53 adding 1
    // changes nothing and the band would have no height to divide by.
    const double pad = std::max(1.0, std::abs(low) * 1e-6);
    high += pad;
    low -= low == 0 ? 0 : pad;
  }
  // A margin, so that a line at the extreme (a limit) is not hidden by the frame.
  const double margin = (high - low) * 0.05;
  high += margin;
  low = low >= 0 && low - margin < 0 ? 0 : low - margin;
  auto x = [&](int64_t us) {
    return kLeft + (static_cast<double>(us) - t0) / (t1 - t0) * (kWidth - kLeft - kRight);
  };
  auto y = [&](double value) {
    return kTop + (high - value) / (high - low) * (kHeight - kTop - kBottom);
  };
  std::string svg = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"{2}\">\n"
      "<rect x=\"{3}\" y=\"{4}\" width=\"{5}\" height=\"{6}\" class=\"plot\"/>\n",
      kWidth, kHeight, Escape(chart.title), kLeft, kTop, kWidth - kLeft - kRight,
      kHeight - kTop - kBottom);
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{:.6g}</text>\n"
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{:.6g}</text>\n"
      "<text x=\"{}\" y=\"{}\" class=\"axis\">{}</text>\n"
      "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>\n",
      kLeft - 6, kTop + 10, high, kLeft - 6, kHeight - kBottom, low, kLeft, kHeight - 8,
      Time(recording.window_start_us), kWidth - kRight, kHeight - 8, Time(recording.window_end_us));
  size_t color = 0;
  std::string legend;
  for (FieldId field : chart.fields) {
    const RecordingSeries* series = SeriesOf(recording, field);
    if (!HasNumbers(series)) continue;
    std::string d;
    bool pen_down = false;
    for (const RecordingSample& sample : series->samples) {
      if (!sample.value.ok() || !std::isfinite(sample.value.numeric())) {
        pen_down = false;
        continue;
      }
      d += fmt::format("{}{:.1f} {:.1f} ", pen_down ? "L" : "M", x(sample.time_us),
                       y(sample.value.numeric()));
      pen_down = true;
    }
    const char* stroke = kColors[color++ % std::size(kColors)];
    svg += fmt::format("<path class=\"series\" data-field=\"{}\" d=\"{}\" stroke=\"{}\"/>\n", field,
                       d, stroke);
    legend += fmt::format("<span class=\"key\" style=\"color:{}\">&#9632; {}</span> ", stroke,
                          Escape(series->name));
  }
  // The moment the verdict turned FAIL.
  const double trigger = x(recording.trigger_time_us);
  svg += fmt::format(
      "<line class=\"fault\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/>\n"
      "<text class=\"fault-label\" x=\"{3:.1f}\" y=\"{4}\">FAIL</text>\n</svg>\n",
      trigger, kTop, kHeight - kBottom, trigger + 4, kTop + 12);
  return fmt::format(
      "<figure><figcaption>{}{}</figcaption>\n{}<div class=\"legend\">{}</div>"
      "</figure>\n",
      Escape(chart.title), chart.unit.empty() ? "" : " (" + chart.unit + ")", svg, legend);
}

}  // namespace

std::vector<ReportChart> ChartsFor(const Recording& recording) {
  const std::set<std::string> failing = FailingSystems(recording);
  std::vector<ReportChart> first, rest;
  for (const ReportChart& chart : AllCharts()) {
    const bool has_data = std::any_of(chart.fields.begin(), chart.fields.end(), [&](FieldId f) {
      return HasNumbers(SeriesOf(recording, f));
    });
    if (!has_data) continue;
    const bool evidence = std::any_of(chart.systems.begin(), chart.systems.end(),
                                      [&](const std::string& s) { return failing.contains(s); });
    if (evidence) {
      first.push_back(chart);
    } else if (chart.systems.empty()) {
      rest.push_back(chart);
    }
  }
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

std::string RenderReportHtml(const Recording& r) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>GPU {} on {}: incident report {}</title>\n"
      "<style>\n"
      "body{{font-family:sans-serif;margin:24px;color:#222}} h1{{font-size:20px}}\n"
      "table{{border-collapse:collapse;margin:8px 0 16px}} td,th{{border:1px solid #ccc;"
      "padding:3px 8px;text-align:left;font-size:13px;vertical-align:top}}\n"
      ".plot{{fill:#fafafa;stroke:#ccc}} .series{{fill:none;stroke-width:1.5}}\n"
      ".fault{{stroke:#d62728;stroke-width:2;stroke-dasharray:4 3}} .fault-label{{fill:#d62728;"
      "font-size:12px}}\n.axis{{font-size:11px;fill:#555}} figure{{margin:16px 0}} "
      "figcaption{{font-weight:bold;margin-bottom:4px}} .legend{{font-size:12px}}\n"
      ".FAIL{{color:#d62728;font-weight:bold}} .WARN{{color:#c77c00}}\n"
      "</style></head><body>\n",
      r.gpu, Escape(r.node_name), Escape(r.id));
  html += fmt::format("<h1>GPU {} ({}) on node {} turned FAIL at {}</h1>\n<p>{}</p>\n", r.gpu,
                      Escape(r.uuid), Escape(r.node_name), Time(r.trigger_time_us),
                      Escape(r.trigger_summary));
  html += "<h2>GPU</h2>\n<table>\n";
  const std::pair<const char*, std::string> identity[] = {
      {"Model", r.gpu_name},
      {"UUID", r.uuid},
      {"Serial", r.serial},
      {"PCI bus id", r.pci_bus_id},
      {"Node", r.node_name},
      {"Engine", fmt::format("vigil {} ({} backend), instance {}", r.engine_version, r.backend,
                             r.engine_instance)},
      {"Window", fmt::format("{} to {}{}", Time(r.window_start_us), Time(r.window_end_us),
                             r.complete ? "" : " (incomplete: the engine stopped before its end)")},
      {"Recording", r.id}};
  for (const auto& [name, value] : identity) {
    html += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", name, Escape(value));
  }
  html += "</table>\n<h2>Incidents</h2>\n";
  if (r.incidents.empty()) {
    html += "<p>None recorded.</p>\n";
  } else {
    html +=
        "<table><tr><th>System</th><th>Status</th><th>Code</th><th>What happened</th>"
        "<th>What to do</th><th>First seen</th><th>Last seen</th><th>Count</th></tr>\n";
    for (const RecordingIncident& i : r.incidents) {
      html += fmt::format(
          "<tr><td>{}</td><td class=\"{}\">{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td></tr>\n",
          Escape(i.system), Escape(i.status), Escape(i.status), i.injected ? " (injected)" : "",
          Escape(i.code), Escape(i.message), Escape(i.action), Time(i.first_seen_us),
          Time(i.last_seen_us), i.count);
    }
    html += "</table>\n";
  }
  // The timeline: the window, every incident's first and last sighting, the trigger.
  std::multimap<int64_t, std::string> timeline = {
      {r.window_start_us, "the recording starts"},
      {r.trigger_time_us, "the verdict turns FAIL: " + r.trigger_summary},
      {r.window_end_us, r.complete ? "the recording ends" : "the recording was to end"}};
  for (const RecordingIncident& i : r.incidents) {
    timeline.emplace(i.first_seen_us,
                     fmt::format("{} {} first seen: {}", i.system, i.status, i.message));
  }
  html += "<h2>Timeline</h2>\n<table>\n";
  for (const auto& [time, what] : timeline) {
    html += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", Time(time), Escape(what));
  }
  html += "</table>\n<h2>Telemetry</h2>\n";
  for (const ReportChart& chart : ChartsFor(r)) html += ChartSvg(r, chart);
  html += "</body></html>\n";
  return html;
}

nlohmann::json ReportJson(const Recording& r) {
  nlohmann::json incidents = nlohmann::json::array();
  for (const RecordingIncident& i : r.incidents) {
    incidents.push_back({{"system", i.system},
                         {"status", i.status},
                         {"code", i.code},
                         {"message", i.message},
                         {"action", i.action},
                         {"first_seen", Time(i.first_seen_us)},
                         {"last_seen", Time(i.last_seen_us)},
                         {"count", i.count},
                         {"injected", i.injected}});
  }
  nlohmann::json charts = nlohmann::json::array();
  for (const ReportChart& chart : ChartsFor(r)) {
    nlohmann::json series = nlohmann::json::array();
    for (FieldId field : chart.fields) {
      const RecordingSeries* s = SeriesOf(r, field);
      if (!HasNumbers(s)) continue;
      nlohmann::json samples = nlohmann::json::array();
      for (const RecordingSample& sample : s->samples) {
        nlohmann::json value = nullptr;
        if (sample.value.ok() && std::isfinite(sample.value.numeric())) {
          value = sample.value.numeric();
        }
        samples.push_back({{"time_us", sample.time_us}, {"value", value}});
      }
      series.push_back({{"field_id", field}, {"field", s->name}, {"samples", samples}});
    }
    charts.push_back({{"title", chart.title}, {"unit", chart.unit}, {"series", series}});
  }
  return {
      {"recording", r.id},
      {"node", r.node_name},
      {"gpu",
       {{"index", r.gpu},
        {"uuid", r.uuid},
        {"name", r.gpu_name},
        {"serial", r.serial},
        {"pci_bus_id", r.pci_bus_id}}},
      {"engine",
       {{"instance_id", r.engine_instance}, {"version", r.engine_version}, {"backend", r.backend}}},
      {"trigger", {{"time", Time(r.trigger_time_us)}, {"summary", r.trigger_summary}}},
      {"window", {{"start", Time(r.window_start_us)}, {"end", Time(r.window_end_us)}}},
      {"complete", r.complete},
      {"incidents", incidents},
      {"charts", charts}};
}

}  // namespace vigil
