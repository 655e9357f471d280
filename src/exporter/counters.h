// The exporter's counters file: which fields become which Prometheus metrics, in
// dcgm-exporter's CSV format (`field name, prometheus type, help`, `#` comments), so existing
// counters files keep working. The built-in default is dcgm-exporter's default counters list.
// Parsing is a pure function; a Counters value is immutable and shared between threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fields/catalogue.h"

namespace vigil {

// Metrics the exporter computes itself (dcgm-exporter's DCGM_EXP_*), in its order.
enum class ExporterMetric { kXidErrorsCount, kClockEventsCount, kGpuHealthStatus };

struct Counter {
  std::string name;                        // as written: the metric's name
  const FieldInfo* field = nullptr;        // a DCGM field, or
  std::optional<ExporterMetric> exporter;  // an exporter-owned metric
  std::string type;                        // gauge, counter, histogram, summary, label
  std::string help;
  int line = 0;
  bool is_label() const { return type == "label"; }
};

struct Counters {
  std::vector<Counter> counters;      // sorted: DCGM fields by ID, then exporter metrics
  std::vector<std::string> warnings;  // lines skipped (e.g. DCGM_EXP_P2P_STATUS), for the log

  // Every DCGM field the engine must send (value and label rows).
  std::vector<FieldId> FieldIds() const;
  bool Has(ExporterMetric metric) const;
};

// Parses a counters file. InvalidArgument "SOURCE:LINE: problem" for a malformed line, an
// unknown field, a string field used as a value, or an unknown type.
absl::StatusOr<Counters> ParseCounters(std::string_view csv, std::string_view source);

// dcgm-exporter's default counters list, in its CSV format.
std::string_view DefaultCountersCsv();

}  // namespace vigil
