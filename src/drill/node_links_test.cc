// Tests of the drill's quarantine stages against the fake API server: which quarantine the node's
// health check makes (its /status, else the API's ResourceSlices and DeviceTaintRules), and the
// device-quarantine stage — the GPU's DeviceTaintRule with the node untainted, there and back, a
// dry run that must not see a rule, and a node quarantined instead.
#include "drill/node_links.h"

#include "api/remediation.h"
#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_api.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::drill {
namespace {

using Json = nlohmann::json;
using testing::FakeKubeApi;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class NodeLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    api_->AddNode("n1", {{"nvidia.com/gpu.present", "true"}});
    auto made = kube::InClusterKube::Create(api_->credentials().service_account_dir, "drill",
                                            Clock::Real());
    ASSERT_TRUE(made.ok()) << made.status();
    kube_ = std::move(*made);
    target_ = {.node = "n1", .gpu = 3, .uuid = "GPU-3", .fault = v1::HEALTH_STATUS_FAIL};
  }
  // The node's GPUs as devices of NVIDIA's DRA driver (named by minor: not the GPU's index).
  void PublishSlice(const std::string& driver = "gpu.nvidia.com") {
    Json slice = testing::GpuSlice(
        "n1",
        Json::array({{{"name", "gpu-4"}, {"attributes", {{"uuid", {{"string", "GPU-3"}}}}}}}));
    slice["spec"]["driver"] = driver;
    slice["metadata"]["name"] = "n1-" + driver;
    api_->AddResourceSlice(slice);
  }
  // The health check's rule for GPU 3 (device gpu-4), as it labels it.
  void AddRule(const std::string& node = "n1") {
    Json rule = {{"apiVersion", "resource.k8s.io/v1"}, {"kind", "DeviceTaintRule"}};
    rule["metadata"]["name"] = "vigil-" + node + "-gpu-4";
    rule["metadata"]["labels"] = {{std::string(kRuleNodeLabel), node},
                                  {std::string(kRuleGpuLabel), "GPU-3"}};
    rule["spec"]["deviceSelector"] = {
        {"driver", "gpu.nvidia.com"}, {"pool", node}, {"device", "gpu-4"}};
    rule["spec"]["taint"] = {
        {"key", "vigil.dev/gpu-fail"}, {"value", "DCGM_FR_XID_ERROR"}, {"effect", "NoSchedule"}};
    auto made = kube_->Call("POST", "/apis/resource.k8s.io/v1/devicetaintrules", "application/json",
                            rule.dump());
    ASSERT_TRUE(made.ok() && made->status == 201) << (made.ok() ? made->body : "no answer");
  }
  void DeleteRule() {
    auto gone =
        kube_->Call("DELETE", "/apis/resource.k8s.io/v1/devicetaintrules/vigil-n1-gpu-4", "", "");
    ASSERT_TRUE(gone.ok() && gone->status == 200);
  }
  void TaintNode() {
    api_->ModifyNode("n1", [](Json& node) {
      node["spec"]["taints"] =
          Json::array({{{"key", "vigil.dev/gpu-problem"}, {"effect", "NoSchedule"}}});
    });
  }
  std::unique_ptr<Link> NewLink(bool actions_allowed) {
    return NewDeviceQuarantineLink(kube_.get(), "n1", "vigil.dev/gpu-problem", actions_allowed);
  }
  Observation Look(Link& link, Want want) {
    auto seen = link.Look(target_, want, Mark{});
    EXPECT_TRUE(seen.ok()) << seen.status();
    return seen.ok() ? *seen : Observation{};
  }

  ::vigil::testing::TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  std::unique_ptr<kube::InClusterKube> kube_;
  Target target_;
};

TEST_F(NodeLinksTest, TheHealthChecksStatusSaysWhichQuarantineItMakes) {
  const Json gpu = {{"kubernetes", Json::object()},
                    {"quarantine", {{"mode", "auto"}, {"active", true}}}};
  auto scope = FindQuarantineScope(kube_.get(), "n1", &gpu);
  ASSERT_TRUE(scope.ok()) << scope.status();
  EXPECT_TRUE(scope->gpu);
  EXPECT_THAT(scope->why, HasSubstr("/status says it quarantines the GPU"));
  const Json node = {{"kubernetes", Json::object()},
                     {"quarantine", {{"mode", "node"}, {"active", false}}}};
  EXPECT_FALSE(FindQuarantineScope(kube_.get(), "n1", &node)->gpu);
  const Json older = {{"kubernetes", Json::object()}};  // no per-GPU quarantine at all
  EXPECT_FALSE(FindQuarantineScope(kube_.get(), "n1", &older)->gpu);
}

TEST_F(NodeLinksTest, WithoutTheHealthCheckTheApiSaysWhetherTheGpusAreDraDevices) {
  auto scope = FindQuarantineScope(kube_.get(), "n1", nullptr);
  ASSERT_TRUE(scope.ok()) << scope.status();
  EXPECT_FALSE(scope->gpu) << "no slices on the node";
  PublishSlice("nic.example.com");  // another driver's devices say nothing of the GPUs
  EXPECT_FALSE(FindQuarantineScope(kube_.get(), "n1", nullptr)->gpu);
  PublishSlice();
  scope = FindQuarantineScope(kube_.get(), "n1", nullptr);
  EXPECT_TRUE(scope->gpu);
  EXPECT_THAT(scope->why, HasSubstr("(resource.k8s.io/v1)"));
  api_->ServeDraVersions({"v1"}, {});  // a cluster without DeviceTaintRules
  scope = FindQuarantineScope(kube_.get(), "n1", nullptr);
  EXPECT_FALSE(scope->gpu);
  EXPECT_THAT(scope->why, HasSubstr("serves no DeviceTaintRules"));
  api_->ServeDraVersions({"v1"}, {"v1"});
  api_->FailNext(500, 1, "/apis/resource.k8s.io");
  EXPECT_FALSE(FindQuarantineScope(kube_.get(), "n1", nullptr).ok());
}

TEST_F(NodeLinksTest, TheDeviceQuarantineIsTheGpusRuleWithTheNodeUntaintedAndItsWayBack) {
  auto link = NewLink(/*actions_allowed=*/true);
  ASSERT_TRUE(link->Preflight(target_, /*force=*/false).ok());
  Observation seen = Look(*link, Want::kFault);
  EXPECT_FALSE(seen.shown);
  EXPECT_EQ(seen.detail, "no DeviceTaintRule names GPU 3 yet");
  AddRule("n2");  // another node's rule for a GPU of the same UUID is not this one's
  EXPECT_FALSE(Look(*link, Want::kFault).shown);
  AddRule();
  seen = Look(*link, Want::kFault);
  EXPECT_TRUE(seen.shown);
  EXPECT_EQ(seen.detail,
            "device quarantined: DeviceTaintRule vigil-n1-gpu-4 taints gpu.nvidia.com/n1/gpu-4 "
            "vigil.dev/gpu-fail=DCGM_FR_XID_ERROR:NoSchedule; node untainted");
  EXPECT_FALSE(Look(*link, Want::kRecovered).shown);
  TaintNode();
  seen = Look(*link, Want::kFault);
  EXPECT_FALSE(seen.shown) << "the node is out of service too";
  EXPECT_THAT(seen.detail, HasSubstr("but node n1 has the taint vigil.dev/gpu-problem too"));
  api_->ModifyNode("n1", [](Json& node) { node["spec"].erase("taints"); });
  DeleteRule();
  seen = Look(*link, Want::kRecovered);
  EXPECT_TRUE(seen.shown);
  EXPECT_EQ(seen.detail, "the rule lifted; no taint");
}

TEST_F(NodeLinksTest, ANodeQuarantinedInsteadOfItsGpuDoesNotShowAsTheDevices) {
  auto link = NewLink(/*actions_allowed=*/true);
  ASSERT_TRUE(link->Preflight(target_, false).ok());
  TaintNode();
  const Observation seen = Look(*link, Want::kFault);
  EXPECT_FALSE(seen.shown);
  EXPECT_THAT(seen.detail, HasSubstr("the health check quarantined the node instead"));
}

TEST_F(NodeLinksTest, ADryRunMustNotSeeARuleAndAWarnProvesNothing) {
  auto link = NewLink(/*actions_allowed=*/false);
  ASSERT_TRUE(link->Preflight(target_, false).ok());
  Observation seen = Look(*link, Want::kFault);
  EXPECT_FALSE(seen.shown);
  EXPECT_EQ(seen.detail, "no rule, and the condition does not say it was withheld");
  AddRule();
  seen = Look(*link, Want::kFault);
  EXPECT_TRUE(seen.failed);
  EXPECT_THAT(seen.detail, HasSubstr("without --allow-actions"));
  target_.fault = v1::HEALTH_STATUS_WARN;
  EXPECT_TRUE(Look(*link, Want::kFault).not_applicable);
}

TEST_F(NodeLinksTest, AGpuQuarantinedAlreadyIsRefusedAtPreflightUnlessForced) {
  AddRule();
  auto link = NewLink(/*actions_allowed=*/true);
  const absl::Status refused = link->Preflight(target_, /*force=*/false);
  EXPECT_THAT(MessageOf(refused),
              StartsWith("GPU 3 of node n1 is quarantined already (DeviceTaintRule vigil-n1-gpu-4 "
                         "taints gpu.nvidia.com/n1/gpu-4"));
  ASSERT_TRUE(link->Preflight(target_, /*force=*/true).ok());
  EXPECT_TRUE(Look(*link, Want::kFault).not_applicable);
  api_->ServeDraVersions({"v1"}, {});
  EXPECT_THAT(MessageOf(NewLink(true)->Preflight(target_, false)),
              HasSubstr("the cluster serves no DeviceTaintRules"));
}

}  // namespace
}  // namespace vigil::drill
