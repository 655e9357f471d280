// What counts as an unhealthy NIC port, as data: how often ports are read, when a port that is
// not up fails the GPUs it serves, when it counts as recovered, and the error-counter rules. The
// built-in defaults are the peers' published thresholds, each with its source (docs/health.md's
// network section): NVIDIA NVSentinel's nic-health-monitor for the counters, leptonai/gpud's
// infiniband component for the down and recovery windows. The engine config's `network:` section
// overrides them. A plain value type; the parser is a pure function; thread-compatible.
//
//   network:
//     state_interval: 1s        # how often each port's state is read (100ms .. 1m)
//     counter_interval: 30s     # how often its counters are read (1s .. 1h; DCGM's 30 s class)
//     ports:                    # the GPUs a port serves, where the PCI topology says otherwise
//       mlx5_0/1: [0]           # ([] : the node's, no GPU's)
//     state:
//       fail_after: 10s         # a port not ACTIVE/LinkUp warns at once, fails after this
//       training_fail_after: 4m # ... while its link trains (Polling, LinkErrorRecovery)
//       recovery_window: 10m    # back up, its incident ends once it stayed up this long
//       rate_degraded: true     # WARN when it trained slower than its first rate or its peers
//     counters:                 # rules by name: change a built-in one, add one, or turn it off
//       symbol_error_ber: {over: 120, per: 1h}
//       rcv_errors_burst: {counter: port_rcv_errors, over: 10, per: 1s, status: WARN}
//       rnr_nak_retry: off
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "health/policy.h"
#include "yaml-cpp/yaml.h"

namespace vigil {

// A counter rule: the counter's increase over the trailing `per` above `over` holds the rule.
// Where reads are further apart than `per`, the increase between the last two reads is scaled to
// `per` (a rate); where fewer than `per` of reads exist, the increase so far counts as it is (a
// short span already past the threshold is past it).
struct NetworkCounterRule {
  std::string name;     // "symbol_error_ber": the config's key and the incident key's part
  std::string counter;  // the sysfs file under counters/ or hw_counters/: "symbol_error"
  double over = 0;      // more than this many ...
  absl::Duration per = absl::Hours(1);        // ... within this long
  HealthStatus status = HealthStatus::kWarn;  // kWarn or kFail (a FAIL is sticky)
  std::string code;                           // VIGIL_FR_NET_*
  std::string meaning;                        // what it means, for the message
  std::string action;                         // what to do
  RecommendedAction recommended = RecommendedAction::kInspect;
  std::string source;  // where the threshold comes from
};

struct NetworkPolicy {
  absl::Duration state_interval = absl::Seconds(1);
  absl::Duration counter_interval = absl::Seconds(30);
  // Port name ("mlx5_0/1") -> the engine GPU indexes it serves (empty: node-level).
  std::map<std::string, std::vector<uint32_t>> ports;
  // A port expected up (seen ACTIVE/LinkUp since the engine started) that is not: WARN at once,
  // FAIL once it has lasted `fail_after`; while its physical link trains (Polling,
  // LinkErrorRecovery: the driver is trying) only after `training_fail_after`.
  absl::Duration fail_after = absl::Seconds(10);
  absl::Duration training_fail_after = absl::Minutes(4);
  // A port back up keeps its worst status of the episode until it has stayed up this long.
  absl::Duration recovery_window = absl::Minutes(10);
  bool rate_degraded = true;
  std::vector<NetworkCounterRule> counters;  // in evaluation order
};

// The built-in policy (see network_policy.cc for each rule's source).
NetworkPolicy DefaultNetworkPolicy();

// Applies a config file's `network:` section. Errors: "SOURCE:LINE: network.PATH: ...".
absl::Status ApplyNetworkConfig(const YAML::Node& node, const std::string& source,
                                NetworkPolicy* policy);

}  // namespace vigil
