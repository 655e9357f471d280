// Implements the CLI output helpers.
#include "cli/output.h"

#include <iostream>

#include "absl/time/time.h"
#include "api/convert.h"
#include "common/status.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil::cli {

int Fail(std::string_view command, const absl::Status& status) {
  return Fail(command, MessageOf(status));
}

int Fail(std::string_view command, std::string_view message) {
  std::cerr << "vigil" << (command.empty() ? "" : " ") << command << ": " << message << std::endl;
  return kExitError;
}

std::string_view StatusName(v1::ValueStatus status) { return ValueStatusName(FromProto(status)); }

std::string FormatValue(const v1::FieldValue& value) {
  std::string text;
  switch (value.status()) {
    case v1::VALUE_STATUS_OK:
      switch (value.value_case()) {
        case v1::FieldValue::kIntValue:
          text = std::to_string(value.int_value());
          break;
        case v1::FieldValue::kDoubleValue:
          text = fmt::format("{:.3f}", value.double_value());
          break;
        case v1::FieldValue::kStringValue:
          text = value.string_value();
          break;
        default:
          text = "?";
      }
      break;
    case v1::VALUE_STATUS_NOT_SUPPORTED:
      text = "N/A";
      break;
    case v1::VALUE_STATUS_GPU_LOST:
      text = "LOST";
      break;
    case v1::VALUE_STATUS_TIMEOUT:
      text = "TIMEOUT";
      break;
    case v1::VALUE_STATUS_NO_DATA:
      text = "-";
      break;
    default:
      text = "ERR";
  }
  if (value.injected()) text += "*";
  return text;
}

std::string FormatTimeUs(int64_t unix_us) {
  if (unix_us == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(unix_us),
                          absl::UTCTimeZone());
}

nlohmann::json ValueJson(const v1::FieldValue& value) {
  const FieldInfo* field = FindField(value.field_id());
  nlohmann::json json = {
      {"gpu", value.gpu()},
      {"field_id", value.field_id()},
      {"field", field != nullptr ? std::string(field->name) : std::to_string(value.field_id())},
      {"status", std::string(StatusName(value.status()))},
      {"value", nullptr},
      {"injected", value.injected()},
      {"sample_seq", value.sample_seq()},
      {"timestamp_us", value.timestamp_us()},
  };
  if (value.has_gpu_instance()) json["gpu_instance"] = value.gpu_instance();
  if (value.status() == v1::VALUE_STATUS_OK) {
    switch (value.value_case()) {
      case v1::FieldValue::kIntValue:
        json["value"] = value.int_value();
        break;
      case v1::FieldValue::kDoubleValue:
        json["value"] = value.double_value();
        break;
      case v1::FieldValue::kStringValue:
        json["value"] = value.string_value();
        break;
      default:
        break;
    }
  }
  return json;
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size());
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out << line << '\n';
  }
}

}  // namespace vigil::cli
