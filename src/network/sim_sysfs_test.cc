// Tests of the written sysfs tree: the simulated node's rails read back by the network source's
// own reader and topology as rail i serving GPU i; a tree that cannot be written is a Status.
#include "network/sim_sysfs.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "network/port_map.h"
#include "network/sysfs_ports.h"
#include "testing/temp_dir.h"

namespace vigil::network {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using vigil::testing::TempDir;

TEST(SimSysfsTest, TheSimulatedRailsAreReadBackAsRailIServingGpuI) {
  TempDir dir;
  auto tree = SimSysfs::Create(dir.File("sys"));
  ASSERT_TRUE(tree.ok()) << tree.status();
  const std::vector<std::string> gpus = {"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0",
                                         "00000000:5D:00.0"};
  ASSERT_TRUE(LayOutSimRails(&*tree, gpus, 3).ok());
  auto reader = SysfsPorts::Open(Env::Default(), tree->root());
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<NicPort> ports = reader->Discover().ports;
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[2].Name(), "mlx5_2/1");
  EXPECT_EQ(ports[2].pci_bus_id, "0000:3b:00.0");
  auto mapped = BuildPortMap(Env::Default(), tree->root(), std::move(ports), gpus, {});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_THAT((*mapped)[i].attachment.gpus, ElementsAre(i));
    EXPECT_EQ(AffinityName((*mapped)[i].attachment.affinity), "pcie-switch");
  }
  ASSERT_TRUE(tree->Write(SimSysfs::PortDir("mlx5_1", 1) + "/state", "1: DOWN").ok());
  NicPort port = reader->Discover().ports[1];
  reader->ReadState(&port);
  EXPECT_EQ(port.state, PortState::kDown);
}

TEST(SimSysfsTest, SysfsNamesTheFunctionWithAFourDigitDomain) {
  EXPECT_EQ(SysfsBusId("00000000:9A:00.0"), "0000:9a:00.0");
  EXPECT_EQ(SysfsBusId("0000:9a:00.0"), "");
  EXPECT_EQ(SysfsBusId("00000001:08:00.0"), "0001:08:00.0");
  EXPECT_EQ(SysfsBusId("00010000:08:00.0"), "") << "a domain past 16 bits";
}

TEST(SimSysfsTest, ATreeThatCannotBeWrittenIsAStatusNamingThePath) {
  TempDir dir;
  const std::string file = dir.File("plain-file");
  std::ofstream(file) << "x";
  auto tree = SimSysfs::Create(file + "/sys");
  ASSERT_FALSE(tree.ok());
  EXPECT_THAT(tree.status().message(), HasSubstr(file));
}

}  // namespace
}  // namespace vigil::network
