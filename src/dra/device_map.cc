// Implements the device map: reading ResourceSlices of any served shape, matching by attribute.
#include "dra/device_map.h"

#include <cctype>

#include "common/pci_bus_id.h"

namespace vigil::dra {

namespace {

using nlohmann::json;

// The attribute `name` of `attributes`, qualified by `driver`'s domain or not ("uuid" and
// "gpu.nvidia.com/uuid" are the same attribute), as a string: a DeviceAttribute holds exactly one
// of string, version, int, bool.
std::string Attribute(const json& attributes, std::string_view driver, std::string_view name) {
  if (!attributes.is_object()) return "";
  const json* value = nullptr;
  if (auto it = attributes.find(std::string(name)); it != attributes.end()) {
    value = &*it;
  } else if (auto qualified = attributes.find(std::string(driver) + "/" + std::string(name));
             qualified != attributes.end()) {
    value = &*qualified;
  }
  if (value == nullptr || !value->is_object()) return "";
  for (const char* key : {"string", "version"}) {
    if (auto it = value->find(key); it != value->end() && it->is_string()) {
      return it->get<std::string>();
    }
  }
  if (auto it = value->find("int"); it != value->end() && it->is_number_integer()) {
    return std::to_string(it->get<int64_t>());
  }
  if (auto it = value->find("bool"); it != value->end() && it->is_boolean()) {
    return it->get<bool>() ? "true" : "false";
  }
  return "";
}

std::string StringAt(const json& object, std::string_view key) {
  if (!object.is_object()) return "";
  const auto it = object.find(std::string(key));
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::vector<Device> DevicesOf(const std::vector<json>& slices, std::string_view driver,
                              std::string_view node) {
  std::vector<Device> devices;
  for (const json& slice : slices) {
    if (!slice.is_object() || !slice.contains("spec") || !slice["spec"].is_object()) continue;
    const json& spec = slice["spec"];
    if (StringAt(spec, "driver") != driver || StringAt(spec, "nodeName") != node) continue;
    const std::string pool = spec.contains("pool") ? StringAt(spec["pool"], "name") : "";
    if (!spec.contains("devices") || !spec["devices"].is_array()) continue;
    for (const json& entry : spec["devices"]) {
      const std::string name = StringAt(entry, "name");
      if (name.empty()) continue;
      // v1 and v1beta2: attributes on the device; v1beta1 and v1alpha3: under `basic`.
      const json& attributes = entry.contains("attributes") ? entry["attributes"]
                               : entry.contains("basic") && entry["basic"].is_object()
                                   ? entry["basic"].value("attributes", json::object())
                                   : json::object();
      Device device{.driver = std::string(driver), .pool = pool, .name = name};
      device.type = Attribute(attributes, driver, "type");
      device.uuid = Attribute(attributes, driver, "uuid");
      device.parent_uuid = Attribute(attributes, driver, "parentUUID");
      std::string pci = Attribute(attributes, driver, "resource.kubernetes.io/pciBusID");
      if (pci.empty()) pci = Attribute(attributes, driver, "pcieBusID");
      device.pci_bus_id = NormalizePciBusId(pci);
      devices.push_back(std::move(device));
    }
  }
  return devices;
}

std::string_view MatchedByName(MatchedBy matched_by) {
  switch (matched_by) {
    case MatchedBy::kUuid:
      return "uuid";
    case MatchedBy::kPciBusId:
      return "pciBusID";
  }
  return "unknown";
}

const Device* DeviceMap::Find(uint32_t gpu, std::optional<uint32_t> gpu_instance) const {
  for (const Match& match : matches) {
    if (match.gpu.gpu == gpu && match.gpu.gpu_instance == gpu_instance) return &match.device;
  }
  return nullptr;
}

std::string DeviceMap::UuidOf(std::string_view driver, std::string_view pool,
                              std::string_view name) const {
  for (const Match& match : matches) {
    if (match.device.driver == driver && match.device.pool == pool && match.device.name == name) {
      return match.gpu.uuid;
    }
  }
  return "";
}

DeviceMap MapDevices(const std::vector<GpuRef>& gpus, const std::vector<Device>& devices) {
  DeviceMap map;
  std::vector<bool> taken(devices.size(), false);
  std::vector<bool> matched(gpus.size(), false);
  // By UUID first, for every GPU and instance: the PCI fallback must not take a device that a
  // later GPU's UUID names.
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (gpus[g].uuid.empty()) continue;
    for (size_t d = 0; d < devices.size(); ++d) {
      if (taken[d] || devices[d].uuid != gpus[g].uuid) continue;
      taken[d] = matched[g] = true;
      map.matches.push_back({gpus[g], devices[d], MatchedBy::kUuid});
      break;
    }
  }
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (matched[g] || gpus[g].gpu_instance.has_value()) continue;
    const std::string pci = NormalizePciBusId(gpus[g].pci_bus_id);
    if (pci.empty()) continue;
    for (size_t d = 0; d < devices.size(); ++d) {
      // A MIG device carries its parent's bus id: only a whole GPU's device stands for the GPU.
      const bool whole = devices[d].type.empty() || devices[d].type == "gpu";
      if (taken[d] || !whole || devices[d].pci_bus_id != pci) continue;
      taken[d] = matched[g] = true;
      map.matches.push_back({gpus[g], devices[d], MatchedBy::kPciBusId});
      break;
    }
  }
  // Back into the order the GPUs were given.
  std::vector<Match> ordered;
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (!matched[g]) {
      map.unmatched_gpus.push_back(gpus[g]);
      continue;
    }
    for (const Match& match : map.matches) {
      if (match.gpu.gpu == gpus[g].gpu && match.gpu.gpu_instance == gpus[g].gpu_instance) {
        ordered.push_back(match);
        break;
      }
    }
  }
  map.matches = std::move(ordered);
  for (size_t d = 0; d < devices.size(); ++d) {
    if (!taken[d]) map.unmatched_devices.push_back(devices[d]);
  }
  return map;
}

}  // namespace vigil::dra
