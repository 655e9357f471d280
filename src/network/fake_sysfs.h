// Tests' handle on a written sysfs tree (network/sim_sysfs.h): the same tree, where a failure to
// write fails the test loudly instead of returning a Status. Used by the network module's tests
// and the end-to-end tests; not by the product. Not thread-safe; owned by one test.
#pragma once

#include <string>
#include <vector>

#include "common/check.h"
#include "network/sim_sysfs.h"

namespace vigil::testing {

class FakeSysfs {
 public:
  using Port = network::SimSysfs::Port;

  // `root` is created if missing.
  explicit FakeSysfs(std::string root) : tree_(Must(network::SimSysfs::Create(std::move(root)))) {}

  void AddPciFunction(const std::vector<std::string>& path, int numa_node) {
    VIGIL_CHECK(tree_.AddPciFunction(path, numa_node).ok());
  }
  void AddHca(const std::string& name, const std::string& bus_id, const std::vector<Port>& ports,
              const std::string& netdev = "") {
    VIGIL_CHECK(tree_.AddHca(name, bus_id, ports, netdev).ok());
  }
  // Replaces one file at once (SimSysfs::Write).
  void Write(const std::string& relative, const std::string& contents) {
    VIGIL_CHECK(tree_.Write(relative, contents).ok());
  }
  static std::string PortDir(const std::string& hca, uint32_t port) {
    return network::SimSysfs::PortDir(hca, port);
  }
  const std::string& root() const { return tree_.root(); }
  network::SimSysfs* tree() { return &tree_; }

 private:
  static network::SimSysfs Must(absl::StatusOr<network::SimSysfs> tree) {
    VIGIL_CHECK(tree.ok());
    return *std::move(tree);
  }

  network::SimSysfs tree_;
};

}  // namespace vigil::testing
