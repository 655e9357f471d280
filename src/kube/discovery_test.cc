// Tests discovery of the version a resource is served in, on the fake API server as releases
// serve resource.k8s.io: 1.37 (DeviceTaintRules in v1), 1.36 (v1beta2), 1.35 (v1alpha3 only),
// and a cluster without DRA.
#include "kube/discovery.h"

#include "common/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::kube {
namespace {

using testing::FakeKubeApi;
using ::testing::HasSubstr;

const std::vector<std::string> kRuleVersions = {"v1", "v1beta2", "v1alpha3"};
const std::vector<std::string> kSliceVersions = {"v1", "v1beta2", "v1beta1"};

class DiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    auto made = InClusterKube::Create(api_->credentials().service_account_dir, "healthcheck",
                                      Clock::Real());
    ASSERT_TRUE(made.ok()) << made.status();
    kube_ = std::move(*made);
  }

  ::vigil::testing::TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  std::unique_ptr<InClusterKube> kube_;
};

TEST_F(DiscoveryTest, EachResourceIsFoundInTheNewestVersionThatServesIt) {
  EXPECT_EQ(*ServedVersion(*kube_, "resource.k8s.io", "devicetaintrules", kRuleVersions), "v1");
  api_->ServeDraVersions({"v1", "v1beta2", "v1beta1"}, {"v1beta2", "v1alpha3"});  // 1.36
  EXPECT_EQ(*ServedVersion(*kube_, "resource.k8s.io", "devicetaintrules", kRuleVersions),
            "v1beta2");
  EXPECT_EQ(*ServedVersion(*kube_, "resource.k8s.io", "resourceslices", kSliceVersions), "v1");
  api_->ServeDraVersions({"v1", "v1beta2", "v1beta1"}, {"v1alpha3"});  // 1.35
  EXPECT_EQ(*ServedVersion(*kube_, "resource.k8s.io", "devicetaintrules", kRuleVersions),
            "v1alpha3");
}

TEST_F(DiscoveryTest, NoVersionOrNoAnswerSaysWhatWasAsked) {
  api_->ServeDraVersions({}, {});
  const auto none = ServedVersion(*kube_, "resource.k8s.io", "devicetaintrules", kRuleVersions);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(MessageOf(none.status()),
              HasSubstr("serves no devicetaintrules in resource.k8s.io (asked v1, v1beta2, "
                        "v1alpha3)"));
  api_->ServeDraVersions({"v1"}, {"v1"});
  api_->FailNext(500, 1, "/apis/resource.k8s.io");
  const auto failed = ServedVersion(*kube_, "resource.k8s.io", "resourceslices", kSliceVersions);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(MessageOf(failed.status()), HasSubstr("HTTP 500"));
}

}  // namespace
}  // namespace vigil::kube
