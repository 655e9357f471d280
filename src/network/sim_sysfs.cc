// Implements the written sysfs tree and the simulated node's rails.
#include "network/sim_sysfs.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/check.h"
#include "fmt/format.h"

namespace vigil::network {
namespace fs = std::filesystem;
namespace {

absl::Status Failed(const std::string& what, const fs::path& path, const std::error_code& error) {
  return absl::InternalError(fmt::format("cannot {} {}: {}", what, path.string(), error.message()));
}

absl::Status MakeDirs(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  return error ? Failed("create the directory", dir, error) : absl::OkStatus();
}

// A relative symlink at `link` to `target`; one already there is replaced.
absl::Status Link(const fs::path& target, const fs::path& link) {
  std::error_code error;
  fs::remove(link, error);
  fs::create_directory_symlink(target, link, error);
  return error ? Failed("link", link, error) : absl::OkStatus();
}

std::string PciFunction(int bus, int device, int function) {
  return fmt::format("0000:{:02x}:{:02x}.{}", bus, device, function);
}

}  // namespace

absl::StatusOr<SimSysfs> SimSysfs::Create(std::string root) {
  if (absl::Status made = MakeDirs(root); !made.ok()) return made;
  return SimSysfs(std::move(root));
}

absl::Status SimSysfs::Write(const std::string& relative, const std::string& contents) {
  const fs::path file = fs::path(root_) / relative;
  if (absl::Status made = MakeDirs(file.parent_path()); !made.ok()) return made;
  // As the kernel's show() does, a reader sees the old value or the new one, never a torn or
  // empty file: the new one is written beside the tree (where no directory listing of it sees
  // it) and renamed into place.
  const fs::path staged = fs::path(root_).parent_path() / ".sim-sysfs-write";
  {
    std::ofstream out(staged, std::ios::trunc);
    out << contents << "\n";
    out.flush();
    if (!out) {
      return absl::InternalError(
          fmt::format("cannot write {}: {}", staged.string(), std::strerror(errno)));
    }
  }
  std::error_code error;
  fs::rename(staged, file, error);
  return error ? Failed("rename into place", file, error) : absl::OkStatus();
}

std::string SimSysfs::PortDir(const std::string& hca, uint32_t port) {
  return "class/infiniband/" + hca + "/ports/" + std::to_string(port);
}

absl::Status SimSysfs::AddPciFunction(const std::vector<std::string>& path, int numa_node) {
  VIGIL_CHECK(path.size() >= 2);
  std::string dir = "devices";
  for (const std::string& component : path) dir += "/" + component;
  if (absl::Status made = MakeDirs(fs::path(root_) / dir); !made.ok()) return made;
  if (absl::Status wrote = Write(dir + "/numa_node", std::to_string(numa_node)); !wrote.ok()) {
    return wrote;
  }
  const fs::path links = fs::path(root_) / "bus/pci/devices";
  if (absl::Status made = MakeDirs(links); !made.ok()) return made;
  // As the kernel links it: relative, ../../../devices/pci.../BUS_ID.
  if (absl::Status linked = Link(fs::path("../../..") / dir, links / path.back()); !linked.ok()) {
    return linked;
  }
  function_dirs_[path.back()] = dir;
  return absl::OkStatus();
}

absl::Status SimSysfs::AddHca(const std::string& name, const std::string& bus_id,
                              const std::vector<Port>& ports, const std::string& netdev) {
  const auto function = function_dirs_.find(bus_id);
  VIGIL_CHECK(function != function_dirs_.end());  // AddPciFunction first
  const fs::path hca = fs::path(root_) / "class/infiniband" / name;
  if (absl::Status made = MakeDirs(hca); !made.ok()) return made;
  if (absl::Status linked = Link(fs::path("../../..") / function->second, hca / "device");
      !linked.ok()) {
    return linked;
  }
  std::vector<std::pair<std::string, std::string>> files;
  for (uint32_t number = 1; number <= ports.size(); ++number) {
    const Port& port = ports[number - 1];
    const std::string dir = PortDir(name, number);
    files.insert(files.end(), {{dir + "/state", port.state},
                               {dir + "/phys_state", port.phys_state},
                               {dir + "/rate", port.rate},
                               {dir + "/link_layer", port.link_layer}});
    for (const auto& [counter, value] : port.counters) {
      files.emplace_back(dir + "/counters/" + counter, std::to_string(value));
    }
    for (const auto& [counter, value] : port.hw_counters) {
      files.emplace_back(dir + "/hw_counters/" + counter, std::to_string(value));
    }
    if (!netdev.empty() && port.link_layer == "Ethernet") {
      files.emplace_back(dir + "/gid_attrs/ndevs/0", netdev);
    }
  }
  const std::string net = function->second + "/net/" + netdev;
  if (!netdev.empty()) {
    files.insert(files.end(),
                 {{net + "/carrier", "1"}, {net + "/speed", "400000"}, {net + "/mtu", "4200"}});
  }
  for (const auto& [file, contents] : files) {
    if (absl::Status wrote = Write(file, contents); !wrote.ok()) return wrote;
  }
  if (netdev.empty()) return absl::OkStatus();
  if (absl::Status made = MakeDirs(fs::path(root_) / "class/net"); !made.ok()) return made;
  return Link(fs::path("../..") / net, fs::path(root_) / "class/net" / netdev);
}

std::string SysfsBusId(const std::string& nvml_bus_id) {
  // NVML: 8 hex digits of domain; sysfs: 4.
  if (nvml_bus_id.size() != 16 || nvml_bus_id.substr(0, 4) != "0000") return "";
  std::string out = nvml_bus_id.substr(4);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

absl::Status LayOutSimRails(SimSysfs* sysfs, const std::vector<std::string>& gpu_bus_ids,
                            uint32_t rails) {
  VIGIL_CHECK(rails <= gpu_bus_ids.size() && rails <= kMaxSimRails);
  for (uint32_t i = 0; i < rails; ++i) {
    const std::string gpu_function = SysfsBusId(gpu_bus_ids[i]);
    VIGIL_CHECK(gpu_function.starts_with("0000:"));  // domain 0
    const int bus = std::stoi(gpu_function.substr(5, 2), nullptr, 16);
    VIGIL_CHECK(bus >= 3 && bus < 0xff);
    // Root port, the switch's upstream port, its downstream ports: one to the GPU, one to the HCA.
    const std::vector<std::string> above = {fmt::format("pci0000:{:02x}", bus - 3),
                                            PciFunction(bus - 3, 1, 0), PciFunction(bus - 2, 0, 0)};
    std::vector<std::string> gpu = above, hca = above;
    gpu.insert(gpu.end(), {PciFunction(bus - 1, 0, 0), gpu_function});
    hca.insert(hca.end(), {PciFunction(bus - 1, 1, 0), PciFunction(bus + 1, 0, 0)});
    const int numa_node = i < gpu_bus_ids.size() / 2 ? 0 : 1;
    for (const auto* path : {&gpu, &hca}) {
      if (absl::Status added = sysfs->AddPciFunction(*path, numa_node); !added.ok()) return added;
    }
    if (absl::Status added =
            sysfs->AddHca(fmt::format("mlx5_{}", i), hca.back(), {SimSysfs::Port{}});
        !added.ok()) {
      return added;
    }
  }
  return absl::OkStatus();
}

}  // namespace vigil::network
