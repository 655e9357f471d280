// Implements the incident log.
#include "health/incident_store.h"

#include <fcntl.h>
#include <unistd.h>

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
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace vigil {
namespace {

std::string Frame(const std::string& json) { return fmt::format("{:08x} {}\n", Crc32(json), json); }

nlohmann::json ToJson(const Incident& incident) {
  return {{"op", "raise"},
          {"gpu", incident.gpu},
          {"uuid", incident.uuid},
          {"system", std::string(HealthSystemName(incident.system))},
          {"status", std::string(HealthStatusName(incident.status))},
          {"key", incident.key},
          {"code", incident.code},
          {"message", incident.message},
          {"action", incident.action},
          {"first_seen_us", absl::ToUnixMicros(incident.first_seen)},
          {"last_seen_us", absl::ToUnixMicros(incident.last_seen)},
          {"count", incident.count},
          {"injected", incident.injected}};
}

std::optional<Incident> FromJson(const nlohmann::json& json) {
  const auto system = ParseHealthSystem(json.at("system").get<std::string>());
  if (!system) return std::nullopt;
  Incident incident;
  incident.gpu = json.at("gpu").get<uint32_t>();
  incident.uuid = json.at("uuid").get<std::string>();
  incident.system = *system;
  incident.status = HealthStatus::kFail;  // only failures are persisted
  incident.key = json.at("key").get<std::string>();
  incident.code = json.at("code").get<std::string>();
  incident.message = json.at("message").get<std::string>();
  incident.action = json.at("action").get<std::string>();
  incident.first_seen = absl::FromUnixMicros(json.at("first_seen_us").get<int64_t>());
  incident.last_seen = absl::FromUnixMicros(json.at("last_seen_us").get<int64_t>());
  incident.count = json.at("count").get<uint64_t>();
  incident.injected = json.value("injected", false);
  return incident;
}

absl::Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

std::string CurrentBootId() {
  const char* override_file = std::getenv("VIGIL_BOOT_ID_FILE");
  auto text =
      ReadFile(override_file != nullptr ? override_file : "/proc/sys/kernel/random/boot_id");
  return text.ok() ? std::string(Trim(*text)) : "";
}

absl::StatusOr<std::unique_ptr<IncidentStore>> IncidentStore::Open(const std::string& state_dir,
                                                                   const std::string& boot_id,
                                                                   Loaded* loaded) {
  const std::string path = state_dir + "/health.log";
  *loaded = Loaded();
  // Replay the existing log, if any.
  std::map<std::pair<std::string, std::string>, Incident> incidents;  // (uuid, key)
  std::string recorded_boot;
  if (auto text = ReadFile(path); text.ok()) {
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
          recorded_boot = json.at("boot_id").get<std::string>();
        } else if (op == "raise") {
          if (auto incident = FromJson(json)) {
            incidents[{incident->uuid, incident->key}] = std::move(*incident);
          }
        } else if (op == "clear") {
          incidents.erase({json.at("uuid").get<std::string>(), json.at("key").get<std::string>()});
        }
      } catch (const nlohmann::json::exception& e) {
        loaded->problems.push_back(
            fmt::format("{}:{}: unreadable record skipped ({})", path, number, e.what()));
      }
    }
  } else if (text.status().code() != absl::StatusCode::kNotFound) {
    return text.status();
  }
  if (!recorded_boot.empty() && !boot_id.empty() && recorded_boot != boot_id) {
    loaded->rebooted = true;
    loaded->dropped = incidents.size();
    incidents.clear();
  }
  // Compact: the current boot and the surviving incidents, replacing the old log atomically.
  std::string fresh = Frame(nlohmann::json{{"op", "boot"}, {"boot_id", boot_id}}.dump());
  for (auto& [key, incident] : incidents) {
    fresh += Frame(ToJson(incident).dump());
    loaded->incidents.push_back(incident);
  }
  const std::string temporary = path + ".tmp";
  const int tmp_fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (tmp_fd < 0) {
    return absl::PermissionDeniedError(
        fmt::format("cannot write {}: {}: check --state-dir", temporary, std::strerror(errno)));
  }
  absl::Status written = WriteAll(tmp_fd, fresh);
  if (written.ok() && fsync(tmp_fd) != 0) written = absl::InternalError(std::strerror(errno));
  close(tmp_fd);
  if (!written.ok() || rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::InternalError(fmt::format(
        "cannot write {}: {}", path,
        written.ok() ? std::string(std::strerror(errno)) : std::string(MessageOf(written))));
  }
  if (const int dir_fd = open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  return std::unique_ptr<IncidentStore>(new IncidentStore(path, fd));
}

IncidentStore::~IncidentStore() {
  absl::MutexLock lock(&mutex_);
  close(fd_);
}

void IncidentStore::Append(const std::string& json) {
  const absl::Status written = WriteAll(fd_, Frame(json));
  if ((!written.ok() || fsync(fd_) != 0) && !write_failed_) {
    // Losing persistence is serious (a restart could forget a failure) but not a reason to stop
    // serving the verdicts: say so loudly, once.
    spdlog::error(
        "cannot persist a health incident to {}: {}: a restart may forget it", path_,
        written.ok() ? std::string(std::strerror(errno)) : std::string(MessageOf(written)));
    write_failed_ = true;
  }
}

void IncidentStore::Raised(const Incident& incident) {
  const std::string json = ToJson(incident).dump();
  absl::MutexLock lock(&mutex_);
  Append(json);
}

void IncidentStore::Cleared(const Incident& incident, std::string_view reason) {
  const std::string json = nlohmann::json{
      {"op", "clear"},
      {"uuid", incident.uuid},
      {"key", incident.key},
      {"reason",
       std::string(reason)}}.dump();
  absl::MutexLock lock(&mutex_);
  Append(json);
}

}  // namespace vigil
