// The network source: the node's NIC ports read from sysfs on the engine's tick (each port's state
// every state interval, its counters every counter interval, as the network policy sets them),
// judged by a PortJudge each, and reported as the `network` system of the GPUs each port serves
// (health/source.h). What cannot be read is said once when it starts and once when it ends, and
// makes the GPUs the port serves UNKNOWN, never PASS. A port's state changes are logged, one line
// each. The node's own `nics` system takes what is about no one GPU: the findings of a port that
// serves no GPU (the topology placed it nowhere, or the config said `[]`), and every port that was
// up being down at once (the node cut off: its switches, its cabling, the driver).
//
// The mlx5 driver's kernel-log lines (nic_log.h) come in through OnKernelLine(), from the kernel
// log's thread, and are judged at the next Judge() for the ports of their HCA (of their netdev,
// for a netdev's line); a line about an HCA the node's ports do not name is logged once.
//
// An operator's injections into a port's fields (port_injection.h) come in before each Judge():
// one that starts or ends makes that Judge() read every port again, so it applies at once; a
// finding that starts while its port is injected is flagged injected until it ends.
//
// Threading: Judge() and SetPortInjections() on the tick thread only (HealthSource); Ports(),
// NicPorts(), CheckPortInjection() and OnKernelLine() from any thread.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "health/network_policy.h"
#include "health/source.h"
#include "network/port_map.h"
#include "network/port_rules.h"
#include "network/sysfs_ports.h"

namespace vigil::network {

class NetworkMonitor final : public HealthSource {
 public:
  // `ports`: the node's port map (BuildPortMap); `gpu_count`: the engine's GPUs.
  NetworkMonitor(SysfsPorts reader, std::vector<MappedPort> ports, NetworkPolicy policy,
                 uint32_t gpu_count);

  std::vector<HealthSystem> systems() const override {
    return {HealthSystem::kNetwork, HealthSystem::kNics};
  }
  // Two reports: each GPU's `network`, then the node's `nics`.
  std::vector<SourceReport> Judge(absl::Time now) override;

  // The ports as last read (identity, GPUs, state), for discovery. Thread-safe.
  std::vector<MappedPort> Ports() const;
  std::vector<NicPortEntity> NicPorts() const override;
  absl::Status CheckPortInjection(const PortFieldInjection& injection) const override;
  void SetPortInjections(const std::vector<PortFieldInjection>& injections) override;
  // A kernel-log message (the record's text) logged at `time`: an mlx5 line is judged at the next
  // Judge() (true: taken); any other is not (false). Thread-safe; no I/O.
  bool OnKernelLine(std::string_view message, absl::Time time);

 private:
  struct Watched {
    MappedPort mapped;
    PortJudge judge;
    std::string said_state;     // the state last logged ("ACTIVE/LinkUp"), "" before any
    std::string said_problems;  // the read problems last logged, "" when none
    // Counter -> the last value published while injected (port_injection.h).
    std::map<std::string, uint64_t> counter_floors;
    std::set<std::string> reported_keys;  // the findings' keys at the last Judge()
    std::set<std::string> injected_keys;  // ... of those that started while the port was injected
  };
  // Flags the port's findings that started while it was injected, and remembers which hold.
  static void MarkInjected(Watched* watched, std::vector<SourceFinding>* findings);
  // Logs a port's state change and the start and end of its read problems, one line each.
  static void SayChanges(Watched* watched);
  // The node's finding when every port seen up since the start is down now; `findings`: this
  // judgement's (the GPUs' and the node's), for each port's own severity.
  std::optional<SourceFinding> AllDown(
      std::initializer_list<const std::vector<SourceFinding>*> findings) const;
  // The rate most up ports of `layer` other than `except` trained at; nullopt: none.
  std::optional<double> PeerRate(size_t except) const;

  const SysfsPorts reader_;
  const NetworkPolicy policy_;
  const uint32_t gpu_count_;
  // Tick thread only.
  std::vector<Watched> watched_;
  absl::Time next_state_ = absl::InfinitePast();
  absl::Time next_counters_ = absl::InfinitePast();
  std::vector<PortFieldInjection> injections_;  // the active ones
  bool injections_changed_ = false;             // since the last Judge()

  // Hands the queued kernel-log lines to the judges of their ports (tick thread).
  void JudgeLogLines();

  absl::Mutex lines_mutex_;  // a leaf
  std::vector<std::pair<NicLogLine, absl::Time>> lines_ ABSL_GUARDED_BY(lines_mutex_);
  std::set<std::string> unknown_hcas_said_;  // tick thread

  mutable absl::Mutex ports_mutex_;                              // a leaf
  std::vector<MappedPort> ports_ ABSL_GUARDED_BY(ports_mutex_);  // a copy, for Ports()
};

}  // namespace vigil::network
