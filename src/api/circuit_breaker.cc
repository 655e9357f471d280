// Implements the published circuit breaker's format (circuit_breaker.h).
#include "api/circuit_breaker.h"

#include <charconv>

#include "api/node_condition.h"
#include "fmt/format.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

std::string TimeText(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
}

absl::Status Missing(std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(
      fmt::format("the circuit breaker's data key '{}' {}", key, what));
}

absl::StatusOr<std::string> Text(const Json& data, std::string_view key) {
  const auto it = data.find(std::string(key));
  if (it == data.end() || !it->is_string()) return Missing(key, "is missing or not a string");
  return it->get<std::string>();
}

absl::StatusOr<size_t> Count(const Json& data, std::string_view key) {
  auto text = Text(data, key);
  if (!text.ok()) return text.status();
  size_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size() || text->empty()) {
    return Missing(key, fmt::format("is not a count: '{}'", *text));
  }
  return value;
}

absl::StatusOr<absl::Time> TimeAt(const Json& data, std::string_view key) {
  auto text = Text(data, key);
  if (!text.ok()) return text.status();
  absl::Time time;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, *text, &time, &error)) {
    return Missing(key, fmt::format("is not an RFC 3339 time: '{}'", *text));
  }
  return time;
}

}  // namespace

std::string_view BreakerStateName(BreakerState state) {
  return state == BreakerState::kOpen ? "open" : "closed";
}

bool PublishedBreaker::SameDecision(const PublishedBreaker& other) const {
  return state == other.state && taint_key == other.taint_key &&
         tainted_nodes == other.tainted_nodes && gpu_nodes == other.gpu_nodes &&
         max_tainted_nodes == other.max_tainted_nodes &&
         out_of_service_gpus == other.out_of_service_gpus && gpus == other.gpus &&
         max_out_of_service_gpus == other.max_out_of_service_gpus &&
         max_tainted_share == other.max_tainted_share;
}

BreakerState DecideBreaker(size_t tainted, size_t gpu_nodes, double max_tainted_share) {
  return tainted + 1 <= MaxTaintedNodes(max_tainted_share, gpu_nodes) ? BreakerState::kClosed
                                                                      : BreakerState::kOpen;
}

BreakerState DecideBreaker(size_t tainted, size_t gpu_nodes, size_t out_of_service_gpus,
                           size_t gpus, double max_tainted_share) {
  if (DecideBreaker(tainted, gpu_nodes, max_tainted_share) == BreakerState::kOpen) {
    return BreakerState::kOpen;
  }
  return gpus == 0 ? BreakerState::kClosed
                   : DecideBreaker(out_of_service_gpus, gpus, max_tainted_share);
}

Json BreakerToData(const PublishedBreaker& breaker) {
  return {{"state", std::string(BreakerStateName(breaker.state))},
          {"taintKey", breaker.taint_key},
          {"taintedNodes", std::to_string(breaker.tainted_nodes)},
          {"gpuNodes", std::to_string(breaker.gpu_nodes)},
          {"maxTaintedNodes", std::to_string(breaker.max_tainted_nodes)},
          {"outOfServiceGpus", std::to_string(breaker.out_of_service_gpus)},
          {"gpus", std::to_string(breaker.gpus)},
          {"maxOutOfServiceGpus", std::to_string(breaker.max_out_of_service_gpus)},
          {"maxTaintedShare", fmt::format("{}", breaker.max_tainted_share)},
          {"changedAt", TimeText(breaker.changed)},
          {"renewedAt", TimeText(breaker.renewed)},
          {"decidedBy", breaker.decided_by}};
}

absl::StatusOr<PublishedBreaker> BreakerFromData(const Json& data) {
  if (!data.is_object()) {
    return absl::InvalidArgumentError("the circuit breaker's ConfigMap has no data");
  }
  PublishedBreaker breaker;
  auto state = Text(data, "state");
  if (!state.ok()) return state.status();
  if (*state == "open") {
    breaker.state = BreakerState::kOpen;
  } else if (*state != "closed") {
    return Missing("state", fmt::format("is '{}', neither open nor closed", *state));
  }
  auto key = Text(data, "taintKey");
  if (!key.ok()) return key.status();
  breaker.taint_key = *key;
  const std::pair<std::string_view, size_t*> counts[] = {
      {"taintedNodes", &breaker.tainted_nodes},
      {"gpuNodes", &breaker.gpu_nodes},
      {"maxTaintedNodes", &breaker.max_tainted_nodes}};
  for (const auto& [name, target] : counts) {
    auto value = Count(data, name);
    if (!value.ok()) return value.status();
    *target = *value;
  }
  // The GPU counts are optional: a remediator older than per-GPU quarantine does not write them.
  const std::pair<std::string_view, size_t*> gpu_counts[] = {
      {"outOfServiceGpus", &breaker.out_of_service_gpus},
      {"gpus", &breaker.gpus},
      {"maxOutOfServiceGpus", &breaker.max_out_of_service_gpus}};
  for (const auto& [name, target] : gpu_counts) {
    if (!data.contains(std::string(name))) continue;
    auto value = Count(data, name);
    if (!value.ok()) return value.status();
    *target = *value;
  }
  auto share = Text(data, "maxTaintedShare");
  if (!share.ok()) return share.status();
  const auto [end, error] =
      std::from_chars(share->data(), share->data() + share->size(), breaker.max_tainted_share);
  if (error != std::errc() || end != share->data() + share->size() ||
      !(breaker.max_tainted_share > 0 && breaker.max_tainted_share <= 1)) {
    return Missing("maxTaintedShare", fmt::format("is not a share in (0, 1]: '{}'", *share));
  }
  const std::pair<std::string_view, absl::Time*> times[] = {{"changedAt", &breaker.changed},
                                                            {"renewedAt", &breaker.renewed}};
  for (const auto& [name, target] : times) {
    auto value = TimeAt(data, name);
    if (!value.ok()) return value.status();
    *target = *value;
  }
  auto by = Text(data, "decidedBy");
  if (!by.ok()) return by.status();
  breaker.decided_by = *by;
  return breaker;
}

}  // namespace vigil
