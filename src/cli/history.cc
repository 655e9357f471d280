// `vigil history` (a GPU's samples, from the live engine or from a flight recording — also a
// recording file read with no engine running, after the reboot) and `vigil recordings` (the
// flight recordings in the state dir). Output: a table, CSV (--csv) or JSON (--json).
#include <algorithm>
#include <cmath>
#include <iostream>

#include "api/convert.h"
#include "api/recording.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/duration.h"
#include "common/env.h"
#include "common/status.h"
#include "fields/catalogue.h"
#include "fmt/format.h"
#include "report/report.h"

namespace vigil::cli {
namespace {

constexpr std::string_view kDefaultRecordingsDir = "/var/lib/vigil/recordings";

struct HistoryFlags {
  ClientFlags client;
  int64_t gpu = -1;
  std::vector<std::string> fields;
  std::string since = "10m";
  std::string recording;       // an id in --dir
  std::string recording_file;  // a path
  std::string dir = std::string(kDefaultRecordingsDir);
  bool csv = false;
};

struct RecordingsFlags {
  std::string dir = std::string(kDefaultRecordingsDir);
  bool json = false;
};

absl::StatusOr<Recording> ReadRecordingFile(const std::string& path, bool header_only) {
  auto bytes = Env::Default()->ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  auto recording = DecodeRecording(*bytes, header_only);
  if (!recording.ok()) return WithContext(recording.status(), path);
  return recording;
}

std::string SampleText(const FieldValue& value) {
  if (!value.ok()) return std::string(ValueStatusName(value.status));
  std::string text;
  if (std::holds_alternative<int64_t>(value.value)) {
    text = std::to_string(value.as_int());
  } else if (std::holds_alternative<double>(value.value)) {
    text = fmt::format("{}", value.as_double());
  } else {
    text = value.as_string();
  }
  return value.injected ? text + "*" : text;
}

std::string CsvQuote(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The fields asked for by name or ID; empty: all.
absl::StatusOr<std::vector<FieldId>> ResolveFieldFlags(const std::vector<std::string>& names) {
  std::vector<FieldId> ids;
  for (const std::string& name : names) {
    auto field = ResolveField(name);
    if (!field.ok()) return WithContext(field.status(), "--field");
    ids.push_back((*field)->id);
  }
  return ids;
}

// Prints series of one GPU: rows of (time, seq, field, value).
void Print(const std::vector<RecordingSeries>& series, const HistoryFlags& flags,
           const nlohmann::json& about) {
  if (flags.client.json) {
    nlohmann::json out = about;
    out["series"] = nlohmann::json::array();
    for (const RecordingSeries& s : series) {
      nlohmann::json samples = nlohmann::json::array();
      for (const RecordingSample& sample : s.samples) {
        nlohmann::json row = {{"time", FormatTimeUs(sample.time_us)},
                              {"seq", sample.seq},
                              {"status", ValueStatusName(sample.value.status)},
                              {"injected", sample.value.injected}};
        if (sample.value.ok()) {
          if (std::holds_alternative<int64_t>(sample.value.value)) {
            row["value"] = sample.value.as_int();
          } else if (std::holds_alternative<double>(sample.value.value)) {
            row["value"] = std::isfinite(sample.value.as_double())
                               ? nlohmann::json(sample.value.as_double())
                               : nlohmann::json(fmt::format("{}", sample.value.as_double()));
          } else {
            row["value"] = sample.value.as_string();
          }
        } else {
          row["value"] = nullptr;
        }
        samples.push_back(std::move(row));
      }
      out["series"].push_back({{"field_id", s.field}, {"field", s.name}, {"samples", samples}});
    }
    std::cout << out.dump() << std::endl;
    return;
  }
  if (flags.csv) {
    std::cout << "time,seq,field_id,field,status,injected,value\n";
    for (const RecordingSeries& s : series) {
      for (const RecordingSample& sample : s.samples) {
        std::cout << FormatTimeUs(sample.time_us) << ',' << sample.seq << ',' << s.field << ','
                  << s.name << ',' << ValueStatusName(sample.value.status) << ','
                  << (sample.value.injected ? 1 : 0) << ','
                  << (sample.value.ok() ? CsvQuote(SampleText(FieldValue{ValueStatus::kOk, false,
                                                                         sample.value.value}))
                                        : "")
                  << '\n';
      }
    }
    return;
  }
  Table table({"TIME", "SEQ", "FIELD", "VALUE"});
  for (const RecordingSeries& s : series) {
    for (const RecordingSample& sample : s.samples) {
      table.AddRow({FormatTimeUs(sample.time_us), std::to_string(sample.seq), s.name,
                    SampleText(sample.value)});
    }
  }
  table.Print(std::cout);
}

// Where the samples come from: a recording (by id in --dir, or a file), or the live engine (a
// recording made now of its last --since: its history, the GPU's incidents, the identities).
absl::StatusOr<Recording> LoadSource(const HistoryFlags& flags) {
  if (!flags.recording.empty() || !flags.recording_file.empty()) {
    if (!flags.recording.empty() && !flags.recording_file.empty()) {
      return absl::InvalidArgumentError("--recording and --recording-file: choose one");
    }
    const std::string path =
        !flags.recording_file.empty()
            ? flags.recording_file
            : fmt::format("{}/{}{}", flags.dir, flags.recording, kRecordingSuffix);
    auto recording = ReadRecordingFile(path, /*header_only=*/false);
    if (!recording.ok()) return recording.status();
    if (flags.gpu >= 0 && static_cast<uint32_t>(flags.gpu) != recording->gpu) {
      return absl::InvalidArgumentError(fmt::format("recording {} is of GPU {}, not GPU {}",
                                                    recording->id, recording->gpu, flags.gpu));
    }
    return recording;
  }
  if (flags.gpu < 0) {
    return absl::InvalidArgumentError(
        "--gpu N is required (or --recording ID / --recording-file PATH)");
  }
  auto since = ParseDuration(flags.since);
  if (!since.ok()) return WithContext(since.status(), "--since");
  if (*since <= absl::ZeroDuration()) return absl::InvalidArgumentError("--since must be positive");
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return client.status();
  auto info = (*client)->GetEngineInfo();
  if (!info.ok()) return info.status();
  auto gpus = (*client)->ListGpus();
  if (!gpus.ok()) return gpus.status();
  Recording r;
  bool found = false;
  for (const v1::Gpu& gpu : gpus->gpus()) {
    if (gpu.index() != static_cast<uint32_t>(flags.gpu)) continue;
    found = true;
    r.gpu = gpu.index();
    r.uuid = gpu.uuid();
    r.gpu_name = gpu.name();
    r.pci_bus_id = gpu.pci_bus_id();
    r.serial = gpu.serial();
  }
  if (!found) {
    return absl::InvalidArgumentError(
        fmt::format("--gpu {}: the engine has {} GPU(s)", flags.gpu, gpus->gpus_size()));
  }
  // The engine's time, not this machine's: the window ends at its latest tick.
  const int64_t now_us =
      info->seq_time_us() != 0 ? info->seq_time_us() : absl::ToUnixMicros(absl::Now());
  r.node_name = info->node_name();
  r.engine_instance = info->instance_id();
  r.engine_version = info->version();
  r.backend = info->backend();
  r.id = fmt::format("{}-gpu{}-live", RecordingTimeId(now_us), r.gpu);
  r.window_start_us = now_us - absl::ToInt64Microseconds(*since);
  r.window_end_us = now_us;
  r.trigger_time_us = now_us;
  r.complete = true;
  v1::GetHealthRequest health_request;
  health_request.add_gpus(r.gpu);
  auto health = (*client)->GetHealth(health_request);
  if (!health.ok()) return health.status();
  for (const v1::GpuHealth& gpu : health->gpus()) {
    if (gpu.gpu() != r.gpu) continue;
    r.trigger_summary = fmt::format("GPU {} is {} now", r.gpu, HealthStatusText(gpu.status()));
    for (const v1::SystemHealth& system : gpu.systems()) {
      for (const v1::HealthIncident& i : system.incidents()) {
        r.incidents.push_back({.system = i.system(),
                               .status = std::string(HealthStatusText(i.status())),
                               .code = i.code(),
                               .message = i.message(),
                               .action = i.action(),
                               .first_seen_us = i.first_seen_us(),
                               .last_seen_us = i.last_seen_us(),
                               .count = i.count(),
                               .injected = i.injected()});
        // The trigger: when the first FAIL came, if one did.
        if (i.status() == v1::HEALTH_STATUS_FAIL &&
            (r.trigger_time_us == now_us || i.first_seen_us() < r.trigger_time_us)) {
          r.trigger_time_us = i.first_seen_us();
        }
      }
    }
  }
  v1::GetHistoryRequest request;
  request.add_gpus(r.gpu);
  request.set_start_time_us(r.window_start_us);
  request.set_end_time_us(now_us + 1'000'000);
  auto response = (*client)->GetHistory(request);
  if (!response.ok()) return response.status();
  for (const v1::Series& s : response->series()) {
    const FieldInfo* field = FindField(s.field_id());
    RecordingSeries& out = r.series.emplace_back();
    out.field = s.field_id();
    out.name = field != nullptr ? std::string(field->name) : std::to_string(s.field_id());
    out.type = field != nullptr ? field->type : FieldType::kInt64;
    for (const v1::Sample& sample : s.samples()) {
      FieldValue value{FromProto(sample.status()), sample.injected(), int64_t{0}};
      if (value.ok()) {
        switch (sample.value_case()) {
          case v1::Sample::kIntValue:
            value.value = sample.int_value();
            break;
          case v1::Sample::kDoubleValue:
            value.value = sample.double_value();
            break;
          case v1::Sample::kStringValue:
            value.value = sample.string_value();
            break;
          case v1::Sample::VALUE_NOT_SET:
            break;
        }
      }
      out.samples.push_back({sample.seq(), sample.timestamp_us(), std::move(value)});
    }
  }
  return r;
}

int RunHistory(const HistoryFlags& flags) {
  if (flags.csv && flags.client.json) return Fail("history", "--csv and --json: choose one");
  auto field_ids = ResolveFieldFlags(flags.fields);
  if (!field_ids.ok()) return Fail("history", field_ids.status());
  auto recording = LoadSource(flags);
  if (!recording.ok()) return Fail("history", recording.status());
  std::vector<RecordingSeries> series;
  for (RecordingSeries& s : recording->series) {
    if (field_ids->empty() ||
        std::find(field_ids->begin(), field_ids->end(), s.field) != field_ids->end()) {
      series.push_back(std::move(s));
    }
  }
  Print(series, flags,
        {{"recording", recording->id},
         {"gpu", recording->gpu},
         {"uuid", recording->uuid},
         {"node", recording->node_name},
         {"engine", recording->engine_instance},
         {"complete", recording->complete},
         {"trigger", FormatTimeUs(recording->trigger_time_us)}});
  return kExitOk;
}

int RunReport(const HistoryFlags& flags, const std::string& output) {
  if (output.empty() && !flags.client.json) {
    return Fail("report", "-o FILE.html is required (or --json for the data on stdout)");
  }
  auto recording = LoadSource(flags);
  if (!recording.ok()) return Fail("report", recording.status());
  if (flags.client.json && output.empty()) {
    std::cout << ReportJson(*recording).dump() << std::endl;
    return kExitOk;
  }
  const std::string text =
      flags.client.json ? ReportJson(*recording).dump() + "\n" : RenderReportHtml(*recording);
  if (absl::Status written = WriteFileAtomically(Env::Default(), output, text); !written.ok()) {
    return Fail("report", WithContext(written, "-o"));
  }
  std::cerr << "vigil report: wrote " << output << " (GPU " << recording->gpu << ", "
            << ChartsFor(*recording).size() << " charts, " << recording->incidents.size()
            << " incident(s))" << std::endl;
  return kExitOk;
}

int RunRecordings(const RecordingsFlags& flags) {
  auto names = Env::Default()->ListDir(flags.dir);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) {
      if (flags.json) {
        std::cout << "[]" << std::endl;
      } else {
        std::cout << "no recordings in " << flags.dir << std::endl;
      }
      return kExitOk;
    }
    return Fail("recordings", names.status());
  }
  nlohmann::json list = nlohmann::json::array();
  Table table({"ID", "GPU", "UUID", "TRIGGER", "COMPLETE", "WHY"});
  int problems = 0;
  for (const std::string& name : *names) {
    if (!name.ends_with(kRecordingSuffix)) continue;
    auto recording = ReadRecordingFile(flags.dir + "/" + name, /*header_only=*/true);
    if (!recording.ok()) {
      std::cerr << "vigil recordings: " << MessageOf(recording.status()) << std::endl;
      ++problems;
      continue;
    }
    list.push_back({{"id", recording->id},
                    {"gpu", recording->gpu},
                    {"uuid", recording->uuid},
                    {"node", recording->node_name},
                    {"trigger", FormatTimeUs(recording->trigger_time_us)},
                    {"window_start", FormatTimeUs(recording->window_start_us)},
                    {"window_end", FormatTimeUs(recording->window_end_us)},
                    {"complete", recording->complete},
                    {"summary", recording->trigger_summary},
                    {"incidents", recording->incidents.size()},
                    {"path", flags.dir + "/" + name}});
    table.AddRow({recording->id, std::to_string(recording->gpu), recording->uuid,
                  FormatTimeUs(recording->trigger_time_us), recording->complete ? "yes" : "no",
                  recording->trigger_summary});
  }
  if (flags.json) {
    std::cout << list.dump() << std::endl;
  } else if (list.empty()) {
    std::cout << "no recordings in " << flags.dir << std::endl;
  } else {
    table.Print(std::cout);
  }
  return problems == 0 ? kExitOk : kExitError;
}

}  // namespace

CommandRunner AddHistoryCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "history", "A GPU's samples: from the engine (--since), or from a flight recording");
  auto flags = std::make_shared<HistoryFlags>();
  AddClientFlags(command, &flags->client);
  command->add_option("--gpu", flags->gpu, "The GPU's index")->check(CLI::Range(0, 1023));
  command->add_option("--field", flags->fields, "A field by DCGM name or ID (repeatable; all)");
  command->add_option("--since", flags->since, "How far back, from the engine (e.g. 10m, 2h)")
      ->capture_default_str();
  command->add_option("--recording", flags->recording, "A flight recording's id (in --dir)");
  command->add_option("--recording-file", flags->recording_file,
                      "A flight recording's file (no engine needed)");
  command->add_option("--dir", flags->dir, "Where the recordings are")->capture_default_str();
  command->add_flag("--csv", flags->csv, "CSV: time,seq,field_id,field,status,injected,value");
  return [flags] { return RunHistory(*flags); };
}

CommandRunner AddReportCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "report",
      "An incident report of a GPU (one HTML file, inline charts): from a flight "
      "recording, or the engine's last --since");
  auto flags = std::make_shared<HistoryFlags>();
  auto output = std::make_shared<std::string>();
  AddClientFlags(command, &flags->client);
  command->add_option("--gpu", flags->gpu, "The GPU's index (from the engine)")
      ->check(CLI::Range(0, 1023));
  command->add_option("--since", flags->since, "How far back, from the engine (e.g. 30m)")
      ->capture_default_str();
  command->add_option("--recording", flags->recording, "A flight recording's id (in --dir)");
  command->add_option("--recording-file", flags->recording_file, "A flight recording's file");
  command->add_option("--dir", flags->dir, "Where the recordings are")->capture_default_str();
  command->add_option("-o,--output", *output, "The HTML file to write");
  return [flags, output] { return RunReport(*flags, *output); };
}

CommandRunner AddRecordingsCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "recordings", "The flight recordings in the state dir (no engine needed)");
  auto flags = std::make_shared<RecordingsFlags>();
  command->add_option("--dir", flags->dir, "Where the recordings are")->capture_default_str();
  command->add_flag("--json", flags->json, "JSON output");
  return [flags] { return RunRecordings(*flags); };
}

}  // namespace vigil::cli
