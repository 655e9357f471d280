// Writes Prometheus' text exposition format (0.0.4): a family's HELP and TYPE lines, then its
// samples, with label values escaped as the format requires (backslash, double quote, newline).
// Every /metrics page of Vigil — the exporter's GPU series and its own, the health check's, the
// remediator's — is written through this, so the escaping and the layout live in one place.
// Not thread-safe: a writer belongs to the one rendering that owns its string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vigil {

enum class MetricType { kCounter, kGauge };

// A sample's labels, in the order written.
using MetricLabels = std::vector<std::pair<std::string_view, std::string_view>>;

// Appends ,NAME="VALUE" with VALUE escaped (for label text built once and reused per sample).
void AppendLabel(std::string* out, std::string_view name, std::string_view value);
// VALUE escaped for a label value.
std::string EscapeLabelValue(std::string_view value);

class PrometheusText {
 public:
  // Appends to *out, which must outlive the writer.
  explicit PrometheusText(std::string* out) : out_(out) {}

  // Starts a family: its HELP and TYPE lines.
  void Family(std::string_view name, MetricType type, std::string_view help);
  // A sample NAME{LABELS} VALUE; `labels` may be empty.
  void Sample(std::string_view name, const MetricLabels& labels, int64_t value);
  void Sample(std::string_view name, const MetricLabels& labels, uint64_t value);
  void Sample(std::string_view name, const MetricLabels& labels, int value) {
    Sample(name, labels, static_cast<int64_t>(value));
  }
  // A double with up to `decimals` places ("0.250"), as the seconds of a duration are written.
  void Sample(std::string_view name, const MetricLabels& labels, double value, int decimals);
  // A family of one sample without labels.
  template <typename T>
  void Single(std::string_view name, MetricType type, std::string_view help, T value) {
    Family(name, type, help);
    Sample(name, {}, value);
  }
  void Single(std::string_view name, MetricType type, std::string_view help, double value,
              int decimals) {
    Family(name, type, help);
    Sample(name, {}, value, decimals);
  }

 private:
  void BeginSample(std::string_view name, const MetricLabels& labels);

  std::string* const out_;
};

}  // namespace vigil
