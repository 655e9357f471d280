// `vigil dmon`: a live table of chosen fields per GPU (and MIG GPU instance), one block per engine
// tick, like
// `dcgmi dmon` and `nvidia-smi dmon`; with --json, one JSON object per tick. Follows the engine
// across restarts (says so on stderr) instead of exiting.
#include <algorithm>
#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "cli/output.h"
#include "common/status.h"
#include "common/strings.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil::cli {
namespace {

struct DmonFlags {
  ClientFlags client;
  std::string fields;
  std::string gpus;
  int64_t delay_ms = 1000;
  int64_t count = 0;
};

absl::StatusOr<std::vector<uint32_t>> ParseGpuList(std::string_view list) {
  std::vector<uint32_t> gpus;
  for (std::string_view item : Split(list, ',')) {
    const std::optional<uint64_t> gpu = ParseUint64(Trim(item));
    if (!gpu || *gpu > 1023) {
      return absl::InvalidArgumentError(
          fmt::format("-i '{}': expected GPU indexes separated by commas, e.g. 0,1,3", list));
    }
    gpus.push_back(static_cast<uint32_t>(*gpu));
  }
  return gpus;
}

void PrintHeader(const std::vector<FieldId>& fields, const std::vector<size_t>& widths) {
  std::string names = "#Entity ", units = "ID      ";
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldInfo* field = FindField(fields[i]);
    names += fmt::format("  {:>{}}", field->short_name, widths[i]);
    units += fmt::format("  {:>{}}", field->unit, widths[i]);
  }
  std::cout << names << '\n' << units << '\n';
}

int RunDmon(const DmonFlags& flags) {
  auto fields = ResolveFieldList(flags.fields);
  if (!fields.ok()) return Fail("dmon", WithContext(fields.status(), "-e"));
  absl::StatusOr<std::vector<uint32_t>> gpus = std::vector<uint32_t>{};
  if (!flags.gpus.empty()) {
    gpus = ParseGpuList(flags.gpus);
    if (!gpus.ok()) return Fail("dmon", gpus.status());
  }
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("dmon", client.status());
  // Fail fast, with the reason, when the engine is not there at all.
  auto info = (*client)->GetEngineInfo();
  if (!info.ok()) return Fail("dmon", info.status());
  const absl::Duration tick = absl::Microseconds(info->tick_interval_us());

  v1::SubscribeRequest request;
  for (uint32_t gpu : *gpus) request.add_gpus(gpu);
  for (FieldId field : *fields) request.add_field_ids(field);
  request.set_include_mig_instances(true);  // MIG GPU instances get rows of their own
  auto subscription = (*client)->Subscribe(request);

  std::vector<size_t> widths;
  for (FieldId id : *fields) {
    const FieldInfo* field = FindField(id);
    widths.push_back(std::max<size_t>({8, field->short_name.size(), field->unit.size()}));
  }
  const absl::Duration delay = absl::Milliseconds(flags.delay_ms);
  int64_t printed = 0;
  bool header_due = !flags.client.json;
  bool disconnected = false;
  int64_t last_printed_us = 0;
  while (flags.count == 0 || printed < flags.count) {
    TickSubscription::Event event = subscription->Next();
    if (event.kind == TickSubscription::Event::kRejected) return Fail("dmon", event.error);
    if (event.kind == TickSubscription::Event::kCancelled) break;
    if (event.kind == TickSubscription::Event::kDisconnected) {
      if (!disconnected) {
        std::cerr << "vigil dmon: " << MessageOf(event.error) << "; reconnecting" << std::endl;
        disconnected = true;
      }
      continue;
    }
    const v1::TickUpdate& update = *event.message;
    if (disconnected || event.new_instance) {
      std::cerr << "vigil dmon: connected to engine instance " << update.instance_id()
                << (event.new_instance ? " (the engine restarted: seq starts again)" : "")
                << std::endl;
      disconnected = false;
      header_due = !flags.client.json;
      last_printed_us = 0;
    }
    // Print at most once per -d, whatever the engine's tick rate (half a tick of tolerance).
    if (last_printed_us != 0 &&
        absl::Microseconds(update.timestamp_us() - last_printed_us) + tick / 2 < delay) {
      continue;
    }
    last_printed_us = update.timestamp_us();
    ++printed;
    if (flags.client.json) {
      nlohmann::json json = {{"instance_id", update.instance_id()},
                             {"seq", update.seq()},
                             {"timestamp", FormatTimeUs(update.timestamp_us())},
                             {"timestamp_us", update.timestamp_us()},
                             {"dropped_ticks", update.dropped_ticks()},
                             {"values", nlohmann::json::array()}};
      for (const auto& value : update.values()) json["values"].push_back(ValueJson(value));
      std::cout << json.dump() << std::endl;
      continue;
    }
    if (header_due) {
      PrintHeader(*fields, widths);
      header_due = false;
    }
    // Values arrive GPU-major in the requested field order, each GPU's followed by those of
    // its MIG GPU instances (only the fields sampled per instance: the others show N/A).
    std::vector<std::pair<std::string, std::vector<std::string>>> rows;
    std::optional<std::pair<uint32_t, int64_t>> entity;  // (GPU, GPU instance or -1)
    for (const v1::FieldValue& value : update.values()) {
      const std::pair<uint32_t, int64_t> of{
          value.gpu(), value.has_gpu_instance() ? int64_t{value.gpu_instance()} : -1};
      if (entity != of) {
        entity = of;
        rows.emplace_back(of.second < 0 ? fmt::format("GPU {}", of.first)
                                        : fmt::format("MIG {}/{}", of.first, of.second),
                          std::vector<std::string>(fields->size(), "N/A"));
      }
      auto column = std::find(fields->begin(), fields->end(), value.field_id());
      if (column != fields->end())
        rows.back().second[column - fields->begin()] = FormatValue(value);
    }
    for (const auto& [name, cells] : rows) {
      std::string line = fmt::format("{:<8}", name);
      for (size_t i = 0; i < cells.size(); ++i)
        line += fmt::format("  {:>{}}", cells[i], widths[i]);
      std::cout << line << '\n';
    }
    std::cout.flush();
  }
  return kExitOk;
}

}  // namespace

CommandRunner AddDmonCommand(CLI::App* parent) {
  CLI::App* command = parent->add_subcommand(
      "dmon",
      "Watch fields live, one row per GPU per tick (like `dcgmi dmon`); '*' marks an "
      "injected value");
  auto flags = std::make_shared<DmonFlags>();
  AddClientFlags(command, &flags->client);
  command
      ->add_option("-e,--field-ids", flags->fields,
                   "Fields to show: DCGM names or IDs separated by commas, e.g. "
                   "DCGM_FI_DEV_GPU_TEMP,155")
      ->required();
  command->add_option("-i,--gpus", flags->gpus, "GPU indexes separated by commas (default: all)");
  command->add_option("-d,--delay", flags->delay_ms, "Minimum time between rows, in ms")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
      ->capture_default_str();
  command
      ->add_option("-c,--count", flags->count, "Stop after this many ticks (0: run until stopped)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}))
      ->capture_default_str();
  return [flags] { return RunDmon(*flags); };
}

}  // namespace vigil::cli
