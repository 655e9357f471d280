// Implements the network source: the read schedule, the report and the log lines.
#include "network/monitor.h"

#include <algorithm>
#include <map>
#include <utility>

#include "fmt/format.h"
#include "network/port_injection.h"
#include "spdlog/spdlog.h"

namespace vigil::network {
namespace {

std::string StateText(const NicPort& port) {
  if (!port.state.has_value() || !port.phys_state.has_value()) return "";
  return fmt::format("{}/{}", PortStateName(*port.state), PhysStateName(*port.phys_state));
}

std::string Problems(const NicPort& port) {
  std::string out;
  for (const auto* lines : {&port.state_problems, &port.counter_problems}) {
    for (const std::string& line : *lines) out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

}  // namespace

NetworkMonitor::NetworkMonitor(SysfsPorts reader, std::vector<MappedPort> ports,
                               NetworkPolicy policy, uint32_t gpu_count)
    : reader_(std::move(reader)), policy_(std::move(policy)), gpu_count_(gpu_count) {
  for (MappedPort& port : ports) {
    std::erase_if(port.attachment.gpus, [&](uint32_t gpu) { return gpu >= gpu_count_; });
    PortJudge judge(port.port.Name());
    watched_.push_back({.mapped = std::move(port), .judge = std::move(judge)});
  }
  absl::MutexLock lock(&ports_mutex_);
  for (const Watched& watched : watched_) ports_.push_back(watched.mapped);
}

void NetworkMonitor::SayChanges(Watched* watched) {
  const NicPort& port = watched->mapped.port;
  const std::string problems = Problems(port);
  if (problems != watched->said_problems) {
    if (problems.empty()) {
      spdlog::info("network: port {} is readable again", port.Name());
    } else {
      spdlog::warn("network: port {} cannot be judged (its GPUs' network is UNKNOWN): {}",
                   port.Name(), problems);
    }
    watched->said_problems = problems;
  }
  const std::string state = StateText(port);
  if (!state.empty() && state != watched->said_state) {
    if (watched->said_state.empty()) {
      spdlog::info("network: port {} is {}", port.Name(), state);
    } else if (state == "ACTIVE/LinkUp") {
      spdlog::info("network: port {} is {} (was {})", port.Name(), state, watched->said_state);
    } else {
      spdlog::warn("network: port {} is {} (was {})", port.Name(), state, watched->said_state);
    }
    watched->said_state = state;
  }
}

std::optional<double> NetworkMonitor::PeerRate(size_t except) const {
  const std::optional<LinkLayer> layer = watched_[except].judge.link_layer();
  std::map<double, size_t> votes;
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (i == except || watched_[i].judge.link_layer() != layer) continue;
    if (auto rate = watched_[i].judge.up_rate(); rate.has_value()) ++votes[rate->gbps];
  }
  std::optional<double> peer;
  size_t most = 0;
  for (const auto& [gbps, count] : votes) {  // ascending: a tie goes to the faster rate
    if (count >= most) {
      most = count;
      peer = gbps;
    }
  }
  return peer;
}

bool NetworkMonitor::OnKernelLine(std::string_view message, absl::Time time) {
  std::optional<NicLogLine> line = ParseNicLogLine(message);
  if (!line.has_value()) return false;
  absl::MutexLock lock(&lines_mutex_);
  lines_.emplace_back(*std::move(line), time);
  return true;
}

void NetworkMonitor::JudgeLogLines() {
  std::vector<std::pair<NicLogLine, absl::Time>> lines;
  {
    absl::MutexLock lock(&lines_mutex_);
    lines.swap(lines_);
  }
  for (const auto& [line, time] : lines) {
    // A netdev's line is about the ports over that netdev; a device line about every port of
    // the HCA.
    bool matched = false;
    for (Watched& watched : watched_) {
      const NicPort& port = watched.mapped.port;
      const bool same =
          port.pci_bus_id == line.pci_bus_id &&
          (line.netdev.empty() || (port.net.has_value() && port.net->name == line.netdev));
      if (!same) continue;
      matched = true;
      watched.judge.ObserveLog(line, time);
      if (line.kind == NicLogKind::kLinkUp) {
        spdlog::info("network: port {}: the mlx5 driver logged \"{}\"", port.Name(), line.text);
      } else {
        spdlog::warn("network: port {}: the mlx5 driver logged \"{}\"", port.Name(), line.text);
      }
    }
    if (!matched && unknown_hcas_said_.insert(line.pci_bus_id).second) {
      spdlog::warn(
          "network: the mlx5 driver logged \"{}\" for {}{}, which none of the node's ports "
          "is on (not judged)",
          line.text, line.pci_bus_id, line.netdev.empty() ? "" : " " + line.netdev);
    }
  }
}

absl::Status NetworkMonitor::CheckPortInjection(const PortFieldInjection& injection) const {
  absl::MutexLock lock(&ports_mutex_);
  for (const MappedPort& mapped : ports_) {
    if (mapped.port.Name() == injection.port) {
      return network::CheckPortInjection(mapped.port, injection);
    }
  }
  return absl::NotFoundError("no NIC port " + injection.port);
}

void NetworkMonitor::SetPortInjections(const std::vector<PortFieldInjection>& injections) {
  if (injections == injections_) return;
  injections_ = injections;
  injections_changed_ = true;
}

void NetworkMonitor::MarkInjected(Watched* watched, std::vector<SourceFinding>* findings) {
  const bool injected_now = !watched->mapped.port.injected.empty();
  std::set<std::string> keys;
  for (SourceFinding& finding : *findings) {
    keys.insert(finding.key);
    if (injected_now && !watched->reported_keys.contains(finding.key)) {
      watched->injected_keys.insert(finding.key);
    }
    finding.injected = watched->injected_keys.contains(finding.key);
  }
  std::erase_if(watched->injected_keys,
                [&](const std::string& key) { return !keys.contains(key); });
  watched->reported_keys = std::move(keys);
}

std::vector<SourceReport> NetworkMonitor::Judge(absl::Time now) {
  JudgeLogLines();
  // An injection that started or ended applies now, not at the next scheduled read.
  const bool reread = std::exchange(injections_changed_, false);
  const bool state_due = now >= next_state_ || reread;
  const bool counters_due = now >= next_counters_ || reread;
  if (now >= next_state_) next_state_ = now + policy_.state_interval;
  if (now >= next_counters_) next_counters_ = now + policy_.counter_interval;
  for (Watched& watched : watched_) {
    if (state_due) {
      reader_.ReadState(&watched.mapped.port);
      ApplyStateInjections(injections_, &watched.mapped.port);
      watched.judge.ObserveState(watched.mapped.port, now, policy_);
    }
    if (counters_due) {
      reader_.ReadCounters(&watched.mapped.port);
      ApplyCounterInjections(injections_, &watched.mapped.port, &watched.counter_floors);
      watched.judge.ObserveCounters(watched.mapped.port, now, policy_);
    }
    if (state_due || counters_due) SayChanges(&watched);
  }
  SourceReport gpus{.system = HealthSystem::kNetwork};
  gpus.unknown.assign(gpu_count_, "");
  SourceReport node{.system = HealthSystem::kNics, .unknown = {""}};
  const auto add_unknown = [](std::string* reason, const std::string& more) {
    *reason += (reason->empty() ? "" : "; ") + more;
  };
  for (size_t i = 0; i < watched_.size(); ++i) {
    const std::vector<uint32_t>& served = watched_[i].mapped.attachment.gpus;
    // A port that serves no GPU (a storage or management port, or one the config said `[]` of) is
    // the node's own.
    std::vector<SourceFinding> findings = watched_[i].judge.Findings(now, policy_, PeerRate(i));
    MarkInjected(&watched_[i], &findings);
    for (SourceFinding& finding : findings) {
      finding.gpus = served;
      (served.empty() ? node : gpus).findings.push_back(std::move(finding));
    }
    if (const std::string unknown = watched_[i].judge.Unknown(); !unknown.empty()) {
      if (served.empty()) add_unknown(&node.unknown[0], unknown);
      for (uint32_t gpu : served) add_unknown(&gpus.unknown[gpu], unknown);
    }
  }
  if (std::optional<SourceFinding> all_down = AllDown({&gpus.findings, &node.findings})) {
    node.findings.push_back(*std::move(all_down));
  }
  if (state_due || counters_due) {
    absl::MutexLock lock(&ports_mutex_);
    for (size_t i = 0; i < watched_.size(); ++i) ports_[i] = watched_[i].mapped;
  }
  std::vector<SourceReport> reports;
  reports.push_back(std::move(gpus));
  reports.push_back(std::move(node));
  return reports;
}

std::optional<SourceFinding> NetworkMonitor::AllDown(
    std::initializer_list<const std::vector<SourceFinding>*> findings) const {
  std::vector<const Watched*> seen_up;
  for (const Watched& watched : watched_) {
    if (watched.judge.seen_up()) seen_up.push_back(&watched);
  }
  if (seen_up.empty() || std::any_of(seen_up.begin(), seen_up.end(), [](const Watched* watched) {
        return !watched->judge.down();
      })) {
    return std::nullopt;
  }
  // As severe as the least severe of the ports' own down findings: FAIL once every port's grace
  // has passed.
  HealthStatus status = HealthStatus::kFail;
  bool injected = false;  // some port's down is a drill's
  std::string ports;
  for (const Watched* watched : seen_up) {
    const std::string name = watched->mapped.port.Name();
    const std::string key = fmt::format("network.state.{}", name);
    injected |= watched->injected_keys.contains(key);
    bool failed = false;
    for (const std::vector<SourceFinding>* list : findings) {
      for (const SourceFinding& finding : *list) {
        failed |= finding.key == key && finding.status == HealthStatus::kFail;
      }
    }
    if (!failed) status = HealthStatus::kWarn;
    ports +=
        fmt::format("{}{} {}", ports.empty() ? "" : ", ", name, StateText(watched->mapped.port));
  }
  return SourceFinding{
      .status = status,
      .key = "nics.all_down",
      .code = "VIGIL_FR_NET_ALL_PORTS_DOWN",
      .message = fmt::format(
          "every NIC port of the node that was up is down ({} port{}: {}): the node is cut off "
          "from its network, not one GPU",
          seen_up.size(), seen_up.size() == 1 ? "" : "s", ports),
      .action =
          "check what the ports share — the leaf switches, the node's cabling, the mlx5 "
          "driver and firmware (ibstat; dmesg | grep mlx5) — and drain the node until a "
          "port is back",
      .recommended = RecommendedAction::kInspect,
      .sticky = false,  // it ends as a port comes back (each GPU's own incident keeps its window)
      .injected = injected};
}

std::vector<MappedPort> NetworkMonitor::Ports() const {
  absl::MutexLock lock(&ports_mutex_);
  return ports_;
}

std::vector<NicPortEntity> NetworkMonitor::NicPorts() const {
  std::vector<NicPortEntity> entities;
  for (const MappedPort& mapped : Ports()) {
    const NicPort& port = mapped.port;
    NicPortEntity& entity = entities.emplace_back();
    entity.name = port.Name();
    entity.pci_bus_id = port.pci_bus_id;
    if (port.link_layer.has_value()) entity.link_layer = LinkLayerName(*port.link_layer);
    if (port.net.has_value()) entity.netdev = port.net->name;
    entity.gpus = mapped.attachment.gpus;
    entity.attachment =
        mapped.overridden ? "config" : std::string(AffinityName(mapped.attachment.affinity));
    if (port.state.has_value()) {
      entity.state = PortStateName(*port.state);
      entity.state_id = static_cast<int>(*port.state);
    }
    if (port.phys_state.has_value()) {
      entity.phys_state = PhysStateName(*port.phys_state);
      entity.phys_state_id = static_cast<int>(*port.phys_state);
    }
    if (port.rate.has_value()) {
      entity.rate_gbps = port.rate->gbps;
      entity.lanes = port.rate->lanes;
      entity.speed = port.rate->speed;
    }
    entity.counters = port.counters;
    entity.injected = port.injected;
  }
  return entities;
}

}  // namespace vigil::network
