// Implements the PCI placement of HCAs and GPUs and the port-to-GPU attachment.
#include "network/attachment.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/pci_bus_id.h"
#include "fmt/format.h"

namespace vigil::network {
namespace {

// The host bridge, the root port and a switch's upstream port: two functions whose paths share at
// least this many components sit behind the same PCIe switch.
constexpr size_t kBehindOneSwitch = 3;

size_t CommonPrefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

absl::StatusOr<PciPlace> ReadPciPlace(Env* env, const std::string& sysfs_root,
                                      std::string_view bus_id) {
  PciPlace place{.bus_id = NormalizePciBusId(bus_id)};
  if (place.bus_id.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("'{}' is not a PCI bus id (DOMAIN:BUS:DEVICE.FUNCTION)", bus_id));
  }
  const std::string link = sysfs_root + "/bus/pci/devices/" + place.bus_id;
  std::error_code error;
  const std::filesystem::path target = std::filesystem::canonical(link, error);
  const std::filesystem::path devices = std::filesystem::canonical(sysfs_root + "/devices", error);
  if (error || target.empty()) {
    return absl::NotFoundError(fmt::format("{} does not lead to a PCI function", link));
  }
  const std::string relative = std::filesystem::relative(target, devices, error).string();
  if (error || relative.empty() || relative.starts_with("..")) {
    return absl::NotFoundError(
        fmt::format("{} leads to {}, outside {}/devices", link, target.string(), sysfs_root));
  }
  place.path = absl::StrSplit(relative, '/', absl::SkipEmpty());
  if (place.path.size() < 2 || !place.path.front().starts_with("pci") ||
      place.path.back() != place.bus_id) {
    return absl::NotFoundError(
        fmt::format("{} leads to {}, not to a function under a host bridge", link, relative));
  }
  if (absl::StatusOr<std::string> numa = env->ReadFile(link + "/numa_node"); numa.ok()) {
    int node = -1;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*numa), &node) && node >= 0) {
      place.numa_node = node;
    }
  }
  return place;
}

std::string_view AffinityName(Affinity affinity) {
  switch (affinity) {
    case Affinity::kPcieSwitch:
      return "pcie-switch";
    case Affinity::kNumaNode:
      return "numa-node";
    case Affinity::kNone:
      return "none";
  }
  return "none";
}

Attachment Attach(const PciPlace& nic, const std::vector<PciPlace>& gpus) {
  Attachment attachment;
  // Among the GPUs behind the HCA's switch, the fewest bridges between the two (a GPU on the
  // switch itself before one behind a switch nested below it).
  size_t closest = SIZE_MAX;
  for (uint32_t gpu = 0; gpu < gpus.size(); ++gpu) {
    const size_t shared = CommonPrefix(nic.path, gpus[gpu].path);
    if (shared < kBehindOneSwitch) continue;
    const size_t hops = (nic.path.size() - shared) + (gpus[gpu].path.size() - shared);
    if (hops > closest) continue;
    if (hops < closest) {
      attachment.gpus.clear();
      closest = hops;
    }
    attachment.gpus.push_back(gpu);
  }
  if (!attachment.gpus.empty()) {
    attachment.affinity = Affinity::kPcieSwitch;
    return attachment;
  }
  if (!nic.numa_node.has_value()) return attachment;
  for (uint32_t gpu = 0; gpu < gpus.size(); ++gpu) {
    if (gpus[gpu].numa_node == nic.numa_node) attachment.gpus.push_back(gpu);
  }
  if (!attachment.gpus.empty()) attachment.affinity = Affinity::kNumaNode;
  return attachment;
}

}  // namespace vigil::network
