// Implements the port judge: the state episode, the rate comparison and the counter windows.
#include "network/port_rules.h"

#include <algorithm>

#include "fmt/format.h"

namespace vigil::network {
namespace {

constexpr std::string_view kCableAction =
    "check the port's cable, transceiver and switch port (ibstat, mlxlink); reseat or replace what "
    "is faulty";

std::string_view LogCode(NicLogKind kind) {
  switch (kind) {
    case NicLogKind::kFatal:
      return "VIGIL_FR_NET_NIC_FATAL";
    case NicLogKind::kModule:
      return "VIGIL_FR_NET_MODULE";
    case NicLogKind::kLinkDown:
    case NicLogKind::kLinkUp:
      return "VIGIL_FR_NET_LINK_DOWN_LOGGED";
    case NicLogKind::kPower:
      return "VIGIL_FR_NET_SLOT_POWER";
    case NicLogKind::kTxTimeout:
      return "VIGIL_FR_NET_TX_TIMEOUT";
  }
  return "VIGIL_FR_NET_NIC_FATAL";
}

std::string When(absl::Time time) {
  return absl::FormatTime("%H:%M:%S UTC", time, absl::UTCTimeZone());
}
std::string For(absl::Duration length) {
  return absl::FormatDuration(absl::Trunc(length, absl::Seconds(1)));
}

std::string RateText(const PortRate& rate) {
  std::string text = fmt::format("{:g} Gb/sec", rate.gbps);
  if (rate.lanes > 0)
    text += fmt::format(" ({}X{}{})", rate.lanes, rate.speed.empty() ? "" : " ", rate.speed);
  return text;
}

bool Training(const std::optional<PhysState>& phys) {
  return phys == PhysState::kPolling || phys == PhysState::kLinkErrorRecovery;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += (out.empty() ? "" : "; ") + line;
  return out;
}

}  // namespace

void PortJudge::ObserveState(const NicPort& port, absl::Time now, const NetworkPolicy& policy) {
  state_problems_ = port.state_problems;
  if (port.link_layer.has_value()) link_layer_ = port.link_layer;
  if (!port.state.has_value() || !port.phys_state.has_value()) return;  // unknown: Unknown()
  up_ = *port.state == PortState::kActive && *port.phys_state == PhysState::kLinkUp;
  rate_ = port.rate;
  if (up_) {
    seen_up_ = true;
    if (!first_rate_.has_value()) first_rate_ = port.rate;
    if (episode_.has_value() && !episode_->up_since.has_value()) {
      // Down until now: its status at the end counts, however short the reads made it.
      const absl::Duration grace =
          episode_->training ? policy.training_fail_after : policy.fail_after;
      if (now - episode_->down_since >= grace) episode_->worst = HealthStatus::kFail;
      episode_->up_since = now;
    }
    if (episode_.has_value() && now - *episode_->up_since >= policy.recovery_window) {
      episode_.reset();
    }
    return;
  }
  if (!seen_up_) return;  // never up since the engine started: not expected up
  const std::string how =
      fmt::format("{}/{}", PortStateName(*port.state), PhysStateName(*port.phys_state));
  if (!episode_.has_value()) {
    episode_ = Episode{.down_since = now, .how = how};
  } else if (episode_->up_since.has_value()) {
    episode_->up_since.reset();  // down again within the recovery window: the same episode
    episode_->down_since = now;
    ++episode_->downs;
  }
  episode_->how = how;
  episode_->training = Training(port.phys_state);
  const absl::Duration grace = episode_->training ? policy.training_fail_after : policy.fail_after;
  if (now - episode_->down_since >= grace) episode_->worst = HealthStatus::kFail;
}

void PortJudge::ObserveCounters(const NicPort& port, absl::Time now, const NetworkPolicy& policy) {
  counter_problems_ = port.counter_problems;
  breaches_.clear();
  absl::Duration longest = absl::ZeroDuration();
  for (const NetworkCounterRule& rule : policy.counters) longest = std::max(longest, rule.per);
  for (const NetworkCounterRule& rule : policy.counters) {
    auto value = port.counters.find(rule.counter);
    if (value == port.counters.end()) continue;  // this HCA has no such counter
    auto& samples = samples_[rule.counter];
    if (samples.empty() || samples.back().first != now) {
      // A counter that went back was reset (perfquery -R, a driver reload): count from here.
      if (!samples.empty() && value->second < samples.back().second) samples.clear();
      samples.emplace_back(now, value->second);
    }
    // Keep the newest sample at or before the longest window's start as its baseline.
    while (samples.size() > 1 && samples[1].first <= now - longest) samples.pop_front();
    if (samples.size() < 2) continue;  // no increase seen yet
    // The baseline: the newest sample at or before now - per, else the oldest (a shorter span).
    auto baseline = samples.begin();
    for (auto it = samples.begin(); it != samples.end() && it->first <= now - rule.per; ++it) {
      baseline = it;
    }
    const uint64_t increase = samples.back().second - baseline->second;
    const absl::Duration span = samples.back().first - baseline->first;
    // Reads further apart than `per` give a rate: the increase scaled to `per`.
    const double over_per =
        static_cast<double>(increase) * absl::FDivDuration(rule.per, std::max(span, rule.per));
    if (over_per > rule.over) breaches_[rule.name] = {increase, span};
  }
  // Samples of counters no rule reads any more (a config change) are not kept.
  std::erase_if(samples_, [&](const auto& entry) { return !port.counters.contains(entry.first); });
}

void PortJudge::ObserveLog(const NicLogLine& line, absl::Time time) {
  if (line.kind == NicLogKind::kLinkUp) return;  // the state rule judges the link as it is now
  Logged& logged = logged_[line.kind];
  logged.last = std::max(logged.last, time);
  logged.text = line.text;
  ++logged.count;
}

std::vector<SourceFinding> PortJudge::Findings(absl::Time now, const NetworkPolicy& policy,
                                               std::optional<double> peer_gbps) const {
  std::vector<SourceFinding> findings;
  if (episode_.has_value()) {
    SourceFinding& finding = findings.emplace_back();
    finding.key = fmt::format("network.state.{}", name_);
    finding.code = "VIGIL_FR_NET_PORT_DOWN";
    finding.sticky = false;  // it ends with the recovery window
    finding.action = std::string(kCableAction);
    finding.recommended = RecommendedAction::kInspect;
    const absl::Duration grace =
        episode_->training ? policy.training_fail_after : policy.fail_after;
    finding.status = episode_->worst;
    if (!episode_->up_since.has_value()) {
      if (now - episode_->down_since >= grace) finding.status = HealthStatus::kFail;
      finding.message =
          fmt::format("port {} is {} since {} ({}){}", name_, episode_->how,
                      When(episode_->down_since), For(now - episode_->down_since),
                      finding.status == HealthStatus::kFail
                          ? ""
                          : fmt::format("; it fails the GPU after {}{}", For(grace),
                                        episode_->training ? " (its link is training)" : ""));
    } else {
      finding.message = fmt::format(
          "port {} was {} (down {} time{}); back ACTIVE/LinkUp since {}, it clears after {} up "
          "(the recovery window)",
          name_, episode_->how, episode_->downs, episode_->downs == 1 ? "" : "s",
          When(*episode_->up_since), For(policy.recovery_window));
    }
  }
  if (policy.rate_degraded && up_ && rate_.has_value()) {
    std::string below;
    if (first_rate_.has_value() && rate_->gbps < first_rate_->gbps) {
      below = fmt::format("its first rate since the engine started, {}", RateText(*first_rate_));
    } else if (peer_gbps.has_value() && rate_->gbps < *peer_gbps) {
      below = fmt::format("the {:g} Gb/sec most of the node's other {} ports trained at",
                          *peer_gbps, link_layer_.has_value() ? LinkLayerName(*link_layer_) : "");
    }
    if (!below.empty()) {
      findings.push_back({.status = HealthStatus::kWarn,
                          .key = fmt::format("network.rate.{}", name_),
                          .code = "VIGIL_FR_NET_PORT_DEGRADED",
                          .message = fmt::format("port {} trained at {}, below {}: a lane or its "
                                                 "speed is lost",
                                                 name_, RateText(*rate_), below),
                          .action = std::string(kCableAction),
                          .recommended = RecommendedAction::kInspect,
                          .sticky = false});
    }
  }
  for (const auto& [kind, logged] : logged_) {
    // A fatal line fails for good (sticky, as a firmware fault takes a reboot to mend); the others
    // warn for kLogWindow after the last one.
    const bool fatal = kind == NicLogKind::kFatal;
    if (!fatal && now - logged.last >= kLogWindow) continue;
    findings.push_back(
        {.status = fatal ? HealthStatus::kFail : HealthStatus::kWarn,
         .key = fmt::format("network.log.{}.{}", NicLogKindName(kind), name_),
         .code = std::string(LogCode(kind)),
         .message = fmt::format("port {}: the mlx5 driver logged \"{}\" at {}{}", name_,
                                logged.text, When(logged.last),
                                logged.count > 1 ? fmt::format(" ({} lines)", logged.count) : ""),
         .action = fatal ? "drain the node and reboot it (the NIC's firmware failed); if it comes "
                           "back, replace the NIC"
                         : std::string(kCableAction),
         .recommended = fatal ? RecommendedAction::kReboot : RecommendedAction::kInspect,
         .sticky = fatal});
  }
  for (const NetworkCounterRule& rule : policy.counters) {
    auto breach = breaches_.find(rule.name);
    if (breach == breaches_.end()) continue;
    findings.push_back({.status = rule.status,
                        .key = fmt::format("network.{}.{}", rule.name, name_),
                        .code = rule.code,
                        .message = fmt::format(
                            "port {}: {} rose by {} in {} (the rule {}: more than {:g} per {}): {}",
                            name_, rule.counter, breach->second.increase, For(breach->second.span),
                            rule.name, rule.over, absl::FormatDuration(rule.per), rule.meaning),
                        .action = rule.action,
                        .recommended = rule.recommended,
                        .sticky = rule.status == HealthStatus::kFail});
  }
  return findings;
}

std::string PortJudge::Unknown() const {
  std::vector<std::string> problems = state_problems_;
  problems.insert(problems.end(), counter_problems_.begin(), counter_problems_.end());
  if (problems.empty()) return "";
  return fmt::format("port {} cannot be judged: {}", name_, Join(problems));
}

}  // namespace vigil::network
