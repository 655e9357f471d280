// Tests of the drain against the fake API server as the real one answers: which pods it evicts
// and which it leaves by rule, a PodDisruptionBudget that blocks for a while or past the timeout,
// a server error and a pod already gone, and a dry run that changes nothing.
#include "remediator/drain.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::remediator {
namespace {

using ::testing::ElementsAre;
using testing::FakeKubeApi;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using Json = nlohmann::json;

Json Pod(const std::string& ns, const std::string& name, const std::string& node,
         Json limits = Json::object()) {
  return {
      {"metadata", {{"namespace", ns}, {"name", name}}},
      {"spec",
       {{"nodeName", node},
        {"containers", Json::array({{{"name", "main"}, {"resources", {{"limits", limits}}}}})}}}};
}

class DrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    auto kube =
        kube::InClusterKube::Create(api_->credentials().service_account_dir, "remediator", &clock_);
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = std::move(*kube);
    api_->AddPod(Pod("ml", "train-0", "n1", {{"nvidia.com/gpu", "1"}}));
    api_->AddPod(Pod("ml", "infer-0", "n1", {{"nvidia.com/mig-1g.10gb", 1}}));
    api_->AddPod(Pod("web", "cpu-only", "n1", {{"cpu", "2"}}));
    Json daemon = Pod("vigil", "vigil-engine-x", "n1", {{"nvidia.com/gpu", "1"}});
    daemon["metadata"]["ownerReferences"] = Json::array({{{"kind", "DaemonSet"}, {"name", "e"}}});
    api_->AddPod(daemon);
    Json mirror = Pod("kube-system", "static-gpu", "n1", {{"nvidia.com/gpu", "1"}});
    mirror["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "abc"}};
    api_->AddPod(mirror);
    api_->AddPod(Pod("system", "gpu-agent", "n1", {{"nvidia.com/gpu", "1"}}));
    api_->AddPod(Pod("ml", "train-1", "n2", {{"nvidia.com/gpu", "1"}}));
  }

  // Runs the drain on a thread, advancing the fake clock whenever it waits, as time would pass.
  DrainReport Run(const DrainOptions& options) {
    DrainReport report;
    std::atomic<bool> done{false};
    std::thread drain([&] {
      report = Drain(*kube_, clock_, "n1", options);
      done = true;
    });
    while (!done) {
      // The waiter may have left between the two reads: only a deadline that is there.
      if (const absl::Time next = clock_.EarliestDeadline(); next != absl::InfiniteFuture()) {
        clock_.Set(next);
      }
      std::this_thread::yield();
    }
    drain.join();
    return report;
  }

  std::vector<std::string> Left() const {
    std::vector<std::string> names;
    for (const Json& pod : api_->Pods()) names.push_back(pod["metadata"]["name"]);
    return names;
  }

  static std::vector<std::string> Outcomes(const DrainReport& report) {
    std::vector<std::string> out;
    for (const DrainedPod& pod : report.pods) {
      out.push_back(pod.name + " " + std::string(OutcomeName(pod.outcome)));
    }
    return out;
  }

  ::vigil::testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<FakeKubeApi> api_;
  std::unique_ptr<kube::InClusterKube> kube_;
};

TEST_F(DrainTest, EvictsThePodsHoldingGpusAndLeavesTheRestByRule) {
  const DrainReport report = Run({.exclude_namespaces = {"system"}});
  EXPECT_TRUE(report.complete) << report.error;
  EXPECT_THAT(Outcomes(report), UnorderedElementsAre("train-0 evicted", "infer-0 evicted"));
  EXPECT_THAT(
      report.skipped,
      UnorderedElementsAre("web/cpu-only: holds no GPU",
                           "vigil/vigil-engine-x: owned by a DaemonSet: it would come "
                           "straight back",
                           "kube-system/static-gpu: a mirror (static) pod: the kubelet's own",
                           "system/gpu-agent: namespace system is excluded"));
  EXPECT_THAT(Left(), UnorderedElementsAre("cpu-only", "vigil-engine-x", "static-gpu", "gpu-agent",
                                           "train-1"))
      << "another node's pod is never touched";
  for (const DrainedPod& pod : report.pods) {
    EXPECT_EQ(pod.attempts, 1);
    EXPECT_FALSE(pod.gpus.empty());
  }
}

TEST_F(DrainTest, AllPodsOrOnlyThoseOfTheFailingGpu) {
  DrainReport report = Run({.only = std::vector<std::string>{"ml/infer-0"}});
  EXPECT_THAT(Outcomes(report), ElementsAre("infer-0 evicted"));
  report = Run({.all_pods = true});
  EXPECT_THAT(Outcomes(report),
              UnorderedElementsAre("train-0 evicted", "cpu-only evicted", "gpu-agent evicted"));
  EXPECT_THAT(Left(), UnorderedElementsAre("vigil-engine-x", "static-gpu", "train-1"));
}

TEST_F(DrainTest, APodDisruptionBudgetIsWaitedForUntilTheTimeout) {
  api_->BlockEvictions("ml", "train-0", 3);
  api_->BlockEvictions("ml", "infer-0", 1000);
  const absl::Time start = clock_.Now();
  const DrainReport report = Run({.exclude_namespaces = {"system"}, .timeout = absl::Minutes(2)});
  EXPECT_FALSE(report.complete);
  ASSERT_EQ(report.pods.size(), 2u);
  for (const DrainedPod& pod : report.pods) {
    if (pod.name == "train-0") {
      EXPECT_EQ(pod.outcome, DrainedPod::Outcome::kEvicted);
      EXPECT_EQ(pod.attempts, 4) << "three 429s, then the PDB allowed it";
    } else {
      EXPECT_EQ(pod.outcome, DrainedPod::Outcome::kBlocked);
      EXPECT_THAT(pod.detail, HasSubstr("still forbade evicting it after 2m"));
      EXPECT_GT(pod.attempts, 4);
    }
  }
  EXPECT_LE(clock_.Now() - start, absl::Minutes(2)) << "it stops at the timeout";
  EXPECT_GE(clock_.Now() - start, absl::Seconds(60)) << "with backoff, not a busy loop";
}

TEST_F(DrainTest, AServerErrorIsRetriedAndAPodGoneIsDone) {
  api_->FailNext(500, 1, "/api/v1/namespaces/ml/pods/train-0/eviction");
  api_->FailNext(404, 1, "/api/v1/namespaces/ml/pods/infer-0/eviction");
  const DrainReport report = Run({.exclude_namespaces = {"system"}});
  EXPECT_TRUE(report.complete);
  EXPECT_THAT(Outcomes(report), UnorderedElementsAre("train-0 evicted", "infer-0 gone"));
}

TEST_F(DrainTest, ADryRunChangesNothing) {
  api_->ClearRequests();
  const DrainReport report = Run({.dry_run = true});
  EXPECT_TRUE(report.complete);
  EXPECT_THAT(Outcomes(report), UnorderedElementsAre("train-0 would evict", "infer-0 would evict",
                                                     "gpu-agent would evict"));
  EXPECT_EQ(Left().size(), 7u);
  for (const auto& request : api_->Requests()) EXPECT_EQ(request.method, "GET") << request.path;
}

}  // namespace
}  // namespace vigil::remediator
