// The node's port map: each discovered NIC port with the GPUs it serves, from the PCI topology
// (attachment.h) unless the engine's config overrides it for that port — the map `vigil
// discovery` will show and a port's incidents will follow. An override that names a port this node
// does not have, or a GPU it does not have, is refused: a typo must not leave a port judged for
// no GPU or for the wrong one. Pure functions apart from BuildPortMap's sysfs reads;
// thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "network/attachment.h"
#include "network/port.h"
#include "network/sysfs_ports.h"

namespace vigil::network {

// Config: port name ("mlx5_0/1") -> the engine GPU indexes it serves (empty: node-level).
using PortOverrides = std::map<std::string, std::vector<uint32_t>>;

struct MappedPort {
  NicPort port;
  Attachment attachment;
  bool overridden = false;  // the attachment is the config's, not the topology's
  // Why the topology gave no GPU where it could not read the HCA's place; "" otherwise.
  std::string placement_problem;
};

// Joins discovered ports with the GPUs' places. `hca_places` holds the place of each HCA's PCI
// function by bus id (a port whose HCA is missing there is node-level, with its problem said);
// `gpu_count` bounds the overrides' GPU indexes. InvalidArgument, naming the override and what
// this node has, for an override of an unknown port or GPU.
absl::StatusOr<std::vector<MappedPort>> MapPorts(
    std::vector<NicPort> ports, const std::map<std::string, absl::StatusOr<PciPlace>>& hca_places,
    const std::vector<PciPlace>& gpus, uint32_t gpu_count, const PortOverrides& overrides);

// Reads the places of `ports`' HCAs and of the GPUs (bus ids in any form: NVML's too) from
// `sysfs_root`, then maps. A GPU whose place cannot be read attracts no port through the topology
// (the overrides still name it).
absl::StatusOr<std::vector<MappedPort>> BuildPortMap(Env* env, const std::string& sysfs_root,
                                                     std::vector<NicPort> ports,
                                                     const std::vector<std::string>& gpu_bus_ids,
                                                     const PortOverrides& overrides);

}  // namespace vigil::network
