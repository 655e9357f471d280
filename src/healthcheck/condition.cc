// Implements the mapping from the health view to the GpuProblem condition.
#include "healthcheck/condition.h"

#include <cctype>
#include <string>
#include <vector>

#include "fields/health_systems.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace vigil {
namespace {

// The GPUs at `status`, described once for the message and once for the identity.
struct Described {
  // "GPU 3 (GPU-…) FAIL: driver DCGM_FR_FALLEN_OFF_BUS: <message> (action: <action>)", one per
  // incident at `status`, or one per GPU at `status` without incidents.
  std::vector<std::string> parts;
  // What the condition is about, without the figures that change every tick: each GPU at
  // `status` with the systems and incident codes behind it ("GPU-3: driver/DCGM_FR_…;").
  std::string identity;
};

// "SUBJECT FAIL: driver DCGM_FR_…: <message> (action: …) [injected]", one incident of a condition.
std::string IncidentPart(std::string_view subject, v1::HealthStatus status,
                         const v1::HealthIncident& incident) {
  std::string part = fmt::format("{} {}: {} {}: {}", subject, HealthStatusText(status),
                                 incident.system(), incident.code(), incident.message());
  if (!incident.action().empty()) part += fmt::format(" (action: {})", incident.action());
  if (incident.injected()) part += " [injected]";
  return part;
}

Described Describe(const v1::HealthVerdict& verdict, v1::HealthStatus status) {
  Described out;
  // The node's own systems first: an NVSwitch failure is every GPU behind it.
  for (const v1::SystemHealth& system : verdict.node_systems()) {
    if (system.status() != status) continue;
    out.identity += fmt::format("node: {}", system.system());
    bool described = false;
    for (const v1::HealthIncident& incident : system.incidents()) {
      if (incident.status() != status) continue;
      out.identity += fmt::format("/{}", incident.code());
      out.parts.push_back(IncidentPart("node", status, incident));
      described = true;
    }
    out.identity += ";";
    if (!described) {
      out.parts.push_back(fmt::format(
          "node {} in {}{}", HealthStatusText(status), system.system(),
          system.unknown_reason().empty() ? "" : fmt::format(" ({})", system.unknown_reason())));
    }
  }
  for (const v1::GpuHealth& gpu : verdict.gpus()) {
    if (gpu.status() != status) continue;
    out.identity += fmt::format("{}:", gpu.uuid());
    bool described = false;
    std::vector<std::string> systems;  // at `status`, for a GPU without incidents
    for (const v1::SystemHealth& system : gpu.systems()) {
      const bool at_status = system.status() == status;
      if (at_status) {
        out.identity += fmt::format(" {}", system.system());
        systems.push_back(system.unknown_reason().empty()
                              ? system.system()
                              : fmt::format("{} ({})", system.system(), system.unknown_reason()));
      }
      for (const v1::HealthIncident& incident : system.incidents()) {
        if (incident.status() != status) continue;
        if (at_status) out.identity += fmt::format("/{}", incident.code());
        out.parts.push_back(
            IncidentPart(fmt::format("GPU {} ({})", gpu.gpu(), gpu.uuid()), status, incident));
        described = true;
      }
    }
    out.identity += ";";
    if (!described) {
      out.parts.push_back(
          fmt::format("GPU {} ({}) {}{}", gpu.gpu(), gpu.uuid(), HealthStatusText(status),
                      systems.empty() ? "" : fmt::format(" in {}", fmt::join(systems, ", "))));
    }
  }
  return out;
}

// Whether a failure in `verdict` may drive automatic actions: some failing incident is real, or
// injected by a drill that allows actions. A failure without an incident behind it (none is
// known today) counts as real.
bool Actionable(const v1::HealthVerdict& verdict) {
  bool any_incident = false;
  const auto real = [&](const v1::SystemHealth& system) {
    for (const v1::HealthIncident& incident : system.incidents()) {
      if (incident.status() != v1::HEALTH_STATUS_FAIL) continue;
      any_incident = true;
      if (!incident.injected() || incident.actions_allowed()) return true;
    }
    return false;
  };
  for (const v1::SystemHealth& system : verdict.node_systems()) {
    if (real(system)) return true;
  }
  for (const v1::GpuHealth& gpu : verdict.gpus()) {
    for (const v1::SystemHealth& system : gpu.systems()) {
      if (real(system)) return true;
    }
  }
  return !any_incident;
}

// `gpu_reason` when a GPU is at `status`; when only a node-level system is, the first such
// system's name in CamelCase followed by `node_suffix` ("NvswitchFailed", "NicsWarning").
std::string ReasonFor(const v1::HealthVerdict& verdict, v1::HealthStatus status,
                      std::string gpu_reason, std::string_view node_suffix) {
  for (const v1::GpuHealth& gpu : verdict.gpus()) {
    if (gpu.status() == status) return gpu_reason;
  }
  for (const v1::SystemHealth& system : verdict.node_systems()) {
    if (system.status() != status || system.system().empty()) continue;
    std::string reason = system.system();
    reason[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(reason[0])));
    return reason + std::string(node_suffix);
  }
  return gpu_reason;
}

// ", and the node's NVSwitches and NIC ports" for the node-level systems judged; "" for none.
std::string NodeSystemsPass(const v1::HealthVerdict& verdict) {
  std::vector<std::string> names;
  for (const v1::SystemHealth& system : verdict.node_systems()) {
    const std::optional<HealthSystem> known = ParseHealthSystem(system.system());
    names.emplace_back(known ? HealthSystemInfoOf(*known).subject : system.system());
  }
  if (names.empty()) return "";
  return fmt::format(", and the node's {}", fmt::join(names, " and "));
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

DesiredCondition Condition(std::string status, std::string reason, const std::string& prefix,
                           Described described) {
  return {.status = std::move(status),
          .reason = std::move(reason),
          .message = Join(prefix, described.parts),
          .identity = std::move(described.identity)};
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
  const std::string prefix = ConditionPrefix(view.engine_instance_id, verdict.seq());
  switch (verdict.overall()) {
    case v1::HEALTH_STATUS_FAIL: {
      Described described = Describe(verdict, v1::HEALTH_STATUS_FAIL);
      const bool actionable = Actionable(verdict);
      if (!actionable) {
        described.parts.insert(described.parts.begin(), std::string(kNoActionForDrill));
        described.identity += "no-action;";
      }
      DesiredCondition condition =
          Condition("True", ReasonFor(verdict, v1::HEALTH_STATUS_FAIL, "GpuFailed", "Failed"),
                    prefix, std::move(described));
      condition.actionable = actionable;
      return condition;
    }
    case v1::HEALTH_STATUS_WARN:
      return Condition(
          "False",
          ReasonFor(verdict, v1::HEALTH_STATUS_WARN, std::string(kReasonGpuWarning), "Warning"),
          prefix + "nothing fails; warnings: ", Describe(verdict, v1::HEALTH_STATUS_WARN));
    case v1::HEALTH_STATUS_PASS:
      return DesiredCondition{.status = "False",
                              .reason = std::string(kReasonGpusHealthy),
                              .message = fmt::format("{}all {} GPUs pass{}", prefix,
                                                     verdict.gpus_size(), NodeSystemsPass(verdict)),
                              .identity = std::to_string(verdict.gpus_size())};
    default:
      return Condition("Unknown", "GpuHealthUnknown", prefix + "the engine cannot tell: ",
                       Describe(verdict, v1::HEALTH_STATUS_UNKNOWN));
  }
}

}  // namespace vigil
