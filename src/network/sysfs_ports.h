// Reads the node's NIC ports from sysfs: discovery (which HCAs and ports exist, each HCA's PCI
// function, the link layer and, for a RoCE port, its netdev) and, per port, the state files (read
// every second by the engine) and the counters (every 30 s, DCGM's class for error counters).
// Paths are the kernel's: SYSFS/class/infiniband/HCA/ports/N/{state,phys_state,rate,link_layer,
// counters/*,hw_counters/*,gid_attrs/ndevs/0 (a RoCE port's netdev)}, SYSFS/class/infiniband/
// HCA/device (a link to the PCI function, whose net/ directory names the netdev where the port's
// GID does not) and SYSFS/class/net/IF/{carrier,speed,mtu}. docs/network.md cites each. SYSFS is
// `/sys`, or what --sysfs-root names (tests, and containers that mount the host's /sys elsewhere).
// Files are read through Env (ReadFile, ListDir), so tests can fail any read; a link's target is
// resolved with std::filesystem (sysfs is only read, never written).
// Thread-compatible: one reader per thread (the engine's tick thread).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "network/port.h"

namespace vigil::network {

class SysfsPorts {
 public:
  // `sysfs_root`: the sysfs mount ("/sys"). InvalidArgument, naming the flag's value, when it is
  // not a directory; a root without class/infiniband is a node without RDMA ports (no error).
  // `env` must outlive the reader.
  static absl::StatusOr<SysfsPorts> Open(Env* env, std::string sysfs_root);

  // The ports present now, sorted by HCA name then port number: identity (HCA, port, the HCA's
  // PCI bus id, the link layer and a RoCE port's netdev); state and counters are not read. An HCA
  // whose ports cannot be listed is left out with one line in `problems`.
  struct Discovery {
    std::vector<NicPort> ports;
    std::vector<std::string> problems;  // one line per HCA or file that could not be read
  };
  Discovery Discover() const;

  // Reads the port's state, physical state and rate, and a RoCE port's netdev carrier, speed and
  // MTU, into `port`. Each file that cannot be read or parsed unsets its value and adds one line
  // to port->state_problems (cleared first). An unreadable carrier or speed (the kernel refuses
  // them while the interface is down) is unknown, not a problem.
  void ReadState(NicPort* port) const;
  // Reads every counters/ and hw_counters/ file of the port into port->counters (replaced). A
  // file that cannot be read or parsed is left out and adds one line to port->counter_problems
  // (cleared first).
  void ReadCounters(NicPort* port) const;

  const std::string& root() const { return root_; }

 private:
  SysfsPorts(Env* env, std::string root) : env_(env), root_(std::move(root)) {}

  std::string PortDir(const NicPort& port) const;

  Env* env_;
  std::string root_;
};

}  // namespace vigil::network
