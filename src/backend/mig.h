// MIG (Multi-Instance GPU) for the backends: a GPU in MIG mode is partitioned into GPU instances
// (fields/mig_entity.h), each a profile (`1g.10gb`, `3g.40gb`, …) at a placement of the GPU's
// memory slices. This holds the profiles of the simulated GPU
// (an H100 80GB, as NVIDIA's MIG user guide lists them: 7 compute slices, 8 memory slices), and
// the `--mig GPU:PROFILE[,PROFILE…]` layouts the sim backend is given, placed as the driver would
// (each profile only at its allowed starts, no two overlapping) or refused with why.
// Pure functions and plain structs; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fields/mig_entity.h"

namespace vigil {

// A profile of the simulated H100 80GB.
struct MigProfile {
  std::string_view name;
  uint32_t compute_slices;       // of 7
  uint32_t memory_slices;        // of 8
  std::vector<uint32_t> starts;  // the memory slices it may start at
  uint32_t max_instances;
};
inline constexpr uint32_t kMigComputeSlices = 7;
inline constexpr uint32_t kMigMemorySlices = 8;
const std::vector<MigProfile>& H100MigProfiles();
const MigProfile* FindMigProfile(std::string_view name);
// "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb or 7g.80gb".
std::string MigProfileChoices();

// One `--mig` value: "GPU:PROFILE[,PROFILE…]" (profiles repeat for several instances).
struct MigLayout {
  uint32_t gpu = 0;
  std::vector<std::string> profiles;
};
// InvalidArgument naming what is wrong ("--mig '0:9g.90gb': unknown profile 9g.90gb; …").
absl::StatusOr<MigLayout> ParseMigLayout(std::string_view text);

// Places `profiles` on one GPU as the driver would accept them: each at one of its starts, none
// overlapping, within the GPU's compute and memory slices (tried in every order, so
// `3g.40gb,4g.40gb` places the 4g at 0 and the 3g at 4). The instances come in placement order,
// GPU instance ids from 1, memories from `gpu_memory_mib` by memory slices; `uuid_seed` makes
// their UUIDs (stable for the same GPU and layout). InvalidArgument saying why a layout does not
// fit.
absl::StatusOr<std::vector<MigInstance>> PlaceMigInstances(const std::vector<std::string>& profiles,
                                                           uint64_t gpu_memory_mib,
                                                           std::string_view uuid_seed);

}  // namespace vigil
