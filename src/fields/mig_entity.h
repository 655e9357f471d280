// The MIG entity model every side shares: a GPU in MIG mode is partitioned into GPU instances,
// each an entity with values of its own (for the fields the driver gives per instance:
// SampledPerMigInstance), its own MIG device UUID, and a parent GPU. The backends discover them,
// the engine's snapshots carry them, the API and its clients name them.
// Plain structs and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vigil {

// One GPU instance (with its one compute instance: Vigil does not model compute-instance
// partitions within a GPU instance, which the device plugin does not hand out either).
struct MigInstance {
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
  std::string profile;           // "1g.10gb"
  std::string uuid;              // "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  uint32_t placement_start = 0;  // in memory slices
  uint32_t placement_size = 0;
  uint64_t memory_total_mib = 0;
  uint32_t compute_slices = 0;  // the "1g" of 1g.10gb: sevenths of the GPU's SMs
  bool operator==(const MigInstance&) const = default;
};

// A GPU's MIG configuration as the driver reports it at one moment: an operator may switch MIG
// mode or recreate instances while the engine runs, so the engine reads it again and compares.
struct MigState {
  bool mode = false;
  std::vector<MigInstance> instances;  // in placement order; none outside MIG mode
  bool operator==(const MigState&) const = default;
};
// "MIG off", "MIG on, no instance" or "MIG on: 1g.10gb (GPU instance 1), …": for the engine's
// log line when a layout changes.
std::string DescribeMig(const MigState& state);

// " in GPU instance 5 (1g.10gb, MIG-…)", " in GPU instance 5" when `instances` has no such id
// (the source named an instance the backend does not list), "" without an id: what follows an
// XID's code where it says where it was raised.
std::string InGpuInstance(const std::vector<MigInstance>& instances, std::optional<uint32_t> id);

}  // namespace vigil
