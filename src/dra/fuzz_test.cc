// Fuzz target of ResourceSlices as the API server sends them (testing/fuzz.h): a slice's JSON
// mutated (and random bytes), parsed and read for the NVIDIA driver's devices on a node. For
// any input: devices named, of that driver and node, never a crash (ASan in `make fuzz`) or an
// exception out of nlohmann's JSON.
#include "testing/fuzz.h"

#include "dra/device_map.h"
#include "gtest/gtest.h"

namespace vigil::dra {
namespace {

TEST(DraFuzzTest, SlicesYieldNamedDevicesOrNone) {
  const std::vector<std::string> seeds = {
      R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"n1-gpu"},)"
      R"("spec":{"driver":"gpu.nvidia.com","nodeName":"n1","pool":{"name":"n1","generation":1,)"
      R"("resourceSliceCount":1},"devices":[{"name":"gpu-0","attributes":{"type":{"string":"gpu"},)"
      R"("uuid":{"string":"GPU-aaaa"},"resource.kubernetes.io/pciBusID":{"string":"0000:18:00.0"}}},)"
      R"({"name":"gpu-0-mig-1","attributes":{"type":{"string":"mig"},"uuid":{"string":"MIG-1"},)"
      R"("parentUUID":{"string":"GPU-aaaa"},"profile":{"string":"1g.10gb"}}}]}})",
      R"({"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceSlice","metadata":{"name":"x"},)"
      R"("spec":{"driver":"gpu.nvidia.com","nodeName":"n1","pool":{"name":"n1"},)"
      R"("devices":[{"name":"gpu-1","basic":{"attributes":{"uuid":{"string":"GPU-bbbb"}}}}]}})"};
  const testing::FuzzRun run = testing::Fuzz(
      "resource slice", seeds, "{}[]\":,0123456789abcdefgpumiuidstringnamedevicesGPU-", 50'000,
      [](const std::string& input) {
        const nlohmann::json slice =
            nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
        if (slice.is_discarded()) return false;
        const std::vector<Device> devices = DevicesOf({slice}, kNvidiaGpuDriver, "n1");
        for (const Device& device : devices) {
          EXPECT_FALSE(device.name.empty()) << input;
          EXPECT_NE(input.find(device.name), std::string::npos) << input;
        }
        return !devices.empty();
      });
  EXPECT_GT(run.accepted, run.inputs / 100);
}

}  // namespace
}  // namespace vigil::dra
