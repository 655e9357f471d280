// Which GPU(s) a NIC port serves, from the PCI topology: the GPUs behind the same PCIe switch as
// the port's HCA (nvidia-smi topo's PIX and PXB: the traffic GPUDirect RDMA sends without the
// host bridge), else the GPUs on the same NUMA node (NODE), else none (the port is node-level).
// Where several GPUs share the HCA's switch, the closest ones (the fewest bridges between them)
// are attached. The topology is read from sysfs: SYSFS/bus/pci/devices/BUS_ID is a link into
// SYSFS/devices/pciDDDD:BB/ROOT_PORT/.../BUS_ID, whose path components are the bridges above the
// function, and its numa_node file. Pure functions apart from ReadPciPlace; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env.h"

namespace vigil::network {

// Where a PCI function sits.
struct PciPlace {
  std::string bus_id;  // "0000:17:00.0"
  // From the host bridge down to the function itself: {"pci0000:16", "0000:16:02.0",
  // "0000:17:00.0", "0000:18:01.0", "0000:19:00.0"}.
  std::vector<std::string> path;
  std::optional<int> numa_node;  // nullopt where the kernel says -1 (no NUMA information)
};

// Reads where `bus_id` (any form NormalizePciBusId reads: NVML's "00000000:19:00.0" too) sits.
// NotFound when sysfs has no such function; InvalidArgument for a bus id that is not one.
absl::StatusOr<PciPlace> ReadPciPlace(Env* env, const std::string& sysfs_root,
                                      std::string_view bus_id);

enum class Affinity : uint8_t {
  kPcieSwitch,  // behind the same PCIe switch as the GPU(s)
  kNumaNode,    // on the same NUMA node, through the host
  kNone,        // no GPU near it: the port is judged for the node
};
std::string_view AffinityName(Affinity affinity);  // "pcie-switch", "numa-node", "none"

struct Attachment {
  std::vector<uint32_t> gpus;  // indexes into the `gpus` given, ascending
  Affinity affinity = Affinity::kNone;

  bool operator==(const Attachment&) const = default;
};

// The GPUs the HCA at `nic` serves, among `gpus` (indexed by the engine's GPU index).
Attachment Attach(const PciPlace& nic, const std::vector<PciPlace>& gpus);

}  // namespace vigil::network
