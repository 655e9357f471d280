// Tests of the sysfs reader over a fake sysfs tree laid out as the kernel lays it out: discovery
// of InfiniBand and RoCE ports, their state and counters, and what an unreadable, garbled or
// missing file does (one line, the value unknown, never a value made up).
#include "network/sysfs_ports.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "network/fake_sysfs.h"
#include "testing/fault_env.h"
#include "testing/temp_dir.h"

namespace vigil::network {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using vigil::testing::FakeSysfs;
using vigil::testing::FaultEnv;
using vigil::testing::TempDir;

class SysfsPortsTest : public ::testing::Test {
 protected:
  // Two InfiniBand HCAs (one port each) and a dual-port RoCE HCA whose function carries ens1f0.
  void SetUp() override {
    sysfs_.AddPciFunction({"pci0000:16", "0000:16:02.0", "0000:17:00.0"}, 0);
    sysfs_.AddPciFunction({"pci0000:16", "0000:16:03.0", "0000:18:00.0"}, 0);
    sysfs_.AddPciFunction({"pci0000:a0", "0000:a0:01.0", "0000:a1:00.0"}, 1);
    sysfs_.AddHca("mlx5_0", "0000:17:00.0", {FakeSysfs::Port{}});
    sysfs_.AddHca("mlx5_1", "0000:18:00.0", {FakeSysfs::Port{.rate = "200 Gb/sec (4X HDR)"}});
    FakeSysfs::Port roce{.rate = "100 Gb/sec (4X EDR)", .link_layer = "Ethernet"};
    sysfs_.AddHca("mlx5_2", "0000:a1:00.0", {roce, roce}, "ens1f0");
  }

  SysfsPorts Open(Env* env = Env::Default()) {
    auto ports = SysfsPorts::Open(env, sysfs_.root());
    EXPECT_TRUE(ports.ok()) << ports.status();
    return *std::move(ports);
  }

  TempDir dir_;
  FakeSysfs sysfs_{dir_.File("sys")};
};

TEST_F(SysfsPortsTest, DiscoveryFindsEveryPortWithItsFunctionLinkLayerAndNetdev) {
  const SysfsPorts::Discovery found = Open().Discover();

  EXPECT_TRUE(found.problems.empty()) << found.problems.front();
  ASSERT_EQ(found.ports.size(), 4u);
  std::vector<std::string> names;
  for (const NicPort& port : found.ports) names.push_back(port.Name());
  EXPECT_THAT(names, ElementsAre("mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_2/2"));
  EXPECT_EQ(found.ports[0].pci_bus_id, "0000:17:00.0");
  EXPECT_EQ(found.ports[0].link_layer, LinkLayer::kInfiniBand);
  EXPECT_FALSE(found.ports[0].net.has_value()) << "an InfiniBand port has no netdev";
  EXPECT_EQ(found.ports[3].pci_bus_id, "0000:a1:00.0");
  EXPECT_EQ(found.ports[3].link_layer, LinkLayer::kEthernet);
  ASSERT_TRUE(found.ports[3].net.has_value());
  EXPECT_EQ(found.ports[3].net->name, "ens1f0");
  EXPECT_FALSE(found.ports[0].state.has_value()) << "discovery reads no state";
}

TEST_F(SysfsPortsTest, ARoCEPortsOwnGidNamesItsNetdevBeforeTheFunctions) {
  // A second netdev on the function (a representor, a VF's uplink): the port's GID says which.
  sysfs_.Write(FakeSysfs::PortDir("mlx5_2", 2) + "/gid_attrs/ndevs/0", "ens1f1");
  const SysfsPorts::Discovery found = Open().Discover();
  ASSERT_EQ(found.ports.size(), 4u);
  EXPECT_EQ(found.ports[2].net->name, "ens1f0");
  EXPECT_EQ(found.ports[3].net->name, "ens1f1");
  // Without the GID file (kernels before 4.4, or no GID yet): the function's netdev.
  std::filesystem::remove_all(sysfs_.root() + "/" + FakeSysfs::PortDir("mlx5_2", 2) + "/gid_attrs");
  EXPECT_EQ(Open().Discover().ports[3].net->name, "ens1f0");
}

TEST_F(SysfsPortsTest, StateIsReadAndFollowsTheFiles) {
  const SysfsPorts reader = Open();
  NicPort port = reader.Discover().ports[1];
  reader.ReadState(&port);
  EXPECT_TRUE(port.state_problems.empty());
  EXPECT_EQ(port.state, PortState::kActive);
  EXPECT_EQ(port.phys_state, PhysState::kLinkUp);
  EXPECT_EQ(port.rate, (PortRate{.gbps = 200, .lanes = 4, .speed = "HDR"}));

  sysfs_.Write(FakeSysfs::PortDir("mlx5_1", 1) + "/state", "1: DOWN");
  sysfs_.Write(FakeSysfs::PortDir("mlx5_1", 1) + "/phys_state", "2: Polling");
  reader.ReadState(&port);
  EXPECT_EQ(port.state, PortState::kDown);
  EXPECT_EQ(port.phys_state, PhysState::kPolling);
}

TEST_F(SysfsPortsTest, ARoCEPortsNetdevIsReadAndAnInterfaceDownIsUnknownNotAProblem) {
  const SysfsPorts reader = Open();
  NicPort port = reader.Discover().ports[2];
  reader.ReadState(&port);
  ASSERT_TRUE(port.net.has_value());
  EXPECT_EQ(port.net->carrier, true);
  EXPECT_EQ(port.net->speed_mbps, 400000);
  EXPECT_EQ(port.net->mtu, 4200);

  // What the kernel shows of an interface without link: carrier 0, speed -1.
  const std::string net = "devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/net/ens1f0";
  sysfs_.Write(net + "/carrier", "0");
  sysfs_.Write(net + "/speed", "-1");
  reader.ReadState(&port);
  EXPECT_EQ(port.net->carrier, false);
  EXPECT_EQ(port.net->speed_mbps, std::nullopt);
  std::filesystem::remove(sysfs_.root() + "/" + net + "/carrier");
  reader.ReadState(&port);
  EXPECT_EQ(port.net->carrier, std::nullopt);
  EXPECT_TRUE(port.state_problems.empty()) << port.state_problems.front();
}

TEST_F(SysfsPortsTest, AGarbledOrUnreadableFileLeavesItsValueUnknownWithOneLine) {
  FaultEnv env;
  const SysfsPorts reader = Open(&env);
  NicPort port = reader.Discover().ports[0];
  reader.ReadState(&port);
  ASSERT_EQ(port.state, PortState::kActive);

  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/state", "4: ACTIVATED");
  reader.ReadState(&port);
  EXPECT_EQ(port.state, std::nullopt) << "never the value read before";
  EXPECT_EQ(port.phys_state, PhysState::kLinkUp);
  ASSERT_EQ(port.state_problems.size(), 1u);
  EXPECT_THAT(port.state_problems[0], HasSubstr("mlx5_0/1: "));
  EXPECT_THAT(port.state_problems[0], HasSubstr("ports/1/state: port state '4: ACTIVATED'"));

  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/state", "4: ACTIVE");
  env.FailNext(FaultEnv::Op::kRead, EIO);  // the state file, read first
  reader.ReadState(&port);
  EXPECT_EQ(port.state, std::nullopt);
  ASSERT_EQ(port.state_problems.size(), 1u);
  EXPECT_THAT(port.state_problems[0], HasSubstr("state"));

  reader.ReadState(&port);
  EXPECT_EQ(port.state, PortState::kActive) << "read again next time";
  EXPECT_TRUE(port.state_problems.empty());
}

TEST_F(SysfsPortsTest, CountersOfBothDirectoriesAreReadAndAGarbledOneIsLeftOut) {
  const SysfsPorts reader = Open();
  NicPort port = reader.Discover().ports[0];
  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/symbol_error", "121");
  reader.ReadCounters(&port);
  EXPECT_TRUE(port.counter_problems.empty());
  EXPECT_EQ(port.counters.at("symbol_error"), 121u);
  EXPECT_EQ(port.counters.at("link_downed"), 0u);
  EXPECT_EQ(port.counters.at("out_of_buffer"), 0u) << "hw_counters/ too";
  EXPECT_EQ(port.counters.size(), 7u);

  sysfs_.Write(FakeSysfs::PortDir("mlx5_0", 1) + "/counters/link_downed", "N/A");
  reader.ReadCounters(&port);
  EXPECT_FALSE(port.counters.contains("link_downed"));
  EXPECT_EQ(port.counters.at("symbol_error"), 121u);
  ASSERT_EQ(port.counter_problems.size(), 1u);
  EXPECT_THAT(port.counter_problems[0], HasSubstr("counters/link_downed: counter 'N/A'"));
}

TEST_F(SysfsPortsTest, APortWithoutHwCountersIsNoProblemButOneWithoutCountersIs) {
  const SysfsPorts reader = Open();
  NicPort port = reader.Discover().ports[0];
  std::filesystem::remove_all(sysfs_.root() + "/" + FakeSysfs::PortDir("mlx5_0", 1) +
                              "/hw_counters");
  reader.ReadCounters(&port);
  EXPECT_TRUE(port.counter_problems.empty());
  std::filesystem::remove_all(sysfs_.root() + "/" + FakeSysfs::PortDir("mlx5_0", 1) + "/counters");
  reader.ReadCounters(&port);
  EXPECT_TRUE(port.counters.empty());
  ASSERT_EQ(port.counter_problems.size(), 1u);
  EXPECT_THAT(port.counter_problems[0], HasSubstr("counters"));
}

TEST_F(SysfsPortsTest, ANodeWithoutRdmaHasNoPortsAndNoProblem) {
  TempDir empty;
  auto reader = SysfsPorts::Open(Env::Default(), empty.path().string());
  ASSERT_TRUE(reader.ok()) << reader.status();
  const SysfsPorts::Discovery found = reader->Discover();
  EXPECT_TRUE(found.ports.empty());
  EXPECT_TRUE(found.problems.empty());
}

TEST_F(SysfsPortsTest, ARootThatIsNotADirectoryIsRefusedInOneLine) {
  for (const std::string& root : std::vector<std::string>{
           dir_.File("missing"), "", sysfs_.root() + "/bus/pci/devices/0000:17:00.0/numa_node"}) {
    auto reader = SysfsPorts::Open(Env::Default(), root);
    ASSERT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument) << root;
    EXPECT_THAT(reader.status().message(), HasSubstr("--sysfs-root '" + root + "'"));
    EXPECT_EQ(std::string(reader.status().message()).find('\n'), std::string::npos);
  }
}

TEST_F(SysfsPortsTest, APortDirectoryThatIsNotANumberIsSaidAndSkipped) {
  std::filesystem::create_directories(sysfs_.root() + "/class/infiniband/mlx5_0/ports/extra");
  const SysfsPorts::Discovery found = Open().Discover();
  EXPECT_EQ(found.ports.size(), 4u);
  ASSERT_EQ(found.problems.size(), 1u);
  EXPECT_THAT(found.problems[0], HasSubstr("'extra'"));
}

}  // namespace
}  // namespace vigil::network
