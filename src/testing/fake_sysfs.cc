// Implements the fake sysfs tree.
#include "testing/fake_sysfs.h"

#include <filesystem>
#include <fstream>

#include "common/check.h"

namespace vigil::testing {
namespace fs = std::filesystem;

FakeSysfs::FakeSysfs(std::string root) : root_(std::move(root)) { fs::create_directories(root_); }

void FakeSysfs::Write(const std::string& relative, const std::string& contents) {
  const fs::path file = fs::path(root_) / relative;
  fs::create_directories(file.parent_path());
  // As the kernel's show() does, a reader sees the old value or the new one, never a torn or
  // empty file: the new one is written beside the tree (where no directory listing of it sees
  // it) and renamed into place.
  const fs::path staged = fs::path(root_).parent_path() / ".fake-sysfs-write";
  std::ofstream(staged) << contents << "\n";
  fs::rename(staged, file);
}

std::string FakeSysfs::PortDir(const std::string& hca, uint32_t port) {
  return "class/infiniband/" + hca + "/ports/" + std::to_string(port);
}

void FakeSysfs::AddPciFunction(const std::vector<std::string>& path, int numa_node) {
  VIGIL_CHECK(path.size() >= 2);
  std::string dir = "devices";
  for (const std::string& component : path) dir += "/" + component;
  fs::create_directories(fs::path(root_) / dir);
  Write(dir + "/numa_node", std::to_string(numa_node));
  const fs::path links = fs::path(root_) / "bus/pci/devices";
  fs::create_directories(links);
  // As the kernel links it: relative, ../../../devices/pci.../BUS_ID.
  fs::create_directory_symlink(fs::path("../../..") / dir, links / path.back());
  function_dirs_[path.back()] = dir;
}

void FakeSysfs::AddHca(const std::string& name, const std::string& bus_id,
                       const std::vector<Port>& ports, const std::string& netdev) {
  const auto function = function_dirs_.find(bus_id);
  VIGIL_CHECK(function != function_dirs_.end());  // AddPciFunction first
  const fs::path hca = fs::path(root_) / "class/infiniband" / name;
  fs::create_directories(hca);
  fs::create_directory_symlink(fs::path("../../..") / function->second, hca / "device");
  for (uint32_t number = 1; number <= ports.size(); ++number) {
    const Port& port = ports[number - 1];
    const std::string dir = PortDir(name, number);
    Write(dir + "/state", port.state);
    Write(dir + "/phys_state", port.phys_state);
    Write(dir + "/rate", port.rate);
    Write(dir + "/link_layer", port.link_layer);
    for (const auto& [counter, value] : port.counters) {
      Write(dir + "/counters/" + counter, std::to_string(value));
    }
    for (const auto& [counter, value] : port.hw_counters) {
      Write(dir + "/hw_counters/" + counter, std::to_string(value));
    }
    if (!netdev.empty() && port.link_layer == "Ethernet") {
      Write(dir + "/gid_attrs/ndevs/0", netdev);
    }
  }
  if (netdev.empty()) return;
  const std::string net = function->second + "/net/" + netdev;
  Write(net + "/carrier", "1");
  Write(net + "/speed", "400000");
  Write(net + "/mtu", "4200");
  fs::create_directories(fs::path(root_) / "class/net");
  fs::create_directory_symlink(fs::path("../..") / net, fs::path(root_) / "class/net" / netdev);
}

}  // namespace vigil::testing
