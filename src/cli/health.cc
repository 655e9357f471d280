// `vigil health [--gpu N]`: the engine's verdict per GPU and system, and for the node's own
// systems (nvswitch), with incidents and what to do; exit 0 PASS/WARN, 1 FAIL, 2 cannot tell.
// `vigil health clear (--gpu N | --node) [--system S]` clears incidents (privileged, audited) and
// shows the verdict that follows. Single-threaded.
#include <iostream>

#include "absl/time/clock.h"
#include "api/convert.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/status.h"
#include "fields/health_systems.h"
#include "fmt/format.h"

namespace vigil::cli {
namespace {

struct HealthFlags {
  ClientFlags client;
  int64_t gpu = -1;
  bool node = false;  // clear: the node-level systems
  std::string system;
};

int ExitCodeFor(v1::HealthStatus status) {
  switch (status) {
    case v1::HEALTH_STATUS_PASS:
    case v1::HEALTH_STATUS_WARN:
      return kExitOk;
    case v1::HEALTH_STATUS_FAIL:
      return kExitUnhealthy;
    default:
      return kExitError;
  }
}

nlohmann::json IncidentJson(const v1::HealthIncident& incident) {
  return {{"gpu", incident.gpu()},
          {"uuid", incident.uuid()},
          {"system", incident.system()},
          {"status", std::string(HealthStatusText(incident.status()))},
          {"code", incident.code()},
          {"message", incident.message()},
          {"action", incident.action()},
          {"recommended_action", std::string(RecommendedActionText(incident.recommended_action()))},
          {"first_seen", FormatTimeUs(incident.first_seen_us())},
          {"last_seen", FormatTimeUs(incident.last_seen_us())},
          {"count", incident.count()},
          {"injected", incident.injected()},
          {"node", incident.node()}};
}

nlohmann::json SystemJson(const v1::SystemHealth& system) {
  nlohmann::json json = {{"status", std::string(HealthStatusText(system.status()))},
                         {"incidents", nlohmann::json::array()}};
  if (!system.unknown_reason().empty()) json["unknown_reason"] = system.unknown_reason();
  for (const auto& incident : system.incidents())
    json["incidents"].push_back(IncidentJson(incident));
  return json;
}

// "GPU 2 driver FAIL DCGM_FR_…: … (seen 1x, first …, last …)\n    action: …"
std::string IncidentLine(std::string_view subject, const v1::SystemHealth& system,
                         const v1::HealthIncident& incident) {
  return fmt::format("{} {} {} {}{}: {} (seen {}x, first {}, last {})\n    action ({}): {}",
                     subject, system.system(), HealthStatusText(incident.status()), incident.code(),
                     incident.injected() ? " [injected]" : "", incident.message(), incident.count(),
                     FormatTimeUs(incident.first_seen_us()), FormatTimeUs(incident.last_seen_us()),
                     RecommendedActionText(incident.recommended_action()), incident.action());
}

// The unknown reason and the incidents of one system, as detail lines.
void AddDetails(std::string_view subject, const v1::SystemHealth& system,
                std::vector<std::string>* details) {
  if (!system.unknown_reason().empty()) {
    details->push_back(
        fmt::format("{} {} UNKNOWN: {}", subject, system.system(), system.unknown_reason()));
  }
  for (const auto& incident : system.incidents()) {
    details->push_back(IncidentLine(subject, system, incident));
  }
}

nlohmann::json VerdictJson(const v1::HealthVerdict& verdict) {
  nlohmann::json json = {{"instance_id", verdict.instance_id()},
                         {"seq", verdict.seq()},
                         {"timestamp", FormatTimeUs(verdict.timestamp_us())},
                         {"overall", std::string(HealthStatusText(verdict.overall()))},
                         {"gpus", nlohmann::json::array()}};
  for (const auto& gpu : verdict.gpus()) {
    nlohmann::json gpu_json = {{"gpu", gpu.gpu()},
                               {"uuid", gpu.uuid()},
                               {"status", std::string(HealthStatusText(gpu.status()))},
                               {"systems", nlohmann::json::object()}};
    for (const auto& system : gpu.systems())
      gpu_json["systems"][system.system()] = SystemJson(system);
    json["gpus"].push_back(gpu_json);
  }
  if (verdict.node_systems_size() > 0) {
    json["node"] = {{"systems", nlohmann::json::object()}};
    for (const auto& system : verdict.node_systems()) {
      json["node"]["systems"][system.system()] = SystemJson(system);
    }
  }
  return json;
}

void PrintVerdict(const v1::HealthVerdict& verdict) {
  std::vector<std::string> header = {"GPU", "UUID", "STATUS"};
  if (verdict.gpus_size() > 0) {
    for (const auto& system : verdict.gpus(0).systems()) {
      std::string name = system.system();
      for (char& c : name) c = static_cast<char>(std::toupper(c));
      header.push_back(name);
    }
  }
  Table table(header);
  std::vector<std::string> details;
  for (const auto& gpu : verdict.gpus()) {
    std::vector<std::string> row = {std::to_string(gpu.gpu()), gpu.uuid(),
                                    std::string(HealthStatusText(gpu.status()))};
    for (const auto& system : gpu.systems()) {
      row.emplace_back(HealthStatusText(system.status()));
      AddDetails(fmt::format("GPU {}", gpu.gpu()), system, &details);
    }
    table.AddRow(row);
  }
  table.Print(std::cout);
  if (verdict.node_systems_size() > 0) {
    std::string line = "\nNode:";
    for (const auto& system : verdict.node_systems()) {
      line += fmt::format(" {} {}", system.system(), HealthStatusText(system.status()));
      AddDetails("node", system, &details);
    }
    std::cout << line << '\n';
  }
  if (!details.empty()) {
    std::cout << "\nIncidents:\n";
    for (const std::string& line : details) std::cout << "  " << line << '\n';
  }
  std::cout << fmt::format("\nOverall: {} (engine instance {}, seq {}, {})\n",
                           HealthStatusText(verdict.overall()), verdict.instance_id(),
                           verdict.seq(), FormatTimeUs(verdict.timestamp_us()));
}

int RunHealth(const HealthFlags& flags) {
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("health", client.status());
  v1::GetHealthRequest request;
  if (flags.gpu >= 0) request.add_gpus(static_cast<uint32_t>(flags.gpu));
  auto verdict = (*client)->GetHealth(request);
  if (!verdict.ok()) return Fail("health", verdict.status());
  if (flags.client.json) {
    std::cout << VerdictJson(*verdict).dump() << std::endl;
  } else {
    PrintVerdict(*verdict);
  }
  if (verdict->overall() == v1::HEALTH_STATUS_UNKNOWN) {
    std::cerr << "vigil health: cannot tell: the engine has no fresh data for some systems "
                 "(see the reasons above)"
              << std::endl;
  }
  return ExitCodeFor(verdict->overall());
}

int RunClear(const HealthFlags& flags) {
  if (!flags.node && flags.gpu < 0) {
    return Fail(
        "health clear",
        "say what to clear: --gpu N (a GPU's systems) or --node (the node's nvswitch and nics)");
  }
  auto client = ConnectFromFlags(flags.client);
  if (!client.ok()) return Fail("health clear", client.status());
  v1::ClearHealthRequest request;
  if (flags.node) {
    request.set_node(true);
  } else {
    request.set_gpu(static_cast<uint32_t>(flags.gpu));
  }
  request.set_system(flags.system);
  auto before = (*client)->GetEngineInfo();
  if (!before.ok()) return Fail("health clear", before.status());
  auto cleared = (*client)->ClearHealth(request);
  if (!cleared.ok()) return Fail("health clear", cleared.status());
  // The verdict reflects the clear from the next tick: wait for it, so what is printed is true.
  v1::GetHealthRequest health_request;  // the node's systems come with any GPU's verdict
  if (!flags.node) health_request.add_gpus(static_cast<uint32_t>(flags.gpu));
  auto verdict = VerdictAfter(**client, *before, health_request);
  if (!verdict.ok()) return Fail("health clear", verdict.status());
  if (flags.client.json) {
    nlohmann::json json = {{"cleared", nlohmann::json::array()},
                           {"verdict", VerdictJson(*verdict)}};
    for (const auto& incident : cleared->cleared())
      json["cleared"].push_back(IncidentJson(incident));
    std::cout << json.dump() << std::endl;
    return kExitOk;
  }
  const std::string subject = flags.node ? "the node" : fmt::format("GPU {}", flags.gpu);
  std::cout << fmt::format("Cleared {} incident(s) on {}{}", cleared->cleared_size(), subject,
                           flags.system.empty() ? "" : " (" + flags.system + ")")
            << '\n';
  for (const auto& incident : cleared->cleared()) {
    std::cout << fmt::format("  {} {} {}: {}\n", incident.system(),
                             HealthStatusText(incident.status()), incident.code(),
                             incident.message());
  }
  // The GPU's own status (the verdict's overall counts the node's systems too).
  v1::HealthStatus now = verdict->gpus_size() == 1 ? verdict->gpus(0).status() : verdict->overall();
  if (flags.node) {
    now = v1::HEALTH_STATUS_PASS;
    for (const auto& system : verdict->node_systems()) {
      if (flags.system.empty() || system.system() == flags.system) now = system.status();
    }
  }
  std::cout << fmt::format(
      "{} is now {} (seq {}); a fault that still holds is raised again, one from before this clear "
      "is not.\n",
      flags.node ? "The node" : subject, HealthStatusText(now), verdict->seq());
  return kExitOk;
}

}  // namespace

absl::StatusOr<v1::HealthVerdict> VerdictAfter(EngineClient& client, const v1::EngineInfo& before,
                                               const v1::GetHealthRequest& request) {
  absl::StatusOr<v1::HealthVerdict> verdict;
  const absl::Time deadline =
      absl::Now() + absl::Microseconds(before.tick_interval_us()) * 3 + absl::Seconds(1);
  do {
    verdict = client.GetHealth(request);
    if (!verdict.ok() || verdict->seq() > before.seq()) return verdict;
    absl::SleepFor(absl::Milliseconds(50));  // polling the engine for its next tick
  } while (absl::Now() < deadline);
  return verdict;
}

CommandRunner AddHealthCommand(CLI::App* parent) {
  CLI::App* health = parent->add_subcommand(
      "health", "GPU health per system with incidents; exit 0 PASS/WARN, 1 FAIL, 2 cannot tell");
  auto flags = std::make_shared<HealthFlags>();
  AddClientFlags(health, &flags->client);
  health->add_option("--gpu", flags->gpu, "Only this GPU")->check(CLI::Range(0, 1023));
  CLI::App* clear = health->add_subcommand(
      "clear", "Clear a GPU's incidents, sticky failures included (privileged, audited)");
  AddClientFlags(clear, &flags->client);
  AddTokenFileFlag(clear, &flags->client);
  CLI::Option* gpu =
      clear->add_option("--gpu", flags->gpu, "GPU index")->check(CLI::Range(0, 1023));
  CLI::Option* node = clear->add_flag("--node", flags->node,
                                      "The node's own systems (nvswitch, nics), not a GPU's");
  gpu->excludes(node);
  std::vector<std::string> systems;
  for (const HealthSystemInfo& info : kHealthSystems) systems.emplace_back(info.name);
  clear
      ->add_option(
          "--system", flags->system,
          "Only this system (" + HealthSystemChoices() + " for a GPU; nvswitch for the node)")
      ->check(CLI::IsMember(systems));
  return [=] { return clear->parsed() ? RunClear(*flags) : RunHealth(*flags); };
}

}  // namespace vigil::cli
