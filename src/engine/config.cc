// Parses and validates the engine configuration file.
#include "engine/config.h"

#include "common/duration.h"
#include "common/files.h"
#include "common/status.h"
#include "common/yaml.h"
#include "fields/catalogue.h"
#include "fmt/format.h"

namespace vigil {
namespace {

absl::Status ParseSampling(const YAML::Node& node, const yaml::Reader& reader,
                           EngineConfig* config) {
  if (auto status = reader.ExpectMap(
          node, "sampling", {"tick_interval", "history_max_age", "intervals", "gpu_read_timeout"});
      !status.ok()) {
    return status;
  }
  if (node["tick_interval"]) {
    auto tick = reader.Duration(node["tick_interval"], "sampling.tick_interval");
    if (!tick.ok()) return tick.status();
    if (*tick < kMinTickInterval || *tick > kMaxTickInterval) {
      return reader.Error(node["tick_interval"], "sampling.tick_interval",
                          fmt::format("{} is out of range ({} .. {})", absl::FormatDuration(*tick),
                                      absl::FormatDuration(kMinTickInterval),
                                      absl::FormatDuration(kMaxTickInterval)));
    }
    config->tick_interval = *tick;
  }
  if (node["history_max_age"]) {
    auto age = reader.Duration(node["history_max_age"], "sampling.history_max_age");
    if (!age.ok()) return age.status();
    if (*age < kMinHistoryAge || *age > kMaxHistoryAge) {
      return reader.Error(
          node["history_max_age"], "sampling.history_max_age",
          fmt::format("{} is out of range ({} .. {})", absl::FormatDuration(*age),
                      absl::FormatDuration(kMinHistoryAge), absl::FormatDuration(kMaxHistoryAge)));
    }
    config->history_max_age = *age;
  }
  if (node["gpu_read_timeout"]) {
    auto timeout = reader.Duration(node["gpu_read_timeout"], "sampling.gpu_read_timeout");
    if (!timeout.ok()) return timeout.status();
    if (*timeout < kMinGpuReadTimeout || *timeout > config->tick_interval) {
      return reader.Error(
          node["gpu_read_timeout"], "sampling.gpu_read_timeout",
          fmt::format("{} is out of range ({} .. the tick interval, {})",
                      absl::FormatDuration(*timeout), absl::FormatDuration(kMinGpuReadTimeout),
                      absl::FormatDuration(config->tick_interval)));
    }
    config->gpu_read_timeout = *timeout;
  }
  if (const YAML::Node intervals = node["intervals"]) {
    if (!intervals.IsMap()) {
      return reader.Error(intervals, "sampling.intervals",
                          "expected a mapping of field names or IDs to durations");
    }
    for (const auto& entry : intervals) {
      const std::string key = entry.first.Scalar();
      const std::string path = "sampling.intervals." + key;
      auto field = ResolveField(key);
      if (!field.ok()) return reader.Error(entry.first, path, MessageOf(field.status()));
      auto interval = reader.Duration(entry.second, path);
      if (!interval.ok()) return interval.status();
      if (*interval <= absl::ZeroDuration() || *interval > kMaxFieldInterval) {
        return reader.Error(
            entry.second, path,
            fmt::format("{} is out of range (more than 0 .. {})", absl::FormatDuration(*interval),
                        absl::FormatDuration(kMaxFieldInterval)));
      }
      if (*interval < MinInterval((*field)->id)) {
        return reader.Error(
            entry.second, path,
            fmt::format("{} is shorter than this field allows ({}): {} makes the driver "
                        "checksum every infoROM object (DCGM's minimum too)",
                        absl::FormatDuration(*interval),
                        absl::FormatDuration(MinInterval((*field)->id)), (*field)->name));
      }
      config->interval_overrides[(*field)->id] = *interval;
    }
  }
  return absl::OkStatus();
}

// tls_clients: [{identity: NAME, may: [read, inject, reset, clear]}, ...]
absl::Status ParseTlsClients(const YAML::Node& node, const yaml::Reader& reader,
                             std::vector<TlsClientGrant>* grants) {
  if (!node.IsSequence()) {
    return reader.Error(node, "tls_clients",
                        "expected a list of {identity: NAME, may: [read, inject, reset, clear]}");
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string path = fmt::format("tls_clients[{}]", i);
    if (auto status = reader.ExpectMap(node[i], path, {"identity", "may"}); !status.ok()) {
      return status;
    }
    TlsClientGrant grant;
    auto identity = reader.String(node[i]["identity"], path + ".identity");
    if (!identity.ok()) return identity.status();
    if (identity->empty()) {
      return reader.Error(node[i], path + ".identity",
                          "give the certificate's SAN (spiffe://..., a DNS name) or its CN");
    }
    grant.identity = *identity;
    const YAML::Node may = node[i]["may"];
    if (!may || !may.IsSequence() || may.size() == 0) {
      return reader.Error(node[i], path + ".may",
                          "expected a list of what it may do: read, inject, reset, clear");
    }
    for (size_t j = 0; j < may.size(); ++j) {
      auto name = reader.String(may[j], fmt::format("{}.may[{}]", path, j));
      if (!name.ok()) return name.status();
      const std::optional<Permission> permission = ParsePermission(*name);
      if (!permission) {
        return reader.Error(
            may[j], fmt::format("{}.may[{}]", path, j),
            fmt::format("unknown permission '{}': use read, inject, reset or clear", *name));
      }
      grant.may.insert(*permission);
    }
    for (const TlsClientGrant& earlier : *grants) {
      if (earlier.identity == grant.identity) {
        return reader.Error(node[i], path + ".identity",
                            fmt::format("{} is listed twice: give it one entry", grant.identity));
      }
    }
    grants->push_back(std::move(grant));
  }
  return absl::OkStatus();
}

absl::Status ParseInjection(const YAML::Node& node, const yaml::Reader& reader,
                            EngineConfig* config) {
  if (auto status =
          reader.ExpectMap(node, "injection", {"allowed_uids", "default_duration", "max_duration"});
      !status.ok()) {
    return status;
  }
  if (const YAML::Node uids = node["allowed_uids"]) {
    if (!uids.IsSequence()) {
      return reader.Error(uids, "injection.allowed_uids", "expected a list of numeric uids");
    }
    for (size_t i = 0; i < uids.size(); ++i) {
      auto uid = reader.Int(uids[i], fmt::format("injection.allowed_uids[{}]", i));
      if (!uid.ok()) return uid.status();
      if (*uid < 0 || *uid > UINT32_MAX) {
        return reader.Error(uids[i], fmt::format("injection.allowed_uids[{}]", i),
                            "not a valid uid");
      }
      config->injection_allowed_uids.push_back(static_cast<uint32_t>(*uid));
    }
  }
  for (const char* key : {"default_duration", "max_duration"}) {
    if (!node[key]) continue;
    const std::string path = fmt::format("injection.{}", key);
    auto duration = reader.Duration(node[key], path);
    if (!duration.ok()) return duration.status();
    if (*duration < absl::Seconds(1) || *duration > absl::Hours(24)) {
      return reader.Error(
          node[key], path,
          fmt::format("{} is out of range (1s .. 24h)", absl::FormatDuration(*duration)));
    }
    (std::string_view(key) == "max_duration" ? config->injection.max_duration
                                             : config->injection.default_duration) = *duration;
  }
  if (config->injection.default_duration > config->injection.max_duration) {
    return reader.Error(node, "injection", "default_duration is longer than max_duration");
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineConfig> ParseEngineConfigUnguarded(std::string_view yaml_text,
                                                        std::string_view source);

}  // namespace

absl::StatusOr<EngineConfig> ParseEngineConfig(std::string_view yaml_text,
                                               std::string_view source) {
  return yaml::Guard<EngineConfig>(source, [&]() -> absl::StatusOr<EngineConfig> {
    return ParseEngineConfigUnguarded(yaml_text, source);
  });
}

namespace {

absl::Status ParseFlightRecorder(const YAML::Node& node, const yaml::Reader& reader,
                                 FlightRecorderConfig* config) {
  if (auto status = reader.ExpectMap(node, "flight_recorder",
                                     {"window", "after", "max_recordings", "max_size_mib"});
      !status.ok()) {
    return status;
  }
  const struct {
    const char* key;
    absl::Duration min, max;
    absl::Duration* target;
  } durations[] = {{"window", absl::Minutes(1), absl::Hours(1), &config->window},
                   {"after", absl::ZeroDuration(), absl::Minutes(30), &config->after}};
  for (const auto& [key, min, max, target] : durations) {
    if (!node[key]) continue;
    const std::string path = fmt::format("flight_recorder.{}", key);
    auto duration = reader.Duration(node[key], path);
    if (!duration.ok()) return duration.status();
    if (*duration < min || *duration > max) {
      return reader.Error(
          node[key], path,
          fmt::format("{} is out of range ({} .. {})", absl::FormatDuration(*duration),
                      absl::FormatDuration(min), absl::FormatDuration(max)));
    }
    *target = *duration;
  }
  const struct {
    const char* key;
    int64_t min, max;
  } counts[] = {{"max_recordings", 0, 1000}, {"max_size_mib", 1, 65536}};
  for (const auto& [key, min, max] : counts) {
    if (!node[key]) continue;
    const std::string path = fmt::format("flight_recorder.{}", key);
    auto count = reader.Int(node[key], path);
    if (!count.ok()) return count.status();
    if (*count < min || *count > max) {
      return reader.Error(node[key], path,
                          fmt::format("{} is out of range ({} .. {})", *count, min, max));
    }
    if (std::string_view(key) == "max_recordings") {
      config->max_recordings = static_cast<size_t>(*count);
    } else {
      config->max_bytes = static_cast<uint64_t>(*count) << 20;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EngineConfig> ParseEngineConfigUnguarded(std::string_view yaml_text,
                                                        std::string_view source) {
  auto document = yaml::Parse(yaml_text, source);
  if (!document.ok()) return document.status();
  EngineConfig config;
  if (document->IsNull()) return config;  // an empty file means all defaults
  const yaml::Reader reader{std::string(source)};
  if (auto status = reader.ExpectMap(*document, "(top level)",
                                     {"sampling", "subscribers", "injection", "health", "network",
                                      "sim", "flight_recorder", "tls_clients"});
      !status.ok()) {
    return status;
  }
  if (const YAML::Node sim = (*document)["sim"]) {
    if (auto status = reader.ExpectMap(sim, "sim", {"mig"}); !status.ok()) return status;
    if (const YAML::Node mig = sim["mig"]) {
      if (!mig.IsSequence()) {
        return reader.Error(mig, "sim.mig",
                            "expected a list of GPU:PROFILE[,PROFILE...], e.g. "
                            "[\"0:1g.10gb,1g.10gb,2g.20gb\"]");
      }
      for (const YAML::Node& entry : mig) {
        if (!entry.IsScalar()) return reader.Error(entry, "sim.mig", "expected GPU:PROFILE,...");
        auto layout = ParseMigLayout(entry.Scalar());
        if (!layout.ok()) return reader.Error(entry, "sim.mig", MessageOf(layout.status()));
        config.sim_mig.push_back(*std::move(layout));
      }
    }
  }
  if (const YAML::Node sampling = (*document)["sampling"]) {
    if (auto status = ParseSampling(sampling, reader, &config); !status.ok()) return status;
  }
  if (const YAML::Node subscribers = (*document)["subscribers"]) {
    if (auto status = reader.ExpectMap(subscribers, "subscribers", {"queue_depth"}); !status.ok()) {
      return status;
    }
    if (subscribers["queue_depth"]) {
      auto depth = reader.Int(subscribers["queue_depth"], "subscribers.queue_depth");
      if (!depth.ok()) return depth.status();
      if (*depth < 1 || *depth > static_cast<int64_t>(kMaxSubscriberQueueDepth)) {
        return reader.Error(
            subscribers["queue_depth"], "subscribers.queue_depth",
            fmt::format("{} is out of range (1 .. {})", *depth, kMaxSubscriberQueueDepth));
      }
      config.subscriber_queue_depth = static_cast<size_t>(*depth);
    }
  }
  if (const YAML::Node injection = (*document)["injection"]) {
    if (auto status = ParseInjection(injection, reader, &config); !status.ok()) return status;
  }
  if (const YAML::Node clients = (*document)["tls_clients"]) {
    if (auto status = ParseTlsClients(clients, reader, &config.tls_clients); !status.ok()) {
      return status;
    }
  }
  if (const YAML::Node recorder = (*document)["flight_recorder"]) {
    if (auto status = ParseFlightRecorder(recorder, reader, &config.flight_recorder);
        !status.ok()) {
      return status;
    }
  }
  if (const YAML::Node health = (*document)["health"]) {
    if (auto status = ApplyHealthConfig(health, std::string(source), &config.health);
        !status.ok()) {
      return status;
    }
  }
  if (const YAML::Node network = (*document)["network"]) {
    if (auto status = ApplyNetworkConfig(network, std::string(source), &config.network);
        !status.ok()) {
      return status;
    }
  }
  return config;
}

}  // namespace

absl::StatusOr<EngineConfig> LoadEngineConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseEngineConfig(*text, path);
}

}  // namespace vigil
