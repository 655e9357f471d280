// The NIC port entity every side shares (issue 29): an InfiniBand port, or a RoCE port of an
// Ethernet NIC, with the GPUs it serves and its state as last read. The network source produces
// it, the engine serves it (discovery: ListGpus' nic_ports), the API and its clients name it. The
// state words are the kernel's, as sysfs prints them ("ACTIVE", "LinkUp"), where read; "" where
// not read or not readable. Plain struct; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vigil {

struct NicPortEntity {
  std::string name;            // "mlx5_0/1": HCA/PORT, as sysfs names it
  std::string pci_bus_id;      // the HCA's PCI function, "0000:17:00.0"; "" where sysfs has none
  std::string link_layer;      // "InfiniBand" or "Ethernet"; "" unknown
  std::string netdev;          // a RoCE port's netdev ("ens8f0np0"); "" for InfiniBand
  std::vector<uint32_t> gpus;  // the GPUs it serves (engine indexes); empty: the node's
  // How the GPUs were found: "pcie-switch", "numa-node", "config" or "none".
  std::string attachment;
  std::string state;       // "ACTIVE"
  std::string phys_state;  // "LinkUp"
  double rate_gbps = 0;    // 0: unknown
  uint32_t lanes = 0;
  std::string speed;  // "NDR"
  // The states' numbers as sysfs prints them before the name ("4: ACTIVE"); -1 where not read.
  int state_id = -1;
  int phys_state_id = -1;
  // counters/ and hw_counters/ as last read, by file name ("symbol_error", "port_xmit_data").
  std::map<std::string, uint64_t> counters;
  // The fields whose value above is injected, not read ("state", "link_downed"), sorted.
  std::vector<std::string> injected;

  bool operator==(const NicPortEntity&) const = default;
};

}  // namespace vigil
