// Tests of the pod UID cache against the fake API server through the real HTTPS client: one
// node's pods only (the field selector on the LIST and the WATCH), pods created, recreated and
// deleted after the LIST, and an API server that fails.
#include "kube/pod_uids.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::kube {
namespace {

using Json = nlohmann::json;
using testing::Eventually;
using testing::FakeKubeApi;
using testing::KubeRequest;

Json Pod(const std::string& ns, const std::string& name, const std::string& node) {
  return {{"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", {{"nodeName", node}, {"containers", Json::array({{{"name", "main"}}})}}}};
}

// The UID the fake gave pod `ns`/`name`.
std::string UidInApi(const FakeKubeApi& api, const std::string& ns, const std::string& name) {
  for (const Json& pod : api.Pods()) {
    if (pod["metadata"]["namespace"] == ns && pod["metadata"]["name"] == name) {
      return pod["metadata"]["uid"];
    }
  }
  return "";
}

class PodUidsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    auto kube = InClusterKube::Create(api_->credentials().service_account_dir, "test", &clock_);
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = std::move(*kube);
  }

  vigil::testing::TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  FakeClock clock_;
  std::shared_ptr<KubeApi> kube_;
};

TEST_F(PodUidsTest, ThisNodesPodsOnlyFollowedThroughTheirChanges) {
  api_->AddPod(Pod("ml", "train-0", "node-a"));
  api_->AddPod(Pod("ml", "train-1", "node-b"));
  api_->AddPod(Pod("default", "train-0", "node-a"));  // the same name in another namespace
  PodUids uids(kube_, "node-a", &clock_);
  uids.Start();
  ASSERT_TRUE(Eventually([&] { return api_->open_watches() == 1; }));
  EXPECT_TRUE(uids.synced());
  EXPECT_EQ(uids.UidOf("ml", "train-0"), UidInApi(*api_, "ml", "train-0"));
  EXPECT_EQ(uids.UidOf("default", "train-0"), UidInApi(*api_, "default", "train-0"));
  EXPECT_NE(uids.UidOf("ml", "train-0"), uids.UidOf("default", "train-0"));
  EXPECT_EQ(uids.UidOf("ml", "train-1"), "");  // another node's pod is never asked for

  // Created after the LIST: through the watch. Another node's pod: not even streamed.
  api_->AddPod(Pod("ml", "infer-0", "node-a"));
  api_->AddPod(Pod("ml", "infer-1", "node-b"));
  ASSERT_TRUE(Eventually([&] { return !uids.UidOf("ml", "infer-0").empty(); }));
  EXPECT_EQ(uids.UidOf("ml", "infer-0"), UidInApi(*api_, "ml", "infer-0"));

  // Recreated under its name (a StatefulSet's pod): the new UID. Deleted: none.
  const std::string before = uids.UidOf("ml", "train-0");
  api_->AddPod(Pod("ml", "train-0", "node-a"));
  ASSERT_TRUE(Eventually([&] {
    const std::string now = uids.UidOf("ml", "train-0");
    return !now.empty() && now != before;
  }));
  EXPECT_EQ(uids.UidOf("ml", "train-0"), UidInApi(*api_, "ml", "train-0"));
  ASSERT_TRUE(api_->RemovePod("default", "train-0"));
  ASSERT_TRUE(Eventually([&] { return uids.UidOf("default", "train-0").empty(); }));
  EXPECT_EQ(uids.UidOf("ml", "infer-1"), "");

  // Every request names the node: the API server sends one node's pods, never the cluster's.
  int pod_requests = 0;
  for (const KubeRequest& request : api_->Requests()) {
    if (request.path != "/api/v1/pods") continue;
    ++pod_requests;
    EXPECT_EQ(request.params.at("fieldSelector"), "spec.nodeName=node-a");
  }
  EXPECT_EQ(pod_requests, 2);  // one LIST, one WATCH
  EXPECT_EQ(uids.errors(), 0u);
  uids.Stop();
}

TEST_F(PodUidsTest, AnApiServerThatFailsIsCountedAndTheCacheFillsWhenItAnswers) {
  api_->AddPod(Pod("ml", "train-0", "node-a"));
  api_->FailNext(500, 1, "/api/v1/pods");
  PodUids uids(kube_, "node-a", &clock_);
  uids.Start();
  ASSERT_TRUE(Eventually([&] { return uids.errors() == 1; }));
  ASSERT_TRUE(clock_.AwaitWaiters(1));  // backing off
  EXPECT_FALSE(uids.synced());
  EXPECT_EQ(uids.UidOf("ml", "train-0"), "");
  clock_.Advance(absl::Seconds(2));  // past the informer's first backoff (1 s)
  ASSERT_TRUE(Eventually([&] { return uids.synced(); }));
  EXPECT_EQ(uids.UidOf("ml", "train-0"), UidInApi(*api_, "ml", "train-0"));
  uids.Stop();
}

}  // namespace
}  // namespace vigil::kube
