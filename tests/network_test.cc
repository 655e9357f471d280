// End-to-end tests of the engine's NIC port map (issue 29's first slice), with the real binary: a
// fake sysfs tree laid out as a DGX-style node (8 GPUs at the simulated GPUs' bus ids, each
// behind a PCIe switch with its rail HCA, and a dual-port RoCE HCA on NUMA node 1) given with
// --sysfs-root; the engine says each port and the GPUs it serves at start. A root that does not
// exist is one line and exit 2.
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "process.h"
#include "testing/fake_sysfs.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;

// The simulated GPUs' PCI buses (backend/sim_gpu.cc: a DGX H100's).
constexpr int kSimBuses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

std::string Function(int bus, int device) {
  return fmt::format("0000:{:02x}:{:02x}.0", bus, device);
}

// GPU i at 0000:BUS:00.0 and rail HCA mlx5_i at 0000:BUS+1:00.0, behind one switch.
void LayOutDgx(FakeSysfs* sysfs) {
  for (int i = 0; i < 8; ++i) {
    const int bus = kSimBuses[i];
    const std::vector<std::string> above = {fmt::format("pci0000:{:02x}", bus - 3),
                                            Function(bus - 3, 1), Function(bus - 2, 0)};
    std::vector<std::string> gpu = above, hca = above;
    gpu.insert(gpu.end(), {Function(bus - 1, 0), Function(bus, 0)});
    hca.insert(hca.end(), {Function(bus - 1, 1), Function(bus + 1, 0)});
    sysfs->AddPciFunction(gpu, i < 4 ? 0 : 1);
    sysfs->AddPciFunction(hca, i < 4 ? 0 : 1);
    sysfs->AddHca(fmt::format("mlx5_{}", i), hca.back(), {FakeSysfs::Port{}});
  }
  sysfs->AddPciFunction({"pci0000:e0", "0000:e0:01.0", "0000:e1:00.0"}, 1);
  FakeSysfs::Port roce{.rate = "200 Gb/sec (4X HDR)", .link_layer = "Ethernet"};
  sysfs->AddHca("mlx5_8", "0000:e1:00.0", {roce, roce}, "ens8f0np0");
}

TEST(NetworkTest, TheEngineSaysEachPortAndTheGpusItServes) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root()});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(engine.process->WaitForStderr("network: 10 NIC port(s) under " + sysfs.root()))
      << engine.process->Stderr();
  const std::string log = engine.process->Stderr();
  for (int i = 0; i < 8; ++i) {
    EXPECT_THAT(log, HasSubstr(fmt::format(
                         "network: port mlx5_{}/1 (InfiniBand, {}) serves GPU {} (pcie-switch)", i,
                         Function(kSimBuses[i] + 1, 0), i)));
  }
  EXPECT_THAT(log, HasSubstr("network: port mlx5_8/2 (Ethernet, 0000:e1:00.0, ens8f0np0) serves "
                             "GPU 4, 5, 6, 7 (numa-node)"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("warning network:")));
}

TEST(NetworkTest, AGarbledPortFileIsOneWarningAndThePortStillListed) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  sysfs.Write(FakeSysfs::PortDir("mlx5_3", 1) + "/link_layer", "Infiniband?");
  EngineProcess engine(dir.path().string(), "n1", 8, {"--sysfs-root", sysfs.root()});
  ASSERT_FALSE(engine.unix_address.empty()) << engine.process->Stderr();
  ASSERT_TRUE(engine.process->WaitForStderr("network: 10 NIC port(s)")) << engine.process->Stderr();
  const std::string log = engine.process->Stderr();
  EXPECT_THAT(log, HasSubstr("warning network: mlx5_3/1: "));
  EXPECT_THAT(log, HasSubstr("link layer 'Infiniband?' is neither"));
  EXPECT_THAT(log, HasSubstr("network: port mlx5_3/1 (link layer unknown, "));
}

TEST(NetworkTest, ASysfsRootThatDoesNotExistIsOneLineAndExit2) {
  TempDir dir;
  const std::string missing = dir.File("no-such-sys");
  auto started = Vigil({"engine", "--backend", "sim", "--gpus", "2", "--socket", dir.File("e.sock"),
                        "--listen", "", "--state-dir", dir.File("state"), "--sysfs-root", missing});
  EXPECT_EQ(started.exit_code, 2) << started.err;
  EXPECT_THAT(started.err, HasSubstr("vigil engine: --sysfs-root '" + missing +
                                     "' is not a directory: give the sysfs mount"));
  // The refusal is the last line, and one line.
  const std::string last = started.err.substr(started.err.rfind('\n', started.err.size() - 2) + 1);
  EXPECT_THAT(last, ::testing::StartsWith("vigil engine: --sysfs-root")) << started.err;
}

}  // namespace
}  // namespace vigil::testing
