// Judges one NIC port over time against the network policy (health/network_policy.h): the state
// rule (a port seen up that is not ACTIVE/LinkUp warns at once and fails after a grace period; back
// up, it clears once it stayed up for the recovery window), the rate rule (trained slower than its
// first rate or than the node's other ports), and the counter rules (an error counter's increase
// over a window). Findings name no GPU: the monitor adds the GPUs the port serves. A port never
// seen up since the engine started is not judged down (a port left uncabled by design would fail
// its GPUs forever); docs/health.md says so.
//
// Pure: time comes in as arguments. Thread-compatible (the tick thread owns each judge).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "health/network_policy.h"
#include "health/source.h"
#include "network/nic_log.h"
#include "network/port.h"

namespace vigil::network {

// How long a driver's warning line (not a fatal one) holds its port's WARN.
inline constexpr absl::Duration kLogWindow = absl::Hours(1);

class PortJudge {
 public:
  explicit PortJudge(std::string port_name) : name_(std::move(port_name)) {}

  // After each state read of the port (NicPort::state_problems says what could not be read).
  void ObserveState(const NicPort& port, absl::Time now, const NetworkPolicy& policy);
  // After each counters read (NicPort::counter_problems likewise).
  void ObserveCounters(const NicPort& port, absl::Time now, const NetworkPolicy& policy);
  // A driver's kernel-log line about the port's HCA (or its netdev), logged at `time`.
  void ObserveLog(const NicLogLine& line, absl::Time time);

  // What holds at `now`, with no GPU named. `peer_gbps`: the rate most of the node's other up
  // ports of this port's link layer trained at (nullopt: no peers).
  std::vector<SourceFinding> Findings(absl::Time now, const NetworkPolicy& policy,
                                      std::optional<double> peer_gbps) const;
  // Why the port cannot be judged now ("" when it can): the last reads' problems.
  std::string Unknown() const;

  // The rate it trained at while up (for the peers' comparison); nullopt while not up.
  std::optional<PortRate> up_rate() const { return up_ ? rate_ : std::nullopt; }
  std::optional<LinkLayer> link_layer() const { return link_layer_; }
  // Seen ACTIVE/LinkUp since the engine started (only such a port is judged down).
  bool seen_up() const { return seen_up_; }
  // Down now (not back up within its recovery window either).
  bool down() const { return episode_.has_value() && !episode_->up_since.has_value(); }

 private:
  // A stretch of not being up, from its first down to the end of its recovery window.
  struct Episode {
    absl::Time down_since;               // of the latest down
    std::optional<absl::Time> up_since;  // back up since; nullopt while down
    std::string how;                     // "DOWN/Disabled": the state it was in, as sysfs spells it
    bool training = false;               // its physical link trains (Polling, LinkErrorRecovery)
    HealthStatus worst = HealthStatus::kWarn;
    uint32_t downs = 1;
  };
  struct Breach {
    uint64_t increase = 0;
    absl::Duration span;
  };

  const std::string name_;
  std::optional<LinkLayer> link_layer_;
  std::optional<PortRate> rate_;
  std::optional<PortRate> first_rate_;  // the first rate seen while up
  bool up_ = false;
  bool seen_up_ = false;
  std::optional<Episode> episode_;
  std::vector<std::string> state_problems_, counter_problems_;
  // Per counter: (read time, value) within the longest rule's window, oldest first.
  std::map<std::string, std::deque<std::pair<absl::Time, uint64_t>>> samples_;
  std::map<std::string, Breach> breaches_;  // by rule name: the rules that held at the last read
  struct Logged {
    absl::Time last;
    std::string text;
    uint32_t count = 0;
  };
  std::map<NicLogKind, Logged> logged_;  // the driver's lines about it, by kind
};

}  // namespace vigil::network
