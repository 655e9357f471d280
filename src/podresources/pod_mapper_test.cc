// Tests of MapPods: what the kubelet's pod-resources answer says each GPU and MIG device is
// given to, in the device plugin's id forms.
#include "podresources/pod_mapper.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

std::vector<std::string> Names(const GpuPodMap& pods, const std::string& device) {
  std::vector<std::string> names;
  if (auto it = pods.find(device); it != pods.end()) {
    for (const PodInfo& pod : it->second) names.push_back(pod.pod);
  }
  return names;
}

TEST(MapPodsTest, WholeGpusSharedGpusAndMigDevicesInEveryIdForm) {
  ::v1::ListPodResourcesResponse response;
  Add(&response, "whole", "nvidia.com/gpu", {"GPU-aaaa"});
  Add(&response, "slice-1", "nvidia.com/gpu.shared", {"GPU-bbbb::1"});
  Add(&response, "slice-2", "nvidia.com/gpu.shared", {"GPU-bbbb::2"});
  Add(&response, "mixed", "nvidia.com/mig-1g.10gb", {"MIG-1111"});
  Add(&response, "single", "nvidia.com/gpu", {"MIG-2222"});
  Add(&response, "old-driver", "nvidia.com/mig-3g.40gb", {"MIG-GPU-cccc/1/0"});
  Add(&response, "nic", "example.com/nic", {"eth1"});
  size_t mig = 0;
  const GpuPodMap pods = MapPods(response, &mig);
  EXPECT_THAT(Names(pods, "GPU-aaaa"), ::testing::ElementsAre("whole"));
  EXPECT_THAT(Names(pods, "GPU-bbbb"), ::testing::ElementsAre("slice-1", "slice-2"));
  EXPECT_THAT(Names(pods, "MIG-1111"), ::testing::ElementsAre("mixed"));
  EXPECT_THAT(Names(pods, "MIG-2222"), ::testing::ElementsAre("single"));
  EXPECT_THAT(Names(pods, "MIG-GPU-cccc/1/0"), ::testing::ElementsAre("old-driver"));
  EXPECT_EQ(pods.count("eth1"), 0u);
  EXPECT_EQ(mig, 3u);
  EXPECT_EQ(MigParentUuid("MIG-GPU-cccc/1/0"), "GPU-cccc");
  EXPECT_EQ(MigParentUuid("MIG-1111"), "");
}

// A shared GPU's replicas are the GPU, each pod with the replica it holds (dcgm-exporter's vgpu
// label): the NVIDIA device plugin's "::N" (also on EKS's MIG ids) and GKE's "/vgpuN".
TEST(MapPodsTest, SharedGpuReplicasAreTheGpuWithTheirReplica) {
  ::v1::ListPodResourcesResponse response;
  Add(&response, "slice-3", "nvidia.com/gpu", {"GPU-bbbb::3"});
  Add(&response, "gke", "nvidia.com/gpu", {"nvidia0/vgpu5"});
  Add(&response, "gke-mig", "nvidia.com/gpu", {"nvidia1/gi2/vgpu0"});
  Add(&response, "eks-mig", "nvidia.com/mig-1g.10gb", {"MIG-5555::7"});
  Add(&response, "whole", "nvidia.com/gpu", {"GPU-aaaa"});
  size_t mig = 0;
  const GpuPodMap pods = MapPods(response, &mig);
  const auto vgpu_of = [&](const std::string& device) {
    auto it = pods.find(device);
    return it == pods.end() || it->second.size() != 1 ? "<not one pod>" : it->second[0].vgpu;
  };
  EXPECT_EQ(vgpu_of("GPU-bbbb"), "3");
  EXPECT_EQ(vgpu_of("nvidia0"), "5");
  EXPECT_EQ(vgpu_of("nvidia1/gi2"), "0");
  EXPECT_EQ(vgpu_of("MIG-5555"), "7");
  EXPECT_EQ(vgpu_of("GPU-aaaa"), "");
  EXPECT_EQ(mig, 2u);
}

// A pod holding a device through a ResourceClaim (pod-resources' dynamic_resources).
void AddClaim(::v1::ListPodResourcesResponse* response, const std::string& name,
              const std::string& claim, const std::string& driver, const std::string& device) {
  auto* pod = response->add_pod_resources();
  pod->set_name(name);
  pod->set_namespace_("ml");
  auto* container = pod->add_containers();
  container->set_name("main");
  auto* dynamic = container->add_dynamic_resources();
  dynamic->set_claim_name(claim);
  dynamic->set_claim_namespace("ml");
  auto* resource = dynamic->add_claim_resources();
  resource->set_driver_name(driver);
  resource->set_pool_name("n1");
  resource->set_device_name(device);
  resource->add_cdi_devices()->set_name("k8s.gpu.nvidia.com/device=" + device);
}

TEST(MapPodsTest, DraDevicesAreAttributedToTheGpuTheirSlicesSayTheyAre) {
  ::v1::ListPodResourcesResponse response;
  AddClaim(&response, "trainer", "trainer-gpu", "gpu.nvidia.com", "gpu-7");
  AddClaim(&response, "inference", "inference-mig", "gpu.nvidia.com", "gpu-2-mig-1g10gb-19-5");
  AddClaim(&response, "nic-user", "nic", "example.com", "eth1");
  Add(&response, "plugin", "nvidia.com/gpu", {"GPU-aaaa"});
  size_t mig = 0;
  GpuPodMap pods = MapPods(response, &mig);
  const DraAllocation trainer{.claim_name = "trainer-gpu",
                              .claim_namespace = "ml",
                              .driver = "gpu.nvidia.com",
                              .pool = "n1",
                              .device = "gpu-7"};
  ASSERT_EQ(pods.count(DraDeviceKey(trainer)), 1u);
  EXPECT_EQ(DraDeviceKey(trainer), "dra:gpu.nvidia.com/n1/gpu-7");
  // Which GPU a device is comes from the slices, never from the number in its name.
  AttributeDraDevices(
      [](const DraAllocation& allocation) -> std::string {
        if (allocation.device == "gpu-7") return "GPU-3333";
        if (allocation.device == "gpu-2-mig-1g10gb-19-5") return "MIG-4444";
        return "";
      },
      &pods);
  EXPECT_THAT(Names(pods, "GPU-3333"), ::testing::ElementsAre("trainer"));
  ASSERT_EQ(pods["GPU-3333"].size(), 1u);
  EXPECT_EQ(pods["GPU-3333"][0].dra, trainer);
  EXPECT_EQ(pods["GPU-3333"][0].container, "main");
  EXPECT_THAT(Names(pods, "MIG-4444"), ::testing::ElementsAre("inference"));
  EXPECT_THAT(Names(pods, "GPU-aaaa"), ::testing::ElementsAre("plugin"));
  EXPECT_EQ(pods.count(DraDeviceKey(trainer)), 0u);
  EXPECT_THAT(Names(pods, "dra:example.com/n1/eth1"), ::testing::ElementsAre("nic-user"))
      << "not a GPU: attributed to nothing";
}

}  // namespace
}  // namespace vigil
