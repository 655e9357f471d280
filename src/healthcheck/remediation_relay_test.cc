// Tests of the faults the relay publishes: FAIL incidents only, with the pods of each failing GPU
// — those given the GPU and those given its MIG devices.
#include "healthcheck/remediation_relay.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

HealthView Failing(const std::string& uuid) {
  HealthView view{.engine_instance_id = "e1", .have_verdict = true};
  view.verdict.set_seq(7);
  v1::GpuHealth* gpu = view.verdict.add_gpus();
  gpu->set_gpu(0);
  gpu->set_uuid(uuid);
  v1::SystemHealth* memory = gpu->add_systems();
  memory->set_system("memory");
  v1::HealthIncident* fail = memory->add_incidents();
  fail->set_gpu(0);
  fail->set_uuid(uuid);
  fail->set_status(v1::HEALTH_STATUS_FAIL);
  fail->set_code("DCGM_FR_VOLATILE_DBE_DETECTED");
  fail->set_recommended_action(v1::RECOMMENDED_ACTION_RESET_GPU);
  v1::HealthIncident* warn = memory->add_incidents();
  warn->set_status(v1::HEALTH_STATUS_WARN);
  return view;
}

TEST(RemediationRelayTest, PublishesFailuresWithThePodsOfTheGpuAndOfItsMigDevices) {
  GpuPodMap pods;
  pods["GPU-0"] = {{.pod = "whole", .namespace_name = "ml"}};
  pods["MIG-a"] = {{.pod = "infer-a", .namespace_name = "ml"}};
  pods["MIG-GPU-0/2/0"] = {{.pod = "infer-old", .namespace_name = "ml"}};
  pods["MIG-z"] = {{.pod = "other-gpu", .namespace_name = "ml"}};
  HealthView view = Failing("GPU-0");
  for (const auto& [uuid, migs] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"GPU-0", {"MIG-a", "MIG-b"}}, {"GPU-1", {"MIG-z"}}}) {
    v1::Gpu& gpu = view.gpus.emplace_back();
    gpu.set_uuid(uuid);
    gpu.set_device("nvidia" + uuid.substr(4));
    gpu.set_mig_mode(true);
    for (size_t i = 0; i < migs.size(); ++i) {
      v1::MigInstance* instance = gpu.add_mig_instances();
      instance->set_gpu_instance_id(static_cast<uint32_t>(i + 1));
      instance->set_uuid(migs[i]);
    }
  }
  // GKE's plugin names GPU 0's second instance nvidia0/gi2.
  pods["nvidia0/gi2"] = {{.pod = "infer-gke", .namespace_name = "ml"}};
  pods["nvidia0"] = {{.pod = "whole-gke", .namespace_name = "ml"}};  // by device name
  const PublishedFaults faults = RemediationRelay::FaultsOf(view, pods);
  EXPECT_EQ(faults.engine, "e1");
  EXPECT_EQ(faults.seq, 7u);
  ASSERT_EQ(faults.faults.size(), 1u) << "the WARN is not published";
  EXPECT_EQ(faults.faults[0].action, v1::RECOMMENDED_ACTION_RESET_GPU);
  ASSERT_TRUE(faults.pods_known);
  ASSERT_EQ(faults.gpu_pods.size(), 1u);
  EXPECT_THAT(faults.gpu_pods[0].pods,
              ::testing::UnorderedElementsAre("ml/whole", "ml/whole-gke", "ml/infer-a",
                                              "ml/infer-gke", "ml/infer-old"));
  // Without the kubelet's answer the remediator is told the pods are not known.
  EXPECT_FALSE(RemediationRelay::FaultsOf(Failing("GPU-0"), std::nullopt).pods_known);
  // Without the GPU list, the GPU's own and the old ids naming it still count.
  EXPECT_THAT(RemediationRelay::FaultsOf(Failing("GPU-0"), pods).gpu_pods[0].pods,
              ::testing::UnorderedElementsAre("ml/whole", "ml/infer-old"));
}

}  // namespace
}  // namespace vigil
