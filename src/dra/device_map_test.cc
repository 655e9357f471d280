// Tests the DRA device map on slices shaped as the API versions serve them and as NVIDIA's driver
// fills them: names that do not follow the engine's indexes, attributes with and without the
// driver's domain, the PCI bus id under both of its names.
#include "dra/device_map.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

json StringAttribute(const std::string& value) { return {{"string", value}}; }

// A v1 (or v1beta2) slice: attributes on each device.
json SliceV1(const std::string& node, const std::string& driver, const json& devices) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", node + "-" + driver + "-abcde"}}},
          {"spec",
           {{"driver", driver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}

json GpuDevice(const std::string& name, const std::string& uuid, const std::string& pci) {
  return {{"name", name},
          {"attributes",
           {{"type", StringAttribute("gpu")},
            {"uuid", StringAttribute(uuid)},
            {"productName", StringAttribute("NVIDIA H100 80GB HBM3")},
            {"cudaComputeCapability", {{"version", "9.0.0"}}},
            {"resource.kubernetes.io/pciBusID", StringAttribute(pci)}}}};
}

// The driver names GPUs by device minor: here gpu-4 is NVML's GPU 0 and gpu-0 its GPU 1. The map
// follows the UUIDs, not the names.
TEST(DeviceMapTest, MatchesByUuidNotByTheNumberInAName) {
  const std::vector<json> slices = {
      SliceV1("node-a", "gpu.nvidia.com",
              {GpuDevice("gpu-0", "GPU-bbbb", "0000:2a:00.0"),
               GpuDevice("gpu-4", "GPU-aaaa", "0000:18:00.0")}),
      SliceV1("node-b", "gpu.nvidia.com", {GpuDevice("gpu-0", "GPU-other", "0000:18:00.0")}),
      SliceV1("node-a", "other.example.com", {GpuDevice("x-0", "GPU-aaaa", "0000:18:00.0")})};
  const std::vector<Device> devices = DevicesOf(slices, kNvidiaGpuDriver, "node-a");
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].pool, "node-a");
  EXPECT_EQ(devices[0].type, "gpu");
  const DeviceMap map =
      MapDevices({{.gpu = 0, .uuid = "GPU-aaaa", .pci_bus_id = "00000000:18:00.0"},
                  {.gpu = 1, .uuid = "GPU-bbbb", .pci_bus_id = "00000000:2A:00.0"},
                  {.gpu = 2, .uuid = "GPU-cccc", .pci_bus_id = "00000000:3A:00.0"}},
                 devices);
  ASSERT_EQ(map.matches.size(), 2u);
  EXPECT_EQ(map.Find(0)->name, "gpu-4");
  EXPECT_EQ(map.Find(1)->name, "gpu-0");
  EXPECT_EQ(map.matches[0].matched_by, MatchedBy::kUuid);
  EXPECT_EQ(map.Find(2), nullptr);
  ASSERT_EQ(map.unmatched_gpus.size(), 1u);
  EXPECT_EQ(map.unmatched_gpus[0].gpu, 2u);
  EXPECT_TRUE(map.unmatched_devices.empty());
}

// v1beta1 keeps attributes under `basic`; an older driver writes `pcieBusID` and, here, no UUID
// (the PCI bus id then decides); an attribute may carry the driver's domain.
TEST(DeviceMapTest, ReadsTheBetaShapeAndTheOlderPciAttribute) {
  json slice = SliceV1("node-a", "gpu.nvidia.com", json::array());
  slice["apiVersion"] = "resource.k8s.io/v1beta1";
  slice["spec"]["devices"] = {{{"name", "gpu-1"},
                               {"basic",
                                {{"attributes",
                                  {{"gpu.nvidia.com/type", StringAttribute("gpu")},
                                   {"pcieBusID", StringAttribute("0000:3A:00.0")},
                                   {"minor", {{"int", 1}}}}}}}},
                              {{"name", "gpu-1-mig-1g10gb-19-0"},
                               {"basic",
                                {{"attributes",
                                  {{"type", StringAttribute("mig")},
                                   {"uuid", StringAttribute("MIG-1111")},
                                   {"parentUUID", StringAttribute("GPU-cccc")},
                                   {"pcieBusID", StringAttribute("0000:3a:00.0")}}}}}}};
  const std::vector<Device> devices = DevicesOf({slice}, kNvidiaGpuDriver, "node-a");
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].type, "gpu");
  EXPECT_EQ(devices[0].pci_bus_id, "0000:3a:00.0");
  EXPECT_EQ(devices[1].parent_uuid, "GPU-cccc");
  const DeviceMap map =
      MapDevices({{.gpu = 2, .uuid = "GPU-cccc", .pci_bus_id = "00000000:3A:00.0"},
                  {.gpu = 2, .gpu_instance = 19, .uuid = "MIG-1111"}},
                 devices);
  ASSERT_EQ(map.matches.size(), 2u);
  EXPECT_EQ(map.Find(2)->name, "gpu-1") << "the MIG device's bus id is its parent's: not taken";
  EXPECT_EQ(map.matches[0].matched_by, MatchedBy::kPciBusId);
  EXPECT_EQ(map.Find(2, 19)->name, "gpu-1-mig-1g10gb-19-0");
  EXPECT_EQ(MatchedByName(map.matches[1].matched_by), "uuid");
}

TEST(DeviceMapTest, ASliceWithoutDevicesOrNamesAddsNone) {
  json slice = SliceV1("node-a", "gpu.nvidia.com", {{{"attributes", json::object()}}});
  EXPECT_TRUE(DevicesOf({slice, json::object(), json("text")}, kNvidiaGpuDriver, "node-a").empty());
  const DeviceMap map = MapDevices({{.gpu = 0, .uuid = "GPU-aaaa"}}, {});
  EXPECT_THAT(map.unmatched_gpus, ::testing::SizeIs(1));
}

}  // namespace
}  // namespace vigil::dra
