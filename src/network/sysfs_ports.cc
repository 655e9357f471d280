// Implements the sysfs reader of NIC ports.
#include "network/sysfs_ports.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "common/status.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::network {
namespace {

// Reads `path` and parses it with `parse`; on failure, unsets nothing itself and returns the line
// that says which file and why.
template <typename Parse>
auto ReadParsed(Env* env, const std::string& path, Parse parse)
    -> absl::StatusOr<typename decltype(parse(std::string_view()))::value_type> {
  absl::StatusOr<std::string> text = env->ReadFile(path);
  if (!text.ok()) return text.status();
  auto parsed = parse(*text);
  if (!parsed.ok()) return WithContext(parsed.status(), path);
  return parsed;
}

std::string Problem(const NicPort& port, const absl::Status& status) {
  return fmt::format("{}: {}", port.Name(), MessageOf(status));
}

// The last component of a link's resolved target ("0000:17:00.0" for HCA/device), or "" when the
// link is missing or dangling.
std::string LinkTargetName(const std::string& link) {
  std::error_code error;
  const std::filesystem::path target = std::filesystem::canonical(link, error);
  if (error) return "";
  return target.filename().string();
}

}  // namespace

absl::StatusOr<SysfsPorts> SysfsPorts::Open(Env* env, std::string sysfs_root) {
  std::error_code error;
  if (sysfs_root.empty() || !std::filesystem::is_directory(sysfs_root, error)) {
    return absl::InvalidArgumentError(fmt::format(
        "--sysfs-root '{}' is not a directory: give the sysfs mount (/sys, or where the host's "
        "/sys is mounted in the container)",
        sysfs_root));
  }
  while (sysfs_root.size() > 1 && sysfs_root.back() == '/') sysfs_root.pop_back();
  return SysfsPorts(env, std::move(sysfs_root));
}

SysfsPorts::Discovery SysfsPorts::Discover() const {
  Discovery discovery;
  const std::string class_dir = root_ + "/class/infiniband";
  absl::StatusOr<std::vector<std::string>> hcas = env_->ListDir(class_dir);
  if (!hcas.ok()) {
    // No RDMA stack loaded, or no HCA: a node without NIC ports, not a problem.
    if (!absl::IsNotFound(hcas.status())) discovery.problems.emplace_back(MessageOf(hcas.status()));
    return discovery;
  }
  for (const std::string& hca : *hcas) {
    const std::string hca_dir = class_dir + "/" + hca;
    absl::StatusOr<std::vector<std::string>> ports = env_->ListDir(hca_dir + "/ports");
    if (!ports.ok()) {
      discovery.problems.push_back(fmt::format("{}: {}", hca, MessageOf(ports.status())));
      continue;
    }
    const std::string pci_bus_id = LinkTargetName(hca_dir + "/device");
    // A RoCE HCA's PCI function carries its netdev (mlx5: one per function).
    std::string netdev;
    if (absl::StatusOr<std::vector<std::string>> nets = env_->ListDir(hca_dir + "/device/net");
        nets.ok() && !nets->empty()) {
      netdev = nets->front();
    }
    std::vector<NicPort> found;
    for (const std::string& name : *ports) {
      NicPort port{.device = hca, .pci_bus_id = pci_bus_id};
      if (!absl::SimpleAtoi(name, &port.port) || port.port == 0) {
        discovery.problems.push_back(
            fmt::format("{}: '{}' under {}/ports is not a port number", hca, name, hca_dir));
        continue;
      }
      absl::StatusOr<LinkLayer> layer =
          ReadParsed(env_, PortDir(port) + "/link_layer", ParseLinkLayer);
      if (layer.ok()) {
        port.link_layer = *layer;
        if (*layer == LinkLayer::kEthernet) {
          // The port's own: the netdev of its first GID (gid_attrs/ndevs/0, kernel 4.4+); else
          // the PCI function's.
          absl::StatusOr<std::string> gid_netdev =
              env_->ReadFile(PortDir(port) + "/gid_attrs/ndevs/0");
          const std::string own = gid_netdev.ok() ? std::string(Trim(*gid_netdev)) : "";
          if (!own.empty() || !netdev.empty()) {
            port.net = NetDevice{.name = own.empty() ? netdev : own};
          }
        }
      } else {
        discovery.problems.push_back(Problem(port, layer.status()));
      }
      found.push_back(std::move(port));
    }
    std::sort(found.begin(), found.end(),
              [](const NicPort& a, const NicPort& b) { return a.port < b.port; });
    for (NicPort& port : found) discovery.ports.push_back(std::move(port));
  }
  return discovery;
}

std::string SysfsPorts::PortDir(const NicPort& port) const {
  return fmt::format("{}/class/infiniband/{}/ports/{}", root_, port.device, port.port);
}

void SysfsPorts::ReadState(NicPort* port) const {
  port->state_problems.clear();
  const std::string dir = PortDir(*port);
  auto keep = [&](auto parsed, auto* value) {
    if (parsed.ok()) {
      *value = std::move(*parsed);
    } else {
      value->reset();
      port->state_problems.push_back(Problem(*port, parsed.status()));
    }
  };
  keep(ReadParsed(env_, dir + "/state", ParsePortState), &port->state);
  keep(ReadParsed(env_, dir + "/phys_state", ParsePhysState), &port->phys_state);
  keep(ReadParsed(env_, dir + "/rate", ParsePortRate), &port->rate);
  if (!port->net.has_value()) return;
  const std::string net_dir = fmt::format("{}/class/net/{}", root_, port->net->name);
  // carrier and speed cannot be read (EINVAL) while the interface is administratively down: the
  // value is unknown then, which the port's own state already says.
  absl::StatusOr<bool> carrier = ReadParsed(env_, net_dir + "/carrier", ParseCarrier);
  port->net->carrier = carrier.ok() ? std::optional<bool>(*carrier) : std::nullopt;
  absl::StatusOr<std::optional<int64_t>> speed =
      ReadParsed(env_, net_dir + "/speed", ParseNetSpeed);
  port->net->speed_mbps = speed.ok() ? *speed : std::nullopt;
  absl::StatusOr<uint64_t> mtu = ReadParsed(env_, net_dir + "/mtu", ParseCounter);
  if (mtu.ok()) {
    port->net->mtu = static_cast<int64_t>(*mtu);
  } else {
    port->net->mtu.reset();
    port->state_problems.push_back(Problem(*port, mtu.status()));
  }
}

void SysfsPorts::ReadCounters(NicPort* port) const {
  port->counters.clear();
  port->counter_problems.clear();
  const std::string dir = PortDir(*port);
  for (const char* group : {"counters", "hw_counters"}) {
    absl::StatusOr<std::vector<std::string>> names = env_->ListDir(dir + "/" + group);
    if (!names.ok()) {
      // Not every driver has hw_counters/; a missing counters/ is a problem.
      if (std::string_view(group) == "counters" || !absl::IsNotFound(names.status())) {
        port->counter_problems.push_back(Problem(*port, names.status()));
      }
      continue;
    }
    for (const std::string& name : *names) {
      absl::StatusOr<uint64_t> value =
          ReadParsed(env_, dir + "/" + group + "/" + name, ParseCounter);
      if (value.ok()) {
        port->counters[name] = *value;
      } else {
        port->counter_problems.push_back(Problem(*port, value.status()));
      }
    }
  }
}

}  // namespace vigil::network
