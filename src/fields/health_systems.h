// DCGM's health systems (its health watch groups) that Vigil judges: the one table of their
// names, as the engine, the API and every client spell them ("pcie", ...) and as DCGM's health
// watches and dcgm-exporter name them ("PCIE", "MEM", ...). Everything that lists systems —
// the evaluator, config and request validation, the CLI's choices, the exporter's labels —
// derives from it. Most systems are judged per GPU; a node-level system (`nvswitch`: the
// NVSwitches' SXids; `nics`: the NIC ports as a whole) belongs to no one GPU and is judged once
// for the node. A system judged from a
// source beside the GPU's fields (`network`: the NIC ports that serve the GPU; `nvswitch`: the
// kernel log's SXids) is listed only where the engine has that source. Constant data; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vigil {

enum class HealthSystem : uint8_t {
  kPcie,
  kMemory,
  kInforom,
  kThermal,
  kPower,
  kNvlink,
  kDriver,
  kNetwork,   // the GPU's NIC ports (network/): judged where the engine reads them
  kNvswitch,  // node level
  kNics,      // node level: the node's NIC ports as a whole (network/)
};

struct HealthSystemInfo {
  HealthSystem system;
  std::string_view name;        // "pcie": Vigil's API, config and CLI
  std::string_view dcgm_watch;  // "PCIE": DCGM's health watch, dcgm-exporter's health label
  bool node_level = false;      // judged once for the node, not per GPU
  // Judged by a source beside the GPU's fields (health/source.h), not by the DCGM rules: a GPU's
  // verdict lists it only when the engine has that source.
  bool from_source = false;
  // A system from a source, where the engine has none: why it is not judged (shown with a FAIL
  // restored from before a restart, which must not vanish because nothing reads it now).
  std::string_view without_source = "";
  // What a node-level system judges, as a sentence names it ("NVSwitches").
  std::string_view subject = "";
};

// In enum order.
inline constexpr HealthSystemInfo kHealthSystems[] = {
    {HealthSystem::kPcie, "pcie", "PCIE"},
    {HealthSystem::kMemory, "memory", "MEM"},
    {HealthSystem::kInforom, "inforom", "INFOROM"},
    {HealthSystem::kThermal, "thermal", "THERMAL"},
    {HealthSystem::kPower, "power", "POWER"},
    {HealthSystem::kNvlink, "nvlink", "NVLINK"},
    {HealthSystem::kDriver, "driver", "DRIVER"},
    // DCGM has no watch of NIC ports (DCGM 4.6's CONNECTX watch judges the adapter's PCIe errors):
    // "NETWORK" is Vigil's.
    {HealthSystem::kNetwork, "network", "NETWORK", false, true,
     "the engine reads no NIC ports (--sysfs-root): the network is not judged"},
    // The SXids of the kernel log (nvswitch/).
    {HealthSystem::kNvswitch, "nvswitch", "NVSWITCH", true, true,
     "the engine reads no kernel log (--kmsg): new NVSwitch errors are not seen", "NVSwitches"},
    // The node's NIC ports as a whole (network/): every port down at once, and the ports that
    // serve no GPU. Vigil's, as "NETWORK" is.
    {HealthSystem::kNics, "nics", "NICS", true, true,
     "the engine reads no NIC ports (--sysfs-root): the node's network is not judged", "NIC ports"},
};
// The systems judged per GPU, in the order a GPU's verdict lists them.
inline constexpr HealthSystem kGpuHealthSystems[] = {
    HealthSystem::kPcie,  HealthSystem::kMemory, HealthSystem::kInforom, HealthSystem::kThermal,
    HealthSystem::kPower, HealthSystem::kNvlink, HealthSystem::kDriver,  HealthSystem::kNetwork};
// The node-level systems, in the order the node's verdict lists them.
inline constexpr HealthSystem kNodeHealthSystems[] = {HealthSystem::kNvswitch, HealthSystem::kNics};
// HealthSystemName() indexes the table by the enum: rows in enum order, one per system; the GPU
// systems come first (their index is their place in a GPU's verdict), then the node's.
constexpr bool HealthSystemsInEnumOrder() {
  if (std::size(kHealthSystems) != std::size(kGpuHealthSystems) + std::size(kNodeHealthSystems))
    return false;
  for (size_t i = 0; i < std::size(kHealthSystems); ++i) {
    const bool node_level = i >= std::size(kGpuHealthSystems);
    const HealthSystem listed =
        node_level ? kNodeHealthSystems[i - std::size(kGpuHealthSystems)] : kGpuHealthSystems[i];
    if (static_cast<size_t>(kHealthSystems[i].system) != i || listed != kHealthSystems[i].system ||
        kHealthSystems[i].node_level != node_level) {
      return false;
    }
  }
  return true;
}
static_assert(HealthSystemsInEnumOrder());

std::string_view HealthSystemName(HealthSystem system);  // "pcie", "memory", ...
const HealthSystemInfo& HealthSystemInfoOf(HealthSystem system);
// Any system, GPU or node level, by its name.
std::optional<HealthSystem> ParseHealthSystem(std::string_view name);
bool IsNodeLevel(HealthSystem system);
bool IsFromSource(HealthSystem system);
// The DCGM watch name of a system given by its name ("memory" -> "MEM"); "UNKNOWN" otherwise.
std::string_view HealthSystemWatchName(std::string_view name);
// The GPU systems: "pcie, memory, ..., driver or network", for messages that
// list the choices where a GPU's system is meant.
std::string HealthSystemChoices();

}  // namespace vigil
