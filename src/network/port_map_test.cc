// Tests of the node's port map on the layout issue 29 names: 8 InfiniBand HCAs, one per GPU
// through a PCIe switch each, and a dual-port RoCE HCA on its own root port; then the config's
// overrides, and the overrides it must refuse.
#include "network/port_map.h"

#include <filesystem>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "network/fake_sysfs.h"
#include "testing/temp_dir.h"

namespace vigil::network {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using vigil::testing::FakeSysfs;
using vigil::testing::TempDir;

class PortMapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto id = [](int bus, int device) {
      return fmt::format("0000:{:02x}:{:02x}.0", bus, device);
    };
    for (int i = 0; i < 8; ++i) {
      const int root_bus = i < 4 ? 0x10 : 0x90;
      const int bus = root_bus + 0x10 * (i % 4 + 1);
      const std::vector<std::string> above = {fmt::format("pci0000:{:02x}", root_bus),
                                              id(root_bus, 1 + i % 4), id(bus + 1, 0)};
      std::vector<std::string> gpu = above, hca = above;
      gpu.insert(gpu.end(), {id(bus + 2, 0), id(bus + 3, 0)});
      hca.insert(hca.end(), {id(bus + 2, 1), id(bus + 4, 0)});
      sysfs_.AddPciFunction(gpu, i < 4 ? 0 : 1);
      sysfs_.AddPciFunction(hca, i < 4 ? 0 : 1);
      // NVML's form of the bus id, as the engine has it.
      gpu_bus_ids_.push_back("0000" + absl::AsciiStrToUpper(gpu.back()));
      sysfs_.AddHca(fmt::format("mlx5_{}", i), hca.back(), {FakeSysfs::Port{}});
    }
    // The RoCE HCA: its own root port on NUMA node 1, two ports.
    sysfs_.AddPciFunction({"pci0000:90", "0000:90:08.0", "0000:f1:00.0"}, 1);
    FakeSysfs::Port roce{.rate = "200 Gb/sec (4X HDR)", .link_layer = "Ethernet"};
    sysfs_.AddHca("mlx5_8", "0000:f1:00.0", {roce, roce}, "ens8f0np0");
  }

  absl::StatusOr<std::vector<MappedPort>> Map(const PortOverrides& overrides = {}) {
    auto reader = SysfsPorts::Open(Env::Default(), sysfs_.root());
    EXPECT_TRUE(reader.ok()) << reader.status();
    SysfsPorts::Discovery found = reader->Discover();
    EXPECT_TRUE(found.problems.empty());
    return BuildPortMap(Env::Default(), sysfs_.root(), std::move(found.ports), gpu_bus_ids_,
                        overrides);
  }

  TempDir dir_;
  FakeSysfs sysfs_{dir_.File("sys")};
  std::vector<std::string> gpu_bus_ids_;
};

TEST_F(PortMapTest, EachRailServesItsGpuAndTheRoCEPortsTheirNumaNodesGpus) {
  auto map = Map();
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->size(), 10u);
  for (uint32_t i = 0; i < 8; ++i) {
    const MappedPort& rail = (*map)[i];
    EXPECT_EQ(rail.port.Name(), fmt::format("mlx5_{}/1", i));
    EXPECT_EQ(rail.attachment, (Attachment{.gpus = {i}, .affinity = Affinity::kPcieSwitch}));
    EXPECT_FALSE(rail.overridden);
    EXPECT_EQ(rail.placement_problem, "");
  }
  for (size_t i = 8; i < 10; ++i) {
    const MappedPort& roce = (*map)[i];
    EXPECT_EQ(roce.port.link_layer, LinkLayer::kEthernet);
    EXPECT_THAT(roce.attachment.gpus, ElementsAre(4, 5, 6, 7)) << roce.port.Name();
    EXPECT_EQ(roce.attachment.affinity, Affinity::kNumaNode);
  }
}

TEST_F(PortMapTest, AnOverrideReplacesTheTopologysAnswerForItsPortOnly) {
  auto map = Map({{"mlx5_8/2", {7, 6, 7}}, {"mlx5_0/1", {}}});
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE((*map)[0].overridden);
  EXPECT_TRUE((*map)[0].attachment.gpus.empty()) << "empty: judged for the node";
  EXPECT_THAT((*map)[9].attachment.gpus, ElementsAre(6, 7)) << "sorted, once each";
  EXPECT_TRUE((*map)[9].overridden);
  EXPECT_THAT((*map)[8].attachment.gpus, ElementsAre(4, 5, 6, 7)) << "the other RoCE port";
  EXPECT_FALSE((*map)[8].overridden);
}

TEST_F(PortMapTest, AnOverrideOfAPortOrGpuThisNodeDoesNotHaveIsRefused) {
  auto unknown_port = Map({{"mlx5_9/1", {0}}});
  ASSERT_EQ(unknown_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown_port.status().message(),
              HasSubstr("network.ports names 'mlx5_9/1', which this node does not have (its "
                        "ports: mlx5_0/1, mlx5_1/1"));

  auto unknown_gpu = Map({{"mlx5_0/1", {8}}});
  ASSERT_EQ(unknown_gpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown_gpu.status().message(),
              HasSubstr("gives 'mlx5_0/1' GPU 8, but this node has 8 GPU(s) (0 to 7)"));
}

TEST_F(PortMapTest, AnHcaWhosePlaceCannotBeReadIsJudgedForTheNodeAndSaysWhy) {
  std::filesystem::remove(sysfs_.root() + "/bus/pci/devices/0000:24:00.0");  // mlx5_0's function
  auto map = Map();
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE((*map)[0].attachment.gpus.empty());
  EXPECT_THAT((*map)[0].placement_problem, HasSubstr("mlx5_0/1: "));
  EXPECT_THAT((*map)[0].placement_problem, HasSubstr("judged for the node"));
  EXPECT_EQ((*map)[1].attachment.gpus, std::vector<uint32_t>{1});
}

}  // namespace
}  // namespace vigil::network
