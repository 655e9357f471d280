// Implements the health system lookups over the one table.
#include "fields/health_systems.h"

#include "common/check.h"

namespace vigil {

std::string_view HealthSystemName(HealthSystem system) {
  const auto index = static_cast<size_t>(system);
  return index < std::size(kHealthSystems) ? kHealthSystems[index].name : "unknown";
}

const HealthSystemInfo& HealthSystemInfoOf(HealthSystem system) {
  const auto index = static_cast<size_t>(system);
  VIGIL_CHECK(index < std::size(kHealthSystems));
  return kHealthSystems[index];
}

std::optional<HealthSystem> ParseHealthSystem(std::string_view name) {
  for (const HealthSystemInfo& info : kHealthSystems) {
    if (info.name == name) return info.system;
  }
  return std::nullopt;
}

bool IsNodeLevel(HealthSystem system) {
  const auto index = static_cast<size_t>(system);
  return index < std::size(kHealthSystems) && kHealthSystems[index].node_level;
}

bool IsFromSource(HealthSystem system) {
  const auto index = static_cast<size_t>(system);
  return index < std::size(kHealthSystems) && kHealthSystems[index].from_source;
}

std::string_view HealthSystemWatchName(std::string_view name) {
  for (const HealthSystemInfo& info : kHealthSystems) {
    if (info.name == name) return info.dcgm_watch;
  }
  return "UNKNOWN";
}

std::string HealthSystemChoices() {
  std::string out;
  for (size_t i = 0; i < std::size(kGpuHealthSystems); ++i) {
    if (i > 0) out += i + 1 == std::size(kGpuHealthSystems) ? " or " : ", ";
    out += HealthSystemName(kGpuHealthSystems[i]);
  }
  return out;
}

}  // namespace vigil
