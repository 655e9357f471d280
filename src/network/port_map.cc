// Implements the node's port map.
#include "network/port_map.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "common/status.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace vigil::network {

absl::StatusOr<std::vector<MappedPort>> MapPorts(
    std::vector<NicPort> ports, const std::map<std::string, absl::StatusOr<PciPlace>>& hca_places,
    const std::vector<PciPlace>& gpus, uint32_t gpu_count, const PortOverrides& overrides) {
  std::set<std::string> names;
  for (const NicPort& port : ports) names.insert(port.Name());
  for (const auto& [name, served] : overrides) {
    if (!names.contains(name)) {
      return absl::InvalidArgumentError(fmt::format(
          "network.ports names '{}', which this node does not have (its ports: {}): fix the "
          "name (HCA/PORT, as `vigil discovery` shows them) or remove the entry",
          name, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
    for (uint32_t gpu : served) {
      if (gpu >= gpu_count) {
        return absl::InvalidArgumentError(
            fmt::format("network.ports gives '{}' GPU {}, but this node has {} GPU(s) (0 to {})",
                        name, gpu, gpu_count, gpu_count == 0 ? 0 : gpu_count - 1));
      }
    }
  }
  std::vector<MappedPort> mapped;
  mapped.reserve(ports.size());
  for (NicPort& port : ports) {
    MappedPort entry{.port = std::move(port)};
    if (const auto override_of = overrides.find(entry.port.Name());
        override_of != overrides.end()) {
      std::vector<uint32_t> served = override_of->second;
      std::sort(served.begin(), served.end());
      served.erase(std::unique(served.begin(), served.end()), served.end());
      entry.attachment = {.gpus = std::move(served), .affinity = Affinity::kNone};
      entry.overridden = true;
    } else if (const auto place = hca_places.find(entry.port.pci_bus_id);
               place == hca_places.end() || entry.port.pci_bus_id.empty()) {
      entry.placement_problem = fmt::format(
          "{}: sysfs names no PCI function for its HCA; judged for the node", entry.port.Name());
    } else if (!place->second.ok()) {
      entry.placement_problem = fmt::format("{}: {}; judged for the node", entry.port.Name(),
                                            MessageOf(place->second.status()));
    } else {
      entry.attachment = Attach(*place->second, gpus);
    }
    mapped.push_back(std::move(entry));
  }
  return mapped;
}

absl::StatusOr<std::vector<MappedPort>> BuildPortMap(Env* env, const std::string& sysfs_root,
                                                     std::vector<NicPort> ports,
                                                     const std::vector<std::string>& gpu_bus_ids,
                                                     const PortOverrides& overrides) {
  std::map<std::string, absl::StatusOr<PciPlace>> hca_places;
  for (const NicPort& port : ports) {
    if (port.pci_bus_id.empty() || hca_places.contains(port.pci_bus_id)) continue;
    hca_places.emplace(port.pci_bus_id, ReadPciPlace(env, sysfs_root, port.pci_bus_id));
  }
  std::vector<PciPlace> gpus;
  gpus.reserve(gpu_bus_ids.size());
  for (const std::string& bus_id : gpu_bus_ids) {
    absl::StatusOr<PciPlace> place = ReadPciPlace(env, sysfs_root, bus_id);
    gpus.push_back(place.ok() ? *std::move(place) : PciPlace{.bus_id = bus_id});
  }
  return MapPorts(std::move(ports), hca_places, gpus, static_cast<uint32_t>(gpu_bus_ids.size()),
                  overrides);
}

}  // namespace vigil::network
