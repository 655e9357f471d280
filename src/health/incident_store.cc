// Implements the incident log.
#include "health/incident_store.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "common/crc32.h"
#include "common/files.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/thread.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

std::string Frame(const std::string& json) { return fmt::format("{:08x} {}\n", Crc32(json), json); }

nlohmann::json ToJson(const Incident& incident) {
  nlohmann::json json = {{"op", "raise"},
                         {"gpu", incident.gpu},
                         {"uuid", incident.uuid},
                         {"node", incident.node_level},
                         {"system", std::string(HealthSystemName(incident.system))},
                         {"status", std::string(HealthStatusName(incident.status))},
                         {"key", incident.key},
                         {"code", incident.code},
                         {"message", incident.message},
                         {"action", incident.action},
                         {"recommended", std::string(RecommendedActionName(incident.recommended))},
                         {"first_seen_us", absl::ToUnixMicros(incident.first_seen)},
                         {"last_seen_us", absl::ToUnixMicros(incident.last_seen)},
                         {"count", incident.count},
                         {"injected", incident.injected},
                         {"actions_allowed", incident.actions_allowed},
                         {"sticky", incident.sticky}};
  // In the same record as the count it adds to: a restart never sees one without the other.
  if (incident.log_position.has_value()) {
    json["log_source"] = incident.log_position->source;
    json["log_sequence"] = incident.log_position->sequence;
  }
  return json;
}

std::optional<Incident> FromJson(const nlohmann::json& json) {
  const auto system = ParseHealthSystem(json.at("system").get<std::string>());
  if (!system) return std::nullopt;
  Incident incident;
  incident.gpu = json.at("gpu").get<uint32_t>();
  incident.uuid = json.at("uuid").get<std::string>();
  incident.node_level = json.value("node", false);
  if (incident.node_level != IsNodeLevel(*system)) return std::nullopt;
  incident.system = *system;
  incident.status = HealthStatus::kFail;  // only failures are persisted
  incident.key = json.at("key").get<std::string>();
  incident.code = json.at("code").get<std::string>();
  incident.message = json.at("message").get<std::string>();
  incident.action = json.at("action").get<std::string>();
  // Records from before recommended actions existed: a person should look.
  incident.recommended = ParseRecommendedAction(json.value("recommended", "inspect"))
                             .value_or(RecommendedAction::kInspect);
  incident.sticky = json.value("sticky", true);  // records from before: every FAIL was
  incident.first_seen = absl::FromUnixMicros(json.at("first_seen_us").get<int64_t>());
  incident.last_seen = absl::FromUnixMicros(json.at("last_seen_us").get<int64_t>());
  incident.count = json.at("count").get<uint64_t>();
  incident.injected = json.value("injected", false);
  incident.actions_allowed = json.value("actions_allowed", false);
  if (json.contains("log_sequence")) {
    incident.log_position = LogPosition{.source = json.at("log_source").get<std::string>(),
                                        .sequence = json.at("log_sequence").get<uint64_t>()};
  }
  return incident;
}

nlohmann::json ToJson(const OperatorClear& clear) {
  return {{"op", "operator_clear"},
          {"uuid", clear.uuid},
          {"system", clear.system ? std::string(HealthSystemName(*clear.system)) : ""},
          {"time_us", absl::ToUnixMicros(clear.time)}};
}

std::optional<OperatorClear> ClearFromJson(const nlohmann::json& json) {
  OperatorClear clear{.uuid = json.at("uuid").get<std::string>(),
                      .time = absl::FromUnixMicros(json.at("time_us").get<int64_t>())};
  if (const std::string system = json.at("system").get<std::string>(); !system.empty()) {
    clear.system = ParseHealthSystem(system);
    if (!clear.system) return std::nullopt;
  }
  return clear;
}

}  // namespace

std::string CurrentBootId() {
  const char* override_file = std::getenv("VIGIL_BOOT_ID_FILE");
  auto text =
      ReadFile(override_file != nullptr ? override_file : "/proc/sys/kernel/random/boot_id");
  return text.ok() ? std::string(Trim(*text)) : "";
}

absl::StatusOr<std::unique_ptr<IncidentStore>> IncidentStore::Open(const Options& options,
                                                                   Loaded* loaded) {
  Env* const env = options.env;
  const std::string path = options.state_dir + "/health.log";
  *loaded = Loaded();
  // Replay the existing log, if any.
  std::map<std::pair<std::string, std::string>, Incident> incidents;  // (uuid, key)
  // (uuid, system name or "") -> the latest clear
  std::map<std::pair<std::string, std::string>, OperatorClear> clears;
  std::string recorded_boot;
  bool existed = false;
  if (auto text = env->ReadFile(path); text.ok()) {
    existed = true;
    std::istringstream lines(*text);
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      if (line.empty()) continue;
      const std::string json_text = line.size() > 9 ? line.substr(9) : "";
      uint32_t stored = 0;
      const auto parsed =
          std::from_chars(line.data(), line.data() + std::min<size_t>(8, line.size()), stored, 16);
      if (line.size() <= 9 || line[8] != ' ' || parsed.ptr != line.data() + 8 ||
          stored != Crc32(json_text)) {
        loaded->problems.push_back(
            fmt::format("{}:{}: corrupt or torn record skipped", path, number));
        continue;
      }
      try {
        const nlohmann::json json = nlohmann::json::parse(json_text);
        const std::string op = json.at("op").get<std::string>();
        if (op == "boot") {
          // A log that was appended to across a reboot (compaction failed then): what came
          // before the later boot was cleared by it.
          const std::string boot = json.at("boot_id").get<std::string>();
          if (!recorded_boot.empty() && boot != recorded_boot) {
            incidents.clear();
            clears.clear();
          }
          recorded_boot = boot;
        } else if (op == "raise") {
          if (auto incident = FromJson(json)) {
            incidents[{incident->uuid, incident->key}] = std::move(*incident);
          }
        } else if (op == "clear") {
          incidents.erase({json.at("uuid").get<std::string>(), json.at("key").get<std::string>()});
        } else if (op == "operator_clear") {
          if (auto clear = ClearFromJson(json)) {
            OperatorClear& latest = clears[{clear->uuid, json.at("system").get<std::string>()}];
            if (clear->time >= latest.time) latest = std::move(*clear);
          }
        }
      } catch (const nlohmann::json::exception& e) {
        loaded->problems.push_back(
            fmt::format("{}:{}: unreadable record skipped ({})", path, number, e.what()));
      }
    }
  } else if (text.status().code() != absl::StatusCode::kNotFound) {
    return text.status();
  }
  if (!recorded_boot.empty() && !options.boot_id.empty() && recorded_boot != options.boot_id) {
    loaded->rebooted = true;
    loaded->dropped = incidents.size();
    incidents.clear();
    clears.clear();  // the kernel log starts afresh with the boot
  }
  // Compact: the current boot and the surviving incidents, replacing the old log atomically.
  const std::string boot_record =
      Frame(nlohmann::json{{"op", "boot"}, {"boot_id", options.boot_id}}.dump());
  std::string fresh = boot_record;
  for (auto& [key, incident] : incidents) {
    fresh += Frame(ToJson(incident).dump());
    loaded->incidents.push_back(incident);
  }
  for (auto& [key, clear] : clears) {
    fresh += Frame(ToJson(clear).dump());
    loaded->clears.push_back(clear);
  }
  absl::Status compacted = WriteFileAtomically(env, path, fresh);
  bool tail_dirty = false;
  if (!compacted.ok()) {
    // The old log is intact: keep appending to it rather than lose what it holds. Its end may
    // be a torn record (a crash), and it needs the current boot recorded.
    loaded->problems.push_back(fmt::format("cannot compact {} ({}); appending to it as it is", path,
                                           MessageOf(compacted)));
    tail_dirty = existed;
  }
  auto file = env->NewAppendableFile(path);
  if (!file.ok()) {
    return absl::PermissionDeniedError(
        fmt::format("{}: check --state-dir", MessageOf(file.status())));
  }
  std::unique_ptr<IncidentStore> store(
      new IncidentStore(options, path, std::move(*file), tail_dirty));
  if (!compacted.ok()) {
    absl::MutexLock lock(&store->mutex_);
    ++store->failures_;
    store->queue_.push_back({boot_record, options.clock->Now()});
    ++store->queued_total_;
  }
  return store;
}

IncidentStore::IncidentStore(const Options& options, std::string path,
                             std::unique_ptr<WritableFile> file, bool tail_dirty)
    : clock_(options.clock),
      path_(std::move(path)),
      file_(std::move(file)),
      tail_dirty_(tail_dirty) {
  writer_ = StartNamedThread("vigil-persist", [this] { WriterLoop(); });
}

IncidentStore::~IncidentStore() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  writer_.join();
}

void IncidentStore::Queue(std::string json) {
  std::string frame = Frame(json);
  absl::MutexLock lock(&mutex_);
  queue_.push_back({std::move(frame), clock_->Now()});
  ++queued_total_;
}

void IncidentStore::Raised(const Incident& incident) { Queue(ToJson(incident).dump()); }

void IncidentStore::Cleared(const Incident& incident, std::string_view reason) {
  Queue(nlohmann::json{{"op", "clear"},
                       {"uuid", incident.uuid},
                       {"key", incident.key},
                       {"reason", std::string(reason)}}
            .dump());
}

void IncidentStore::OperatorCleared(const OperatorClear& clear) { Queue(ToJson(clear).dump()); }

IncidentStore::Stats IncidentStore::stats() const {
  absl::MutexLock lock(&mutex_);
  return {.pending = queue_.size(),
          .lag = queue_.empty() ? absl::ZeroDuration() : clock_->Now() - queue_.front().queued,
          .written = written_,
          .failures = failures_};
}

bool IncidentStore::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  const uint64_t target = queued_total_;
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return queued_total_ - queue_.size() >= target;
  };
  return mutex_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

absl::Status IncidentStore::Write(const std::string& frame) {
  absl::Status written = file_->Append(tail_dirty_ ? "\n" + frame : frame);
  if (!written.ok()) {
    tail_dirty_ = true;  // a prefix of the record may be in the file
    return written;
  }
  tail_dirty_ = false;
  // A failed sync is retried by writing the record again: after a failed fsync the kernel may
  // have dropped the page. A record twice is harmless (replay applies records in order).
  return file_->Sync();
}

void IncidentStore::WriterLoop() {
  absl::Duration backoff = absl::Milliseconds(100);
  bool failing = false;
  uint64_t failed_attempts = 0;
  while (true) {
    std::string frame;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](IncidentStore* store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(store->mutex_) {
            return store->stopping_ || !store->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing left
      frame = queue_.front().frame;
    }
    const absl::Status written = Write(frame);  // no lock held: the disk may take its time
    absl::MutexLock lock(&mutex_);
    if (written.ok()) {
      queue_.pop_front();
      ++written_;
      if (failing) {
        spdlog::info("health state: persisting to {} works again after {} failed attempt(s)", path_,
                     failed_attempts);
        failing = false;
        failed_attempts = 0;
        backoff = absl::Milliseconds(100);
      }
      continue;
    }
    ++failures_;
    ++failed_attempts;
    if (!failing) {
      // Serious (a restart now could forget a failure) but no reason to stop serving verdicts:
      // say so loudly, once per episode; the FAIL stays served from memory.
      spdlog::error(
          "health state: {}: {} record(s) wait to be persisted; the verdicts are served from "
          "memory meanwhile and the write is retried (a restart now may forget a failure)",
          MessageOf(written), queue_.size());
      failing = true;
    }
    if (stopping_) {
      spdlog::error("health state: stopping with {} record(s) not persisted to {}", queue_.size(),
                    path_);
      return;
    }
    clock_->AwaitWithTimeout(&mutex_,
                             absl::Condition(
                                 +[](IncidentStore* store) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                      store->mutex_) { return store->stopping_; },
                                 this),
                             backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

}  // namespace vigil
