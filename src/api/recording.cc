// Implements the flight recording's file format (recording.h).
#include "api/recording.h"

#include <zlib.h>

#include <cmath>

#include "absl/time/time.h"
#include "common/gzip.h"
#include "common/strings.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kMagic = "VIGILREC";
// A recording's body is a few MiB of JSON at most (17 minutes of every field of one GPU); far
// more than that is not a recording of ours.
constexpr size_t kMaxBodyBytes = size_t{1} << 30;

uint32_t Crc32(std::string_view data) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

// JSON has no NaN or infinities: those travel as strings.
Json DoubleJson(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

Json SampleJson(const RecordingSample& sample, FieldType type) {
  Json row = {sample.seq, sample.time_us, static_cast<int>(sample.value.status),
              sample.value.injected ? 1 : 0};
  if (sample.value.ok()) {
    switch (type) {
      case FieldType::kInt64:
        row.push_back(sample.value.as_int());
        break;
      case FieldType::kDouble:
        row.push_back(DoubleJson(sample.value.as_double()));
        break;
      case FieldType::kString:
        row.push_back(sample.value.as_string());
        break;
    }
  }
  return row;
}

absl::Status Bad(std::string_view what) {
  return absl::DataLossError(fmt::format("not a valid flight recording: {}", what));
}

absl::StatusOr<RecordingSample> ParseSample(const Json& row, FieldType type) {
  if (!row.is_array() || row.size() < 4 || !row[0].is_number_unsigned() ||
      !row[1].is_number_integer() || !row[2].is_number_integer() || !row[3].is_number_integer()) {
    return Bad("a sample is not [seq, time, status, injected, value]");
  }
  RecordingSample sample;
  sample.seq = row[0].get<uint64_t>();
  sample.time_us = row[1].get<int64_t>();
  const int status = row[2].get<int>();
  if (status < 0 || status > static_cast<int>(ValueStatus::kNoData)) {
    return Bad("a sample's status is out of range");
  }
  sample.value.status = static_cast<ValueStatus>(status);
  sample.value.injected = row[3].get<int>() != 0;
  if (!sample.value.ok()) {
    sample.value.value = int64_t{0};
    return sample;
  }
  if (row.size() != 5) return Bad("an ok sample without its value");
  const Json& value = row[4];
  switch (type) {
    case FieldType::kInt64:
      if (!value.is_number_integer()) return Bad("an integer field's value is not an integer");
      sample.value.value = value.get<int64_t>();
      break;
    case FieldType::kDouble:
      if (value.is_number()) {
        sample.value.value = value.get<double>();
      } else if (value == "nan") {
        sample.value.value = std::nan("");
      } else if (value == "inf" || value == "-inf") {
        sample.value.value = value == "inf" ? HUGE_VAL : -HUGE_VAL;
      } else {
        return Bad("a double field's value is not a number");
      }
      break;
    case FieldType::kString:
      if (!value.is_string()) return Bad("a string field's value is not a string");
      sample.value.value = value.get<std::string>();
      break;
  }
  return sample;
}

std::string_view TypeName(FieldType type) {
  switch (type) {
    case FieldType::kInt64:
      return "int64";
    case FieldType::kDouble:
      return "double";
    case FieldType::kString:
      return "string";
  }
  return "?";
}

}  // namespace

std::string RecordingTimeId(int64_t time_us) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", absl::FromUnixMicros(time_us), absl::UTCTimeZone());
}

std::string EncodeRecording(const Recording& r) {
  Json incidents = Json::array();
  for (const RecordingIncident& i : r.incidents) {
    incidents.push_back({{"system", i.system},
                         {"status", i.status},
                         {"code", i.code},
                         {"message", i.message},
                         {"action", i.action},
                         {"first_seen_us", i.first_seen_us},
                         {"last_seen_us", i.last_seen_us},
                         {"count", i.count},
                         {"injected", i.injected}});
  }
  const std::string header = Json{
      {"format", "vigil-flight-recording"},
      {"version", kRecordingVersion},
      {"id", r.id},
      {"node", r.node_name},
      {"engine",
       {{"instance_id", r.engine_instance}, {"version", r.engine_version}, {"backend", r.backend}}},
      {"gpu",
       {{"index", r.gpu},
        {"uuid", r.uuid},
        {"name", r.gpu_name},
        {"pci_bus_id", r.pci_bus_id},
        {"serial", r.serial}}},
      {"trigger",
       {{"seq", r.trigger_seq}, {"time_us", r.trigger_time_us}, {"summary", r.trigger_summary}}},
      {"window", {{"start_us", r.window_start_us}, {"end_us", r.window_end_us}}},
      {"complete", r.complete},
      {"written_us", r.written_us},
      {"incidents", incidents}}.dump();
  Json series = Json::array();
  for (const RecordingSeries& s : r.series) {
    Json samples = Json::array();
    for (const RecordingSample& sample : s.samples) samples.push_back(SampleJson(sample, s.type));
    series.push_back(
        {{"field", s.field}, {"name", s.name}, {"type", TypeName(s.type)}, {"samples", samples}});
  }
  const std::string body = Gzip(Json{{"series", series}}.dump(), 6);
  return fmt::format("{} {} {} {} {}\n", kMagic, kRecordingVersion, header.size(), Crc32(header),
                     body.size()) +
         header + body;
}

absl::StatusOr<Recording> DecodeRecording(std::string_view bytes, bool header_only) {
  const size_t newline = bytes.find('\n');
  if (!bytes.starts_with(kMagic) || newline == std::string_view::npos || newline > 200) {
    return absl::InvalidArgumentError("not a flight recording (no VIGILREC line at its start)");
  }
  const std::vector<std::string_view> parts = Split(bytes.substr(0, newline), ' ');
  std::optional<uint64_t> numbers[4];
  for (size_t i = 0; i < 4 && parts.size() == 5; ++i) numbers[i] = ParseUint64(parts[i + 1]);
  if (parts.size() != 5 || !numbers[0] || !numbers[1] || !numbers[2] || !numbers[3]) {
    return Bad("its first line is not 'VIGILREC VERSION HEADER CRC BODY'");
  }
  const uint64_t version = *numbers[0], header_size = *numbers[1], header_crc = *numbers[2],
                 body_size = *numbers[3];
  if (version != kRecordingVersion) {
    return absl::InvalidArgumentError(fmt::format(
        "a flight recording of format version {}; this vigil reads version {}: use the vigil "
        "that wrote it",
        version, kRecordingVersion));
  }
  const std::string_view rest = bytes.substr(newline + 1);
  if (rest.size() != header_size + body_size) {
    return Bad(fmt::format("{} bytes after its first line, {} announced", rest.size(),
                           header_size + body_size));
  }
  const std::string_view header_text = rest.substr(0, header_size);
  if (Crc32(header_text) != header_crc) return Bad("its header does not match its checksum");
  const Json header = Json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object() || !header.contains("format") ||
      header["format"] != "vigil-flight-recording") {
    return Bad("its header is not a recording's");
  }
  Recording r;
  try {
    r.id = header.at("id").get<std::string>();
    r.node_name = header.at("node").get<std::string>();
    const Json& engine = header.at("engine");
    r.engine_instance = engine.at("instance_id").get<std::string>();
    r.engine_version = engine.at("version").get<std::string>();
    r.backend = engine.at("backend").get<std::string>();
    const Json& gpu = header.at("gpu");
    r.gpu = gpu.at("index").get<uint32_t>();
    r.uuid = gpu.at("uuid").get<std::string>();
    r.gpu_name = gpu.at("name").get<std::string>();
    r.pci_bus_id = gpu.at("pci_bus_id").get<std::string>();
    r.serial = gpu.at("serial").get<std::string>();
    const Json& trigger = header.at("trigger");
    r.trigger_seq = trigger.at("seq").get<uint64_t>();
    r.trigger_time_us = trigger.at("time_us").get<int64_t>();
    r.trigger_summary = trigger.at("summary").get<std::string>();
    r.window_start_us = header.at("window").at("start_us").get<int64_t>();
    r.window_end_us = header.at("window").at("end_us").get<int64_t>();
    r.complete = header.at("complete").get<bool>();
    r.written_us = header.at("written_us").get<int64_t>();
    for (const Json& i : header.at("incidents")) {
      r.incidents.push_back({.system = i.at("system").get<std::string>(),
                             .status = i.at("status").get<std::string>(),
                             .code = i.at("code").get<std::string>(),
                             .message = i.at("message").get<std::string>(),
                             .action = i.at("action").get<std::string>(),
                             .first_seen_us = i.at("first_seen_us").get<int64_t>(),
                             .last_seen_us = i.at("last_seen_us").get<int64_t>(),
                             .count = i.at("count").get<uint64_t>(),
                             .injected = i.at("injected").get<bool>()});
    }
  } catch (const Json::exception& error) {
    return Bad(fmt::format("its header lacks a part: {}", error.what()));
  }
  if (header_only) return r;
  auto body_text = Gunzip(rest.substr(header_size), kMaxBodyBytes);
  if (!body_text.ok())
    return Bad(fmt::format("its body: {}", std::string(body_text.status().message())));
  const Json body = Json::parse(*body_text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("series") || !body["series"].is_array()) {
    return Bad("its body has no series");
  }
  for (const Json& s : body["series"]) {
    if (!s.is_object() || !s.contains("field") || !s["field"].is_number_unsigned() ||
        !s.contains("samples") || !s["samples"].is_array()) {
      return Bad("a series without its field or samples");
    }
    // (value() would throw on a name or type of another JSON type: a hand-made file.)
    if ((s.contains("name") && !s["name"].is_string()) || !s.contains("type") ||
        !s["type"].is_string()) {
      return Bad("a series whose name or type is not a string");
    }
    RecordingSeries series;
    series.field = s["field"].get<FieldId>();
    series.name = s.value("name", "");
    const std::string type = s.value("type", "");
    if (type == "int64") {
      series.type = FieldType::kInt64;
    } else if (type == "double") {
      series.type = FieldType::kDouble;
    } else if (type == "string") {
      series.type = FieldType::kString;
    } else {
      return Bad(fmt::format("series of field {} has an unknown type '{}'", series.field, type));
    }
    for (const Json& row : s["samples"]) {
      auto sample = ParseSample(row, series.type);
      if (!sample.ok()) return sample.status();
      series.samples.push_back(std::move(*sample));
    }
    r.series.push_back(std::move(series));
  }
  return r;
}

}  // namespace vigil
