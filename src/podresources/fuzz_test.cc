// Fuzz target of the kubelet's pod-resources answer (testing/fuzz.h): a List response's protobuf
// bytes mutated (and random bytes), parsed as the gRPC stub would and mapped to GPUs. For any
// input that parses: every device the map holds was named in the answer, and nothing crashes
// (ASan in `make fuzz`).
#include "testing/fuzz.h"

#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "podresources/pod_mapper.h"

namespace vigil {
namespace {

void Add(::v1::ListPodResourcesResponse* response, const std::string& name,
         const std::string& resource, const std::vector<std::string>& ids) {
  auto* pod = response->add_pod_resources();
  pod->set_name(name);
  pod->set_namespace_("ml");
  auto* container = pod->add_containers();
  container->set_name("main");
  auto* devices = container->add_devices();
  devices->set_resource_name(resource);
  for (const std::string& id : ids) devices->add_device_ids(id);
}

TEST(PodResourcesFuzzTest, AnswersMapOnlyTheDevicesTheyName) {
  ::v1::ListPodResourcesResponse response;
  Add(&response, "whole", "nvidia.com/gpu", {"GPU-aaaa"});
  Add(&response, "slice", "nvidia.com/gpu.shared", {"GPU-bbbb::1"});
  Add(&response, "mixed", "nvidia.com/mig-1g.10gb", {"MIG-1111"});
  Add(&response, "old", "nvidia.com/mig-3g.40gb", {"MIG-GPU-cccc/1/0"});
  Add(&response, "gke", "nvidia.com/gpu", {"nvidia0/gi3"});
  Add(&response, "nic", "example.com/nic", {"eth1"});
  const std::vector<std::string> seeds = {response.SerializeAsString()};
  // A mutated name is often not UTF-8: protobuf refuses it, and would log each refusal.
  const google::protobuf::LogSilencer quiet;
  const testing::FuzzRun run = testing::Fuzz(
      "pod-resources answer", seeds, "GPU-MIG/:0123456789abcdefnvidia.com/gpu\x0a\x12\x1a\x22",
      50'000, [](const std::string& input) {
        ::v1::ListPodResourcesResponse parsed;
        if (!parsed.ParseFromString(input)) return false;
        size_t mig = 0;
        const GpuPodMap pods = MapPods(parsed, &mig);
        for (const auto& [device, held] : pods) {
          EXPECT_NE(input.find(device.substr(0, std::min<size_t>(device.size(), 4))),
                    std::string::npos)
              << device;
          EXPECT_FALSE(held.empty()) << device;
        }
        return true;
      });
  EXPECT_GT(run.accepted, run.inputs / 20);
}

}  // namespace
}  // namespace vigil
