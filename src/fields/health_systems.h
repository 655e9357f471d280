// DCGM's health systems (its health watch groups) that Vigil judges: the one table of their
// names, as the engine, the API and every client spell them ("pcie", ...) and as DCGM's health
// watches and dcgm-exporter name them ("PCIE", "MEM", ...). Everything that lists systems —
// the evaluator, config and request validation, the CLI's choices, the exporter's labels —
// derives from it. Constant data; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vigil {

enum class HealthSystem : uint8_t { kPcie, kMemory, kInforom, kThermal, kPower, kNvlink, kDriver };

struct HealthSystemInfo {
  HealthSystem system;
  std::string_view name;        // "pcie": Vigil's API, config and CLI
  std::string_view dcgm_watch;  // "PCIE": DCGM's health watch, dcgm-exporter's health label
};

// In enum order.
inline constexpr HealthSystemInfo kHealthSystems[] = {
    {HealthSystem::kPcie, "pcie", "PCIE"},          {HealthSystem::kMemory, "memory", "MEM"},
    {HealthSystem::kInforom, "inforom", "INFOROM"}, {HealthSystem::kThermal, "thermal", "THERMAL"},
    {HealthSystem::kPower, "power", "POWER"},       {HealthSystem::kNvlink, "nvlink", "NVLINK"},
    {HealthSystem::kDriver, "driver", "DRIVER"},
};
inline constexpr HealthSystem kAllHealthSystems[] = {
    HealthSystem::kPcie,  HealthSystem::kMemory, HealthSystem::kInforom, HealthSystem::kThermal,
    HealthSystem::kPower, HealthSystem::kNvlink, HealthSystem::kDriver};
// HealthSystemName() indexes the table by the enum: rows in enum order, one per system.
constexpr bool HealthSystemsInEnumOrder() {
  if (std::size(kHealthSystems) != std::size(kAllHealthSystems)) return false;
  for (size_t i = 0; i < std::size(kHealthSystems); ++i) {
    if (static_cast<size_t>(kHealthSystems[i].system) != i ||
        kAllHealthSystems[i] != kHealthSystems[i].system) {
      return false;
    }
  }
  return true;
}
static_assert(HealthSystemsInEnumOrder());

std::string_view HealthSystemName(HealthSystem system);  // "pcie", "memory", ...
std::optional<HealthSystem> ParseHealthSystem(std::string_view name);
// The DCGM watch name of a system given by its name ("memory" -> "MEM"); "UNKNOWN" otherwise.
std::string_view HealthSystemWatchName(std::string_view name);
// "pcie, memory, inforom, thermal, power, nvlink or driver", for messages that list the choices.
std::string HealthSystemChoices();

}  // namespace vigil
