// Tests of the port-to-GPU attachment: a table over PCI layouts (behind one switch, nested
// switches, only the same NUMA node, nothing near), and the placement read from a fake sysfs
// tree with the kernel's links, including the layout of a node with 8 GPUs and 8 rail HCAs.
#include "network/attachment.h"

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "network/fake_sysfs.h"
#include "testing/temp_dir.h"

namespace vigil::network {

void PrintTo(const Attachment& attachment, std::ostream* out) {
  *out << AffinityName(attachment.affinity) << " {";
  for (uint32_t gpu : attachment.gpus) *out << " " << gpu;
  *out << " }";
}

namespace {

using vigil::testing::FakeSysfs;
using vigil::testing::TempDir;

PciPlace At(std::vector<std::string> path, std::optional<int> numa) {
  return {.bus_id = path.back(), .path = std::move(path), .numa_node = numa};
}

TEST(AttachmentTest, TheGpusBehindTheSameSwitchElseTheSameNumaNodeElseNone) {
  // Switch A (upstream 0000:17:00.0) holds GPU 0 and HCA a; a nested switch below it holds GPU 1
  // and HCA b; GPU 2 sits alone under another root port of NUMA node 0; GPU 3 on node 1.
  const std::vector<PciPlace> gpus = {
      At({"pci0000:16", "0000:16:02.0", "0000:17:00.0", "0000:18:00.0", "0000:19:00.0"}, 0),
      At({"pci0000:16", "0000:16:02.0", "0000:17:00.0", "0000:18:01.0", "0000:1a:00.0",
          "0000:1b:00.0", "0000:1c:00.0"},
         0),
      At({"pci0000:16", "0000:16:03.0", "0000:20:00.0"}, 0),
      At({"pci0000:a0", "0000:a0:01.0", "0000:a1:00.0"}, 1),
  };
  struct Case {
    std::string name;
    PciPlace nic;
    Attachment want;
  };
  const std::vector<Case> cases = {
      {"same switch as GPU 0",
       At({"pci0000:16", "0000:16:02.0", "0000:17:00.0", "0000:18:02.0", "0000:1d:00.0"}, 0),
       {.gpus = {0}, .affinity = Affinity::kPcieSwitch}},
      {"behind the nested switch: GPU 1 is closer than GPU 0",
       At({"pci0000:16", "0000:16:02.0", "0000:17:00.0", "0000:18:01.0", "0000:1a:00.0",
           "0000:1b:01.0", "0000:1e:00.0"},
          0),
       {.gpus = {1}, .affinity = Affinity::kPcieSwitch}},
      {"its own root port on node 0: every GPU of node 0",
       At({"pci0000:16", "0000:16:04.0", "0000:30:00.0"}, 0),
       {.gpus = {0, 1, 2}, .affinity = Affinity::kNumaNode}},
      {"node 1",
       At({"pci0000:a0", "0000:a0:02.0", "0000:a2:00.0"}, 1),
       {.gpus = {3}, .affinity = Affinity::kNumaNode}},
      {"no NUMA information and no shared switch",
       At({"pci0000:c0", "0000:c0:01.0", "0000:c1:00.0"}, std::nullopt),
       {.gpus = {}, .affinity = Affinity::kNone}},
      {"a NUMA node without GPUs",
       At({"pci0000:c0", "0000:c0:01.0", "0000:c1:00.0"}, 3),
       {.gpus = {}, .affinity = Affinity::kNone}},
  };
  for (const Case& c : cases) EXPECT_EQ(Attach(c.nic, gpus), c.want) << c.name;
  EXPECT_EQ(Attach(cases[0].nic, {}), Attachment{}) << "no GPUs";
}

TEST(AttachmentTest, EightRailHcasEachFindTheirGpuThroughTheSysfsLinks) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  std::vector<std::string> gpu_ids, hca_ids;
  for (int i = 0; i < 8; ++i) {
    // One PCIe switch per GPU and HCA pair, four per NUMA node.
    const std::string host = i < 4 ? "pci0000:10" : "pci0000:90";
    const int root_bus = i < 4 ? 0x10 : 0x90;
    const int bus = root_bus + 0x10 * (i % 4 + 1);
    const auto id = [](int b, int d) { return fmt::format("0000:{:02x}:{:02x}.0", b, d); };
    // The host bridge, a root port, the switch's upstream port.
    const std::vector<std::string> above = {host, id(root_bus, 1 + i % 4), id(bus + 1, 0)};
    std::vector<std::string> gpu = above, hca = above;
    gpu.push_back(id(bus + 2, 0));
    gpu.push_back(id(bus + 3, 0));
    hca.push_back(id(bus + 2, 1));
    hca.push_back(id(bus + 4, 0));
    sysfs.AddPciFunction(gpu, i < 4 ? 0 : 1);
    sysfs.AddPciFunction(hca, i < 4 ? 0 : 1);
    gpu_ids.push_back(gpu.back());
    hca_ids.push_back(hca.back());
  }
  std::vector<PciPlace> gpus;
  for (const std::string& id : gpu_ids) {
    // As NVML writes it: an 8-digit domain, upper case.
    auto place = ReadPciPlace(Env::Default(), sysfs.root(), "0000" + absl::AsciiStrToUpper(id));
    ASSERT_TRUE(place.ok()) << place.status();
    EXPECT_EQ(place->bus_id, id);
    EXPECT_EQ(place->path.size(), 5u);
    gpus.push_back(*place);
  }
  for (uint32_t i = 0; i < 8; ++i) {
    auto nic = ReadPciPlace(Env::Default(), sysfs.root(), hca_ids[i]);
    ASSERT_TRUE(nic.ok()) << nic.status();
    EXPECT_EQ(nic->numa_node, i < 4 ? 0 : 1);
    EXPECT_EQ(Attach(*nic, gpus), (Attachment{.gpus = {i}, .affinity = Affinity::kPcieSwitch}))
        << hca_ids[i];
  }
}

TEST(AttachmentTest, ABusIdThatIsNotOneOrIsNotInSysfsIsSaid) {
  TempDir dir;
  FakeSysfs sysfs(dir.File("sys"));
  sysfs.AddPciFunction({"pci0000:16", "0000:16:02.0", "0000:17:00.0"}, -1);
  auto found = ReadPciPlace(Env::Default(), sysfs.root(), "0000:17:00.0");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->numa_node, std::nullopt) << "the kernel's -1";

  EXPECT_EQ(ReadPciPlace(Env::Default(), sysfs.root(), "GPU-1234").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto missing = ReadPciPlace(Env::Default(), sysfs.root(), "0000:99:00.0");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), ::testing::HasSubstr("0000:99:00.0"));
}

}  // namespace
}  // namespace vigil::network
