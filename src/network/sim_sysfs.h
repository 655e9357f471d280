// A sysfs tree written under a directory, laid out as the kernel lays out the parts the network
// source reads: PCI functions under devices/pciDDDD:BB/... with their bus/pci/devices links and
// numa_node, InfiniBand HCAs under class/infiniband/HCA (ports/N/{state,phys_state,rate,
// link_layer,counters/*,hw_counters/*} and the `device` link to the PCI function) and, for RoCE,
// the netdev under the function's net/ with its class/net link. Files hold what the kernel prints
// ("4: ACTIVE\n"). The simulated node's NIC ports (`vigil engine --backend sim --sim-nics N`) are
// such a tree, which an operator (or a test) changes file by file to change a port.
// Not thread-safe; one owner. Every failure to write is a Status naming the path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vigil::network {

class SimSysfs {
 public:
  // Uses `root` (created if missing; what is there is kept).
  static absl::StatusOr<SimSysfs> Create(std::string root);

  // A PCI function at `path` (host bridge first, the function's bus id last, e.g. {"pci0000:16",
  // "0000:16:02.0", "0000:17:00.0", "0000:18:01.0", "0000:19:00.0"}), on `numa_node` (-1: none).
  // Precondition: at least the bridge and the function.
  absl::Status AddPciFunction(const std::vector<std::string>& path, int numa_node);

  struct Port {
    std::string state = "4: ACTIVE";
    std::string phys_state = "5: LinkUp";
    std::string rate = "400 Gb/sec (4X NDR)";
    std::string link_layer = "InfiniBand";
    std::map<std::string, uint64_t> counters = {{"symbol_error", 0},
                                                {"link_downed", 0},
                                                {"link_error_recovery", 0},
                                                {"port_rcv_errors", 0},
                                                {"local_link_integrity_errors", 0},
                                                {"excessive_buffer_overrun_errors", 0}};
    std::map<std::string, uint64_t> hw_counters = {{"out_of_buffer", 0}};
  };
  // An HCA named `name` ("mlx5_0") on the PCI function `bus_id` (AddPciFunction first), with
  // `ports` (numbered from 1) and, when `netdev` is not empty, that Ethernet device on the
  // function, named by each Ethernet port's first GID (gid_attrs/ndevs/0) too.
  absl::Status AddHca(const std::string& name, const std::string& bus_id,
                      const std::vector<Port>& ports, const std::string& netdev = "");

  // Replaces one file's contents (a newline is appended), relative to the root, at once: a reader
  // sees the old contents or the new, as the kernel's files give them:
  // Write("class/infiniband/mlx5_0/ports/1/state", "1: DOWN").
  absl::Status Write(const std::string& relative, const std::string& contents);
  // The directory of port `port` of `hca`, relative to the root.
  static std::string PortDir(const std::string& hca, uint32_t port);

  const std::string& root() const { return root_; }

 private:
  explicit SimSysfs(std::string root) : root_(std::move(root)) {}

  std::string root_;
  std::map<std::string, std::string> function_dirs_;  // bus id -> its directory under devices/
};

// "0000:18:00.0", as sysfs names a function, from a GPU's bus id as NVML gives it
// ("00000000:18:00.0"); nullopt-like "" when it is not one.
std::string SysfsBusId(const std::string& nvml_bus_id);

// The most rails the simulated node has room for: its GPUs past the eighth are in another PCI
// domain, laid out with no PCIe switch to share.
inline constexpr uint32_t kMaxSimRails = 8;

// The simulated node's rails: for GPU i < `rails` (bus ids as NVML gives them), an HCA mlx5_i with
// one InfiniBand port on the function after the GPU's, behind the same PCIe switch (so the
// topology attaches rail i to GPU i), on NUMA node 0 for the first half of the GPUs and 1 for the
// rest, as a DGX's. Precondition: rails <= the GPUs and <= kMaxSimRails, each of their bus ids in
// domain 0 and between 0x03 and 0xfe.
absl::Status LayOutSimRails(SimSysfs* sysfs, const std::vector<std::string>& gpu_bus_ids,
                            uint32_t rails);

}  // namespace vigil::network
