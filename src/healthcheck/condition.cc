// Implements the mapping from the health view to the GpuProblem condition.
#include "healthcheck/condition.h"

#include <string>
#include <vector>

#include "fmt/format.h"

namespace vigil {
namespace {

// "GPU 3 (GPU-…) FAIL: driver DCGM_FR_FALLEN_OFF_BUS: <message> (action: <action>)", one per
// incident at `status`, or one per GPU at `status` without incidents.
std::vector<std::string> Describe(const v1::HealthVerdict& verdict, v1::HealthStatus status) {
  std::vector<std::string> parts;
  for (const v1::GpuHealth& gpu : verdict.gpus()) {
    if (gpu.status() != status) continue;
    bool described = false;
    for (const v1::SystemHealth& system : gpu.systems()) {
      for (const v1::HealthIncident& incident : system.incidents()) {
        if (incident.status() != status) continue;
        std::string part = fmt::format("GPU {} ({}) {}: {} {}: {}", gpu.gpu(), gpu.uuid(),
                                       HealthStatusText(status), incident.system(), incident.code(),
                                       incident.message());
        if (!incident.action().empty()) part += fmt::format(" (action: {})", incident.action());
        if (incident.injected()) part += " [injected]";
        parts.push_back(std::move(part));
        described = true;
      }
    }
    if (!described) {
      std::vector<std::string> systems;
      for (const v1::SystemHealth& system : gpu.systems()) {
        if (system.status() != status) continue;
        systems.push_back(system.unknown_reason().empty()
                              ? system.system()
                              : fmt::format("{} ({})", system.system(), system.unknown_reason()));
      }
      parts.push_back(
          fmt::format("GPU {} ({}) {}{}", gpu.gpu(), gpu.uuid(), HealthStatusText(status),
                      systems.empty() ? "" : fmt::format(" in {}", fmt::join(systems, ", "))));
    }
  }
  return parts;
}

// What the condition is about, without the figures that change every tick: each GPU at
// `status` with the systems and incident codes behind it, in verdict order.
std::string Identity(const v1::HealthVerdict& verdict, v1::HealthStatus status) {
  std::string identity;
  for (const v1::GpuHealth& gpu : verdict.gpus()) {
    if (gpu.status() != status) continue;
    identity += fmt::format("{}:", gpu.uuid());
    for (const v1::SystemHealth& system : gpu.systems()) {
      if (system.status() != status) continue;
      identity += fmt::format(" {}", system.system());
      for (const v1::HealthIncident& incident : system.incidents()) {
        if (incident.status() == status) identity += fmt::format("/{}", incident.code());
      }
    }
    identity += ";";
  }
  return identity;
}

std::string Join(const std::string& prefix, const std::vector<std::string>& parts) {
  std::string message = prefix;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string separator = i == 0 ? "" : "; ";
    const std::string more = fmt::format("; and {} more", parts.size() - i);
    if (message.size() + separator.size() + parts[i].size() + more.size() > kMaxConditionMessage &&
        i > 0) {
      return message + more;
    }
    message += separator + parts[i];
  }
  if (message.size() > kMaxConditionMessage) message.resize(kMaxConditionMessage);
  return message;
}

}  // namespace

std::optional<DesiredCondition> ConditionFromView(const HealthView& view, absl::Time now,
                                                  absl::Time started,
                                                  absl::Duration unknown_after) {
  if (!view.fresh(now)) {
    const absl::Time last_seen = view.have_verdict ? std::max(view.received, started) : started;
    if (now - last_seen < unknown_after) return std::nullopt;
    std::string reason = "EngineUnreachable";
    if (view.node_mismatch) {
      reason = "EngineOfAnotherNode";
    } else if (view.connected) {
      reason = view.have_verdict ? "VerdictStale" : "NoVerdict";
    }
    std::string message =
        view.problem.empty()
            ? fmt::format("no fresh verdict from the engine at {}", view.engine_address)
            : view.problem;
    message +=
        view.have_verdict
            ? fmt::format(" (last verdict {} at seq {}, {} ago)",
                          HealthStatusText(view.verdict.overall()), view.verdict.seq(),
                          absl::FormatDuration(absl::Trunc(now - view.received, absl::Seconds(1))))
            : " (no verdict yet)";
    if (message.size() > kMaxConditionMessage) message.resize(kMaxConditionMessage);
    return DesiredCondition{
        .status = "Unknown", .reason = reason, .message = message, .identity = view.engine_address};
  }
  const v1::HealthVerdict& verdict = view.verdict;
  const std::string prefix =
      fmt::format("engine {} seq {}: ", view.engine_instance_id, verdict.seq());
  switch (verdict.overall()) {
    case v1::HEALTH_STATUS_FAIL:
      return DesiredCondition{.status = "True",
                              .reason = "GpuFailed",
                              .message = Join(prefix, Describe(verdict, v1::HEALTH_STATUS_FAIL)),
                              .identity = Identity(verdict, v1::HEALTH_STATUS_FAIL)};
    case v1::HEALTH_STATUS_WARN:
      return DesiredCondition{.status = "False",
                              .reason = "GpuWarning",
                              .message = Join(prefix + "no GPU fails; warnings: ",
                                              Describe(verdict, v1::HEALTH_STATUS_WARN)),
                              .identity = Identity(verdict, v1::HEALTH_STATUS_WARN)};
    case v1::HEALTH_STATUS_PASS:
      return DesiredCondition{
          .status = "False",
          .reason = "GpusHealthy",
          .message = fmt::format("{}all {} GPUs pass", prefix, verdict.gpus_size()),
          .identity = std::to_string(verdict.gpus_size())};
    default:
      return DesiredCondition{.status = "Unknown",
                              .reason = "GpuHealthUnknown",
                              .message = Join(prefix + "the engine cannot tell: ",
                                              Describe(verdict, v1::HEALTH_STATUS_UNKNOWN)),
                              .identity = Identity(verdict, v1::HEALTH_STATUS_UNKNOWN)};
  }
}

}  // namespace vigil
