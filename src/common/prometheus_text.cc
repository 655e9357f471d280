// Implements the Prometheus text writer.
#include "common/prometheus_text.h"

#include <iterator>

#include "fmt/format.h"

namespace vigil {

void AppendLabel(std::string* out, std::string_view name, std::string_view value) {
  out->push_back(',');
  out->append(name);
  out->append("=\"");
  for (char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '"') {
      out->append("\\\"");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  AppendLabel(&out, "", value);  // ,="..."
  return out.substr(3, out.size() - 4);
}

void PrometheusText::Family(std::string_view name, MetricType type, std::string_view help) {
  fmt::format_to(std::back_inserter(*out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                 type == MetricType::kCounter ? "counter" : "gauge");
}

void PrometheusText::BeginSample(std::string_view name, const MetricLabels& labels) {
  out_->append(name);
  if (labels.empty()) {
    out_->push_back(' ');
    return;
  }
  const size_t open = out_->size();
  for (const auto& [label, value] : labels) AppendLabel(out_, label, value);
  (*out_)[open] = '{';  // the first label's comma
  out_->append("} ");
}

void PrometheusText::Sample(std::string_view name, const MetricLabels& labels, int64_t value) {
  BeginSample(name, labels);
  fmt::format_to(std::back_inserter(*out_), "{}\n", value);
}

void PrometheusText::Sample(std::string_view name, const MetricLabels& labels, uint64_t value) {
  BeginSample(name, labels);
  fmt::format_to(std::back_inserter(*out_), "{}\n", value);
}

void PrometheusText::Sample(std::string_view name, const MetricLabels& labels, double value,
                            int decimals) {
  BeginSample(name, labels);
  fmt::format_to(std::back_inserter(*out_), "{:.{}f}\n", value, decimals);
}

}  // namespace vigil
