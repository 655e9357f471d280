// Implements the MIG entity model's descriptions (mig_entity.h).
#include "fields/mig_entity.h"

#include "fmt/format.h"

namespace vigil {

std::string InGpuInstance(const std::vector<MigInstance>& instances, std::optional<uint32_t> id) {
  if (!id.has_value()) return "";
  for (const MigInstance& instance : instances) {
    if (instance.gpu_instance_id == *id) {
      return fmt::format(" in GPU instance {} ({}, {})", *id, instance.profile, instance.uuid);
    }
  }
  return fmt::format(" in GPU instance {}", *id);
}

std::string DescribeMig(const MigState& state) {
  if (!state.mode) return "MIG off";
  if (state.instances.empty()) return "MIG on, no instance";
  std::string out = "MIG on:";
  for (size_t i = 0; i < state.instances.size(); ++i) {
    out += fmt::format("{} {} (GPU instance {})", i == 0 ? "" : ",", state.instances[i].profile,
                       state.instances[i].gpu_instance_id);
  }
  return out;
}

}  // namespace vigil
