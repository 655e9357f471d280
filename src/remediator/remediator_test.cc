// Tests of the remediator's state machine against the fake API server, on a fake clock: the
// health check's side (the condition, the published faults, the reset result) is played by the
// test, the remediator's by the code under test, one pass at a time.
#include "remediator/remediator.h"

#include "absl/time/clock.h"
#include "api/circuit_breaker.h"
#include "api/convert.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/object.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::remediator {
namespace {

using ::testing::Contains;
using testing::FakeKubeApi;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::map<std::string, std::string> kGpuNode = {{"nvidia.com/gpu.present", "true"}};

Json Pod(const std::string& ns, const std::string& name, const std::string& node, bool gpu) {
  Json limits = gpu ? Json{{"nvidia.com/gpu", "1"}} : Json{{"cpu", "1"}};
  return {
      {"metadata", {{"namespace", ns}, {"name", name}}},
      {"spec",
       {{"nodeName", node},
        {"containers", Json::array({{{"name", "main"}, {"resources", {{"limits", limits}}}}})}}}};
}

class RemediatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    clock_.Set(absl::FromUnixSeconds(1'780'000'000));
    for (const char* node : {"n1", "n2", "n3"}) api_->AddNode(node, kGpuNode);
    api_->AddPod(Pod("ml", "train-0", "n1", true));  // on GPU 0
    api_->AddPod(Pod("ml", "train-1", "n1", true));  // on GPU 1
    api_->AddPod(Pod("web", "cpu-only", "n1", false));
    api_->AddPod(Pod("ml", "train-2", "n2", true));
  }
  void TearDown() override {
    if (remediator_) remediator_->Stop();
  }

  void Start(RemediatorOptions options) {
    auto kube =
        kube::InClusterKube::Create(api_->credentials().service_account_dir, "remediator", &clock_);
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = std::move(*kube);
    options.clock = &clock_;
    options.untaint_after = absl::Minutes(5);
    remediator_ = std::make_unique<Remediator>(options, kube_.get());
    remediator_->StartWatching();
    ASSERT_TRUE(::vigil::testing::Eventually([&] { return remediator_->synced(); }));
  }

  // One pass, once the watch has delivered what the fake holds now.
  absl::Status Pass() {
    for (const std::string node : {"n1", "n2", "n3"}) {
      const std::string version = api_->Node(node)["metadata"]["resourceVersion"];
      EXPECT_TRUE(::vigil::testing::Eventually([&] {
        return remediator_->ResourceVersionOf(node) == version;
      })) << node;
    }
    return remediator_->ReconcileOnce();
  }

  // The health check's side: GPU `gpu` FAILs with `action`, the condition and its taint set, and
  // the pods of each GPU published.
  void Fail(const std::string& node, int gpu, const std::string& action, bool injected = false,
            bool actions_allowed = false) {
    PublishedFaults faults{.engine = "e1", .seq = 10, .pods_known = true};
    faults.faults.push_back({.gpu = gpu,
                             .uuid = "GPU-" + std::to_string(gpu),
                             .system = "memory",
                             .code = "DCGM_FR_VOLATILE_DBE_DETECTED",
                             .action = *RecommendedActionFromText(action),
                             .injected = injected,
                             .actions_allowed = actions_allowed});
    faults.gpu_pods = {{.uuid = "GPU-0", .pods = {"ml/train-0"}},
                       {.uuid = "GPU-1", .pods = {"ml/train-1"}}};
    const std::string since = kube::Time(clock_.Now());
    api_->ModifyNode(node, [&](Json& object) {
      object["metadata"]["annotations"][std::string(kFaultsAnnotation)] = FaultsToJson(faults);
      object["spec"]["taints"] = Json::array(
          {{{"key", "vigil.dev/gpu-problem"}, {"value", "true"}, {"effect", "NoSchedule"}}});
      object["status"]["conditions"] = Json::array({{{"type", "GpuProblem"},
                                                     {"status", "True"},
                                                     {"reason", "GpuFailed"},
                                                     {"lastTransitionTime", since}}});
    });
  }
  // The health check's side once the GPU passes again and the hysteresis is over.
  void Pass(const std::string& node) {
    const std::string since = kube::Time(clock_.Now());
    api_->ModifyNode(node, [&](Json& object) {
      object["metadata"]["annotations"].erase(std::string(kFaultsAnnotation));
      object["spec"]["taints"] = Json::array();
      object["status"]["conditions"] = Json::array({{{"type", "GpuProblem"},
                                                     {"status", "False"},
                                                     {"reason", "GpusHealthy"},
                                                     {"lastTransitionTime", since}}});
    });
  }
  // The health check answers the reset request on the node.
  void AnswerReset(const std::string& node, ActionOutcome outcome, const std::string& message) {
    const Json object = api_->Node(node);
    auto request = ParseRequest(
        object["metadata"]["annotations"][std::string(kResetRequestAnnotation)].get<std::string>());
    ASSERT_TRUE(request.ok()) << request.status();
    api_->ModifyNode(node, [&](Json& changed) {
      changed["metadata"]["annotations"][std::string(kResetResultAnnotation)] = ResultToJson(
          {.id = request->id, .outcome = outcome, .message = message, .finished = clock_.Now()});
    });
  }

  NodeRemediation State(const std::string& node) {
    const Json annotations = api_->Node(node)["metadata"].value("annotations", Json::object());
    if (!annotations.contains(std::string(kRemediationAnnotation))) return {};
    auto state =
        ParseRemediation(annotations[std::string(kRemediationAnnotation)].get<std::string>());
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : NodeRemediation{};
  }
  std::vector<std::string> PodNames() const {
    std::vector<std::string> names;
    for (const Json& pod : api_->Pods()) names.push_back(pod["metadata"]["name"]);
    return names;
  }
  std::vector<std::string> EventReasons(const std::string& node) const {
    std::vector<std::string> reasons;
    for (const Json& event : api_->Events()) {
      if (event["involvedObject"]["name"] == node) reasons.push_back(event["reason"]);
    }
    return reasons;
  }
  int NodeWrites() const {
    int writes = 0;
    for (const auto& request : api_->Requests()) {
      if (request.method == "PATCH" && request.path.starts_with("/api/v1/nodes/")) ++writes;
    }
    return writes;
  }

  ::vigil::testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<FakeKubeApi> api_;
  std::unique_ptr<kube::InClusterKube> kube_;
  std::unique_ptr<Remediator> remediator_;
};

TEST_F(RemediatorTest, AResetGpuFaultIsQuarantinedDrainedResetVerifiedAndHandedBack) {
  Start({.mode = Mode::kOn, .cordon = true});
  api_->BlockEvictions("ml", "train-0", 2);  // a PDB that allows the eviction on the third try
  Fail("n1", 0, "reset-gpu");
  ASSERT_TRUE(Pass().ok());
  NodeRemediation state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kDraining);
  EXPECT_TRUE(state.cordoned);
  EXPECT_TRUE(api_->Node("n1")["spec"].value("unschedulable", false));
  ASSERT_EQ(state.drain.size(), 1u) << "only the pod of the failing GPU";
  EXPECT_EQ(state.drain[0].id, "ml/train-0");
  EXPECT_THAT(EventReasons("n1"), Contains("VigilQuarantined"));

  // Eviction rounds on later passes until the PDB allows it.
  for (int i = 0; i < 10 && State("n1").step == RemediationStep::kDraining; ++i) {
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Pass().ok());
  }
  state = State("n1");
  ASSERT_EQ(state.step, RemediationStep::kRecovering) << state.message;
  EXPECT_EQ(state.drain[0].outcome, DrainPodOutcome::kEvicted);
  EXPECT_EQ(state.drain[0].attempts, 3);
  EXPECT_THAT(PodNames(), ::testing::UnorderedElementsAre("train-1", "cpu-only", "train-2"));

  // The reset is asked of the node's health check, once.
  ASSERT_TRUE(Pass().ok());
  auto request =
      ParseRequest(api_->Node("n1")["metadata"]["annotations"][std::string(kResetRequestAnnotation)]
                       .get<std::string>());
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->gpus, ::testing::ElementsAre(GpuRef{.index = 0, .uuid = "GPU-0"}));
  const std::string id = request->id;
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").request_id, id) << "not asked twice";

  AnswerReset("n1", ActionOutcome::kDone, "GPU 0 was reset");
  ASSERT_TRUE(Pass().ok());
  state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kVerifying);
  EXPECT_EQ(state.attempts.size(), 1u);

  // PASS, then the hysteresis: handed back, uncordoned; the attempt stays for the window.
  Pass("n1");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kVerifying) << "PASS must hold first";
  clock_.Advance(absl::Minutes(5));
  ASSERT_TRUE(Pass().ok());
  state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kIdle);
  EXPECT_EQ(state.attempts.size(), 1u);
  EXPECT_FALSE(api_->Node("n1")["spec"].value("unschedulable", false));
  EXPECT_THAT(EventReasons("n1"),
              ::testing::IsSupersetOf({"VigilQuarantined", "VigilDrained", "VigilResetRequested",
                                       "VigilGpuReset", "VigilRecovered"}));
  EXPECT_EQ(remediator_->stats().recoveries, 1u);
  EXPECT_EQ(remediator_->stats().evictions_blocked, 2u);
  EXPECT_THAT(remediator_->Metrics(), HasSubstr("vigil_remediator_recoveries_total 1"));
}

TEST_F(RemediatorTest, DryRunRecordsEveryStepAndChangesNothing) {
  Start({.mode = Mode::kDryRun});
  Fail("n1", 0, "reset-gpu");
  api_->ClearRequests();
  ASSERT_TRUE(Pass().ok());
  ASSERT_TRUE(Pass().ok());  // recorded once per episode, not every pass
  EXPECT_EQ(NodeWrites(), 0);
  EXPECT_EQ(State("n1").step, RemediationStep::kIdle);
  EXPECT_EQ(PodNames().size(), 4u);
  std::vector<std::string> messages;
  for (const Json& event : api_->Events()) messages.push_back(event["message"]);
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_THAT(messages[0], HasSubstr("[dry-run: --mode dry-run]"));
  EXPECT_THAT(messages[0], HasSubstr("would evict ml/train-0"));
  EXPECT_THAT(messages[1], HasSubstr("would reset GPU 0 (GPU-0)"));
  EXPECT_THAT(messages[2], HasSubstr("would hand the node back"));
  EXPECT_EQ(remediator_->stats().dry_run_steps, 3u);
  EXPECT_TRUE(remediator_->StatusJson()["nodes"][0].contains("dry_run"));
}

TEST_F(RemediatorTest, ADrillsFaultWithoutPermissionIsADryRunEvenInModeOn) {
  Start({.mode = Mode::kOn});
  Fail("n1", 0, "reset-gpu", /*injected=*/true, /*actions_allowed=*/false);
  api_->ClearRequests();
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(NodeWrites(), 0);
  EXPECT_EQ(PodNames().size(), 4u);
  ASSERT_FALSE(api_->Events().empty());
  EXPECT_THAT(api_->Events()[0]["message"].get<std::string>(),
              HasSubstr("a drill's, injected without --allow-actions"));

  // The same fault with the drill's permission is acted on.
  Fail("n1", 0, "reset-gpu", /*injected=*/true, /*actions_allowed=*/true);
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kDraining);
}

TEST_F(RemediatorTest, AFailureBackAfterTheLastAllowedRecoveryNeedsInspection) {
  Start({.mode = Mode::kOn, .max_attempts = 2});
  NodeRemediation earlier{
      .attempts = {clock_.Now() - absl::Hours(3), clock_.Now() - absl::Hours(1)}};
  api_->ModifyNode("n1", [&](Json& node) {
    node["metadata"]["annotations"][std::string(kRemediationAnnotation)] =
        RemediationToJson(earlier);
  });
  Fail("n1", 0, "reset-gpu");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kEscalated);
  Json node = api_->Node("n1");
  EXPECT_EQ(node["metadata"]["labels"].value(std::string(kNeedsInspectionLabel), ""), "true");
  bool kept_quarantined = false;
  for (const Json& taint : node["spec"]["taints"]) {
    kept_quarantined |= taint["key"] == std::string(kNeedsInspectionTaint);
  }
  EXPECT_TRUE(kept_quarantined);
  EXPECT_EQ(PodNames().size(), 4u) << "no drain for a node that needs a person";
  EXPECT_THAT(EventReasons("n1"), Contains("VigilNeedsInspection"));

  // The GPU passes again: still quarantined, until a person removes the label.
  Pass("n1");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kEscalated);
  api_->ModifyNode("n1", [](Json& changed) {
    changed["metadata"]["labels"].erase(std::string(kNeedsInspectionLabel));
  });
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kIdle);
  for (const Json& taint : api_->Node("n1")["spec"].value("taints", Json::array())) {
    EXPECT_NE(taint["key"], std::string(kNeedsInspectionTaint));
  }
}

TEST_F(RemediatorTest, AFailureBackDuringVerificationIsAFailedAttemptAndStartsOver) {
  Start({.mode = Mode::kOn, .max_attempts = 2});
  Fail("n1", 1, "reset-gpu");
  for (int i = 0; i < 5 && State("n1").step != RemediationStep::kRecovering; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Pass().ok());
  }
  ASSERT_TRUE(Pass().ok());  // asks for the reset
  AnswerReset("n1", ActionOutcome::kDone, "reset");
  ASSERT_TRUE(Pass().ok());
  ASSERT_EQ(State("n1").step, RemediationStep::kVerifying);
  Fail("n1", 1, "reset-gpu");  // back within the hysteresis
  ASSERT_TRUE(Pass().ok());
  NodeRemediation state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kIdle);
  EXPECT_EQ(state.attempts.size(), 1u);
  EXPECT_EQ(remediator_->stats().failed_attempts, 1u);
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kDraining) << "the second attempt";
}

TEST_F(RemediatorTest, TwoFailingNodesWithMaxConcurrentOneGoOneAfterTheOther) {
  Start({.mode = Mode::kOn, .max_concurrent = 1, .max_tainted_share = 1.0});
  Fail("n1", 0, "restart-app");
  Fail("n2", 0, "restart-app");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kDraining);
  EXPECT_EQ(State("n2").step, RemediationStep::kIdle);
  EXPECT_THAT(EventReasons("n2"), Contains("VigilWaiting"));
  // restart-app: n1's workloads drained, then a reset of the idle GPU ends its sticky FAIL.
  for (int i = 0; i < 5 && State("n1").step != RemediationStep::kRecovering; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Pass().ok());
  }
  ASSERT_TRUE(Pass().ok());  // asks for the reset
  EXPECT_EQ(State("n2").step, RemediationStep::kIdle) << "n1 is still in recovery";
  AnswerReset("n1", ActionOutcome::kDone, "reset");
  ASSERT_TRUE(Pass().ok());
  ASSERT_EQ(State("n1").step, RemediationStep::kVerifying);
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n2").step, RemediationStep::kDraining) << "n1 is out of drain and recovery";
}

TEST_F(RemediatorTest, TheCircuitBreakerHoldsNewEpisodesWhenMostGpuNodesAreTainted) {
  Start({.mode = Mode::kOn, .max_tainted_share = 0.5});
  Fail("n1", 0, "reset-gpu");
  Fail("n2", 0, "reset-gpu");  // 2 of 3 tainted
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kIdle);
  EXPECT_EQ(State("n2").step, RemediationStep::kIdle);
  EXPECT_TRUE(remediator_->stats().breaker_open);
  EXPECT_THAT(EventReasons("n1"), Contains("VigilCircuitBreakerOpen"));
  EXPECT_EQ(PodNames().size(), 4u);
}

TEST_F(RemediatorTest, AReplicaThatTakesOverResumesTheDrainWhereItWas) {
  Start({.mode = Mode::kOn});
  api_->BlockEvictions("ml", "train-0", 100);
  Fail("n1", 0, "reboot");  // a reboot drains every GPU pod: train-0 and train-1
  ASSERT_TRUE(Pass().ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Pass().ok());
  NodeRemediation state = State("n1");
  ASSERT_EQ(state.step, RemediationStep::kDraining);
  ASSERT_EQ(state.drain.size(), 2u);
  EXPECT_EQ(state.drain[1].outcome, DrainPodOutcome::kEvicted);

  // The active replica goes; another starts from what the node says.
  remediator_->Stop();
  remediator_.reset();
  api_->BlockEvictions("ml", "train-0", 0);
  api_->ClearRequests();
  Start({.mode = Mode::kOn});
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(Pass().ok());
  state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kRecovering);
  EXPECT_EQ(state.drain[0].attempts, 2) << "continued, not restarted";
  int evictions_of_train_1 = 0;
  for (const auto& request : api_->Requests()) {
    evictions_of_train_1 += request.path.find("train-1/eviction") != std::string::npos;
  }
  EXPECT_EQ(evictions_of_train_1, 0) << "what was evicted is not evicted again";
}

TEST_F(RemediatorTest, ADrainAPodDisruptionBudgetHoldsUpStopsAndReportsOrDeletesWithForceAfter) {
  Start({.mode = Mode::kOn, .drain_timeout = absl::Minutes(2)});
  api_->BlockEvictions("ml", "train-0", 1000);
  Fail("n1", 0, "reset-gpu");
  ASSERT_TRUE(Pass().ok());
  for (int i = 0; i < 20 && State("n1").step == RemediationStep::kDraining; ++i) {
    clock_.Advance(absl::Seconds(10));
    ASSERT_TRUE(Pass().ok());
  }
  NodeRemediation state = State("n1");
  ASSERT_EQ(state.step, RemediationStep::kDrainStuck);
  EXPECT_THAT(state.message, HasSubstr("ml/train-0 (blocked"));
  EXPECT_THAT(EventReasons("n1"), Contains("VigilDrainStuck"));
  EXPECT_THAT(PodNames(), Contains("train-0")) << "stopped and reported, not forced";
  EXPECT_THAT(remediator_->Metrics(), HasSubstr("vigil_remediator_nodes{step=\"drain-stuck\"} 1"));
  EXPECT_THAT(remediator_->Metrics(),
              HasSubstr("vigil_remediator_node_step{node=\"n1\",step=\"drain-stuck\""));

  // Another node, with --force-after: the pod is deleted once the budget held it that long.
  remediator_->Stop();
  remediator_.reset();
  Start({.mode = Mode::kOn,
         .max_tainted_share = 1.0,  // n1 stays tainted: two of three, over the default breaker
         .drain_timeout = absl::Minutes(2),
         .force_after = absl::Seconds(30)});
  api_->AddPod(Pod("ml", "train-9", "n2", true));
  api_->BlockEvictions("ml", "train-9", 1000);
  PublishedFaults faults{.engine = "e1", .seq = 10, .pods_known = true};
  faults.faults.push_back(
      {.gpu = 0, .uuid = "GPU-0", .system = "memory", .action = v1::RECOMMENDED_ACTION_RESET_GPU});
  faults.gpu_pods = {{.uuid = "GPU-0", .pods = {"ml/train-9"}}};
  Fail("n2", 0, "reset-gpu");
  api_->ModifyNode("n2", [&](Json& node) {
    node["metadata"]["annotations"][std::string(kFaultsAnnotation)] = FaultsToJson(faults);
  });
  ASSERT_TRUE(Pass().ok());
  ASSERT_EQ(State("n2").step, RemediationStep::kDraining);
  for (int i = 0; i < 10 && State("n2").step == RemediationStep::kDraining; ++i) {
    clock_.Advance(absl::Seconds(10));
    ASSERT_TRUE(Pass().ok());
  }
  state = State("n2");
  EXPECT_EQ(state.step, RemediationStep::kRecovering) << state.message;
  ASSERT_EQ(state.drain.size(), 1u);
  EXPECT_EQ(state.drain[0].outcome, DrainPodOutcome::kDeleted);
  EXPECT_THAT(EventReasons("n2"), Contains("VigilPodsDeleted"));
  EXPECT_THAT(PodNames(), ::testing::Not(Contains("train-9")));
  EXPECT_EQ(remediator_->stats().pods_deleted, 1u);
}

TEST_F(RemediatorTest, AWriteOnANodeThatMovedIsRefusedAndDecidedAgain) {
  Start({.mode = Mode::kOn});
  Fail("n1", 0, "reset-gpu");
  api_->ChangeBefore("PATCH", "/api/v1/nodes/n1", "n1",
                     [](Json& node) { node["metadata"]["labels"]["someone"] = "else"; });
  const absl::Status first = Pass();
  EXPECT_EQ(first.code(), absl::StatusCode::kAborted) << first;
  EXPECT_EQ(State("n1").step, RemediationStep::kIdle);
  EXPECT_EQ(remediator_->stats().conflicts, 1u);
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kDraining);
  EXPECT_EQ(api_->Node("n1")["metadata"]["labels"].value("someone", ""), "else");
}

TEST_F(RemediatorTest, AMangledStateIsNeverActedOn) {
  Start({.mode = Mode::kOn});
  api_->ModifyNode("n1", [](Json& node) {
    node["metadata"]["annotations"][std::string(kRemediationAnnotation)] = "{\"step\":\"dancing\"}";
  });
  Fail("n1", 0, "reset-gpu");
  const absl::Status status = Pass();
  EXPECT_THAT(status.message(), HasSubstr("unknown \"step\": dancing; not acting on it"));
  EXPECT_EQ(PodNames().size(), 4u);
}

TEST(RemediatorNamesTest, ModesAndRebootMechanismsReadBack) {
  EXPECT_EQ(ParseMode("dry-run"), Mode::kDryRun);
  EXPECT_EQ(ParseMode("maybe"), std::nullopt);
  EXPECT_EQ(ParseRebootVia("sentinel"), RebootVia::kSentinel);
  EXPECT_EQ(ParseRebootVia("ssh"), std::nullopt);
}

}  // namespace
}  // namespace vigil::remediator

namespace vigil::remediator {
namespace {

// The breaker is published for the health checks: written when it opens or closes and renewed
// every kBreakerRenewEvery, never for a pass that changes nothing.
TEST_F(RemediatorTest, ThePublishedBreakerIsWrittenWhenItOpensOrClosesAndRenewed) {
  Start({.mode = Mode::kOn, .max_tainted_share = 0.5});
  ASSERT_TRUE(Pass().ok());
  const auto published = [&] {
    auto breaker = BreakerFromData(api_->ConfigMap("vigil", "vigil-circuit-breaker")["data"]);
    EXPECT_TRUE(breaker.ok()) << breaker.status();
    return breaker.ok() ? *breaker : PublishedBreaker{};
  };
  EXPECT_EQ(published().state, BreakerState::kClosed);
  EXPECT_EQ(published().gpu_nodes, 3u);
  EXPECT_EQ(published().taint_key, "vigil.dev/gpu-problem");
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 1u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 1u) << "nothing changed";

  // One of three tainted: the limit (max(1, 1.5)) is reached, so the next taint is refused.
  Fail("n2", 0, "none");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(published().state, BreakerState::kOpen);
  EXPECT_EQ(published().tainted_nodes, 1u);
  EXPECT_EQ(published().max_tainted_nodes, 1u);
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 2u);
  EXPECT_THAT(remediator_->Metrics(), HasSubstr("vigil_remediator_taint_breaker_open 1\n"));

  clock_.Advance(absl::Minutes(4));
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 2u);
  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 3u) << "renewed";
  EXPECT_EQ(published().renewed, clock_.Now());
  EXPECT_LT(published().changed, published().renewed) << "the state did not change";

  Pass("n2");
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(published().state, BreakerState::kClosed);
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 4u);

  // Someone deletes it: created again at the next write.
  api_->DeleteConfigMap("vigil", "vigil-circuit-breaker");
  clock_.Advance(absl::Minutes(5));
  ASSERT_TRUE(Pass().ok());  // the renewal's PUT finds none (logged, counted)
  EXPECT_EQ(remediator_->breaker().stats().errors.load(), 1u);
  EXPECT_TRUE(api_->ConfigMap("vigil", "vigil-circuit-breaker").is_null());
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(published().state, BreakerState::kClosed);
  EXPECT_EQ(remediator_->breaker().stats().writes.load(), 5u);
}

// A step whose write got no answer (a 500: no watch event will bring the node back) is taken again
// at the next pass, though nothing on the node changed.
TEST_F(RemediatorTest, AStepWhoseWriteFailedIsTakenAgainWithoutAChange) {
  // n3 was escalated; a person removed the needs-inspection label to hand it back.
  NodeRemediation escalated{.step = RemediationStep::kEscalated,
                            .step_started = clock_.Now() - absl::Hours(1)};
  api_->ModifyNode("n3", [&](Json& node) {
    node["metadata"]["annotations"][std::string(kRemediationAnnotation)] =
        RemediationToJson(escalated);
    node["spec"]["taints"] =
        Json::array({{{"key", std::string(kNeedsInspectionTaint)}, {"effect", "NoSchedule"}}});
  });
  Start({.mode = Mode::kOn});
  api_->FailNext(500, 1, "/api/v1/nodes/n3", 0, "PATCH");
  EXPECT_FALSE(Pass().ok());
  EXPECT_EQ(State("n3").step, RemediationStep::kEscalated);
  ASSERT_TRUE(remediator_->ReconcileOnce().ok());
  EXPECT_EQ(State("n3").step, RemediationStep::kIdle);
  EXPECT_FALSE(testing::HasNoScheduleTaint(api_->Node("n3"), std::string(kNeedsInspectionTaint)));
}

// A replica that takes the Lease back reads the published breaker again: the replica that held it
// meanwhile may have written another decision, which its own record would not show.
TEST_F(RemediatorTest, AReplicaThatTakesTheLeaseBackReadsTheBreakerAgain) {
  Start({.mode = Mode::kOn, .max_tainted_share = 0.5});
  Fail("n2", 0, "none");  // 1 of 3 tainted: open
  ASSERT_TRUE(Pass().ok());
  const auto state = [&] {
    return api_->ConfigMap("vigil", "vigil-circuit-breaker")["data"].value("state", "");
  };
  EXPECT_EQ(state(), "open");
  // Another replica, with another view, wrote "closed" while this one stood by.
  auto other = BreakerFromData(api_->ConfigMap("vigil", "vigil-circuit-breaker")["data"]);
  ASSERT_TRUE(other.ok());
  other->state = BreakerState::kClosed;
  other->decided_by = "the-other-replica";
  api_->SetConfigMap("vigil", "vigil-circuit-breaker", BreakerToData(*other));
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(state(), "closed") << "without a take-over its own record says open: no write";
  remediator_->StartedLeading();
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(state(), "open");
}

// At fleet size a pass costs the nodes that changed and those under way, not the fleet.
TEST_F(RemediatorTest, APassReconcilesTheNodesThatChangedNotTheFleet) {
  for (int i = 4; i <= 200; ++i) api_->AddNode(fmt::format("n{}", i), kGpuNode);
  Start({.mode = Mode::kOn, .max_tainted_share = 1.0});
  // A pass once the watch has brought `node` as the fake holds it now.
  const auto pass_after_watch = [&](const std::string& node) {
    const std::string version = api_->Node(node)["metadata"]["resourceVersion"];
    EXPECT_TRUE(::vigil::testing::Eventually(
        [&] { return remediator_->ResourceVersionOf(node) == version; }));
    return remediator_->ReconcileOnce();
  };
  ASSERT_TRUE(remediator_->ReconcileOnce().ok());
  EXPECT_EQ(remediator_->stats().last_pass_nodes.load(), 200u) << "the first pass sees them all";
  EXPECT_EQ(remediator_->stats().tracked_nodes.load(), 200u);
  ASSERT_TRUE(remediator_->ReconcileOnce().ok());
  EXPECT_EQ(remediator_->stats().last_pass_nodes.load(), 0u) << "nothing changed";

  // A node's unrelated change: that node only.
  api_->ModifyNode("n150", [](Json& node) { node["metadata"]["labels"]["zone"] = "b"; });
  ASSERT_TRUE(pass_after_watch("n150").ok());
  EXPECT_EQ(remediator_->stats().last_pass_nodes.load(), 1u);
  // A failing node is reconciled every pass while its episode runs (its drain rounds and
  // timeouts move with time), and only it.
  Fail("n1", 0, "reset-gpu");
  ASSERT_TRUE(pass_after_watch("n1").ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kDraining);
  ASSERT_TRUE(remediator_->ReconcileOnce().ok());
  EXPECT_EQ(remediator_->stats().last_pass_nodes.load(), 1u);
  EXPECT_NE(State("n1").step, RemediationStep::kIdle);
  EXPECT_THAT(remediator_->Metrics(), HasSubstr("vigil_remediator_nodes{step=\"idle\"} 199\n"));
  EXPECT_THAT(remediator_->Metrics(), HasSubstr("vigil_remediator_node_step{node=\"n1\""));
  EXPECT_THAT(remediator_->Metrics(), HasSubstr("vigil_remediator_gpu_nodes 200\n"));
  // A node that leaves the fleet is forgotten.
  api_->DeleteNode("n150");
  EXPECT_TRUE(
      ::vigil::testing::Eventually([&] { return remediator_->ResourceVersionOf("n150").empty(); }));
  ASSERT_TRUE(remediator_->ReconcileOnce().ok());
  EXPECT_EQ(remediator_->stats().tracked_nodes.load(), 199u);
}

}  // namespace
}  // namespace vigil::remediator

namespace vigil::remediator {
namespace {

// Per-GPU quarantine: the node's health check took GPU 3 out of service with a DeviceTaintRule
// and left the node untainted. Pods hold GPUs through ResourceClaims whose device names do not
// follow the GPUs' indexes (GPU 3 is device gpu-7).
class GpuEpisodeTest : public RemediatorTest {
 protected:
  void SetUp() override {
    RemediatorTest::SetUp();
    AddClaimedPod("ml", "holder", "claim-a", "gpu-7");  // holds GPU 3
    AddClaimedPod("ml", "other", "claim-b", "gpu-5");   // holds another GPU
  }

  void AddClaimedPod(const std::string& ns, const std::string& name, const std::string& claim,
                     const std::string& device) {
    Json pod = Pod(ns, name, "n1", false);
    pod["spec"]["resourceClaims"] = Json::array({{{"name", "gpu"}}});
    pod["status"]["resourceClaimStatuses"] =
        Json::array({{{"name", "gpu"}, {"resourceClaimName", claim}}});
    api_->AddPod(pod);
    Json claim_object = Json::object();
    claim_object["metadata"] = {{"namespace", ns}, {"name", claim}};
    claim_object["status"]["allocation"]["devices"]["results"] = Json::array(
        {{{"request", "gpu"}, {"driver", "gpu.nvidia.com"}, {"pool", "n1"}, {"device", device}}});
    claim_object["status"]["reservedFor"] = Json::array({{{"resource", "pods"}, {"name", name}}});
    api_->AddResourceClaim(claim_object);
  }

  // The health check's rule for GPU 3, as it makes it.
  void MakeRule() {
    const Json rule = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "DeviceTaintRule"},
        {"metadata", {{"name", kRule}, {"labels", {{"vigil.dev/node", "n1"}}}}},
        {"spec",
         {{"deviceSelector", {{"driver", "gpu.nvidia.com"}, {"pool", "n1"}, {"device", "gpu-7"}}},
          {"taint",
           {{"key", "vigil.dev/gpu-fail"},
            {"value", "DCGM_FR_VOLATILE_DBE_DETECTED"},
            {"effect", "NoSchedule"}}}}}};
    auto made = kube_->Call("POST", "/apis/resource.k8s.io/v1/devicetaintrules", kube::kJsonContent,
                            rule.dump());
    ASSERT_TRUE(made.ok() && made->status == 201) << (made.ok() ? made->body : "no answer");
  }
  void RemoveRule() {
    auto gone = kube_->Call(
        "DELETE", std::string("/apis/resource.k8s.io/v1/devicetaintrules/") + kRule, "", "");
    ASSERT_TRUE(gone.ok() && gone->status == 200);
  }

  // GPU 3 FAILs with `action`; the node keeps no taint; the rule's device is published.
  void FailGpu3(const std::string& action) {
    PublishedFaults faults{.engine = "e1", .seq = 10, .pods_known = true};
    faults.faults.push_back({.gpu = 3,
                             .uuid = "GPU-3",
                             .system = "memory",
                             .code = "DCGM_FR_VOLATILE_DBE_DETECTED",
                             .action = *RecommendedActionFromText(action)});
    // The kubelet's view: no device-plugin pod on GPU 3 (DRA pods come from the claims).
    faults.gpu_pods = {{.uuid = "GPU-3", .pods = {}}};
    faults.devices = {{.uuid = "GPU-3",
                       .driver = "gpu.nvidia.com",
                       .pool = "n1",
                       .device = "gpu-7",
                       .rule = kRule}};
    const std::string since = kube::Time(clock_.Now());
    api_->ModifyNode("n1", [&](Json& object) {
      object["metadata"]["annotations"][std::string(kFaultsAnnotation)] = FaultsToJson(faults);
      object["status"]["conditions"] = Json::array({{{"type", "GpuProblem"},
                                                     {"status", "True"},
                                                     {"reason", "GpuFailed"},
                                                     {"lastTransitionTime", since}}});
    });
  }

  static constexpr const char* kRule = "vigil-n1-gpu-7";
};

TEST_F(GpuEpisodeTest, OnlyThePodsWhoseClaimsHoldTheGpuAreDrainedAndTheNodeStaysInService) {
  Start({.mode = Mode::kOn});
  MakeRule();
  api_->BlockEvictions("ml", "holder", 1);  // a PDB refuses first
  FailGpu3("reset-gpu");
  ASSERT_TRUE(Pass().ok());
  NodeRemediation state = State("n1");
  ASSERT_EQ(state.step, RemediationStep::kDraining) << state.message;
  EXPECT_EQ(state.scope, EpisodeScope::kGpu);
  ASSERT_EQ(state.devices.size(), 1u);
  EXPECT_EQ(state.devices[0].device, "gpu-7");
  ASSERT_EQ(state.drain.size(), 1u);
  EXPECT_EQ(state.drain[0].id, "ml/holder");
  const Json node = api_->Node("n1");
  EXPECT_TRUE(node["spec"].value("taints", Json::array()).empty()) << "no node taint";
  EXPECT_FALSE(node["spec"].value("unschedulable", false));
  bool told = false;
  for (const Json& event : api_->Events()) {
    told |= event["reason"] == "VigilQuarantined" &&
            event["message"].get<std::string>().find(
                "quarantined by DeviceTaintRule vigil-n1-gpu-7 (gpu.nvidia.com/n1/gpu-7); the "
                "node stays in service") != std::string::npos;
  }
  EXPECT_TRUE(told);

  for (int i = 0; i < 10 && State("n1").step == RemediationStep::kDraining; ++i) {
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Pass().ok());
  }
  state = State("n1");
  ASSERT_EQ(state.step, RemediationStep::kRecovering) << state.message;
  EXPECT_EQ(state.drain[0].attempts, 2) << "the PDB refused once";
  EXPECT_THAT(PodNames(), ::testing::UnorderedElementsAre("train-0", "train-1", "cpu-only",
                                                          "train-2", "other"));
  ASSERT_TRUE(Pass().ok());
  AnswerReset("n1", ActionOutcome::kDone, "GPU 3 was reset");
  ASSERT_TRUE(Pass().ok());
  ASSERT_EQ(State("n1").step, RemediationStep::kVerifying);

  // PASS held, but the health check has not lifted its rule yet: not handed back.
  Pass("n1");
  clock_.Advance(absl::Minutes(5));
  ASSERT_TRUE(Pass().ok());
  state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kVerifying);
  EXPECT_THAT(state.message, HasSubstr("waiting for the health check to lift DeviceTaintRule"));
  RemoveRule();
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(Pass().ok());
  state = State("n1");
  EXPECT_EQ(state.step, RemediationStep::kIdle) << state.message;
  EXPECT_EQ(state.scope, EpisodeScope::kNode) << "the episode's scope goes with it";
  EXPECT_THAT(EventReasons("n1"), Contains("VigilRecovered"));
}

TEST_F(GpuEpisodeTest, ARebootTaintsTheNodeWhenTheRemediatorTakesItAndUntaintsItAfter) {
  Start({.mode = Mode::kOn, .reboot_via = RebootVia::kLabel});
  MakeRule();
  FailGpu3("reboot");
  ASSERT_TRUE(Pass().ok());
  NodeRemediation state = State("n1");
  ASSERT_EQ(state.step, RemediationStep::kDraining) << state.message;
  EXPECT_EQ(state.scope, EpisodeScope::kNode) << "a reboot takes the node";
  EXPECT_TRUE(state.node_tainted);
  EXPECT_TRUE(::vigil::testing::HasNoScheduleTaint(api_->Node("n1"), "vigil.dev/remediation"));
  // Every GPU pod of the node goes: the device plugin's and the claims'.
  std::vector<std::string> drained;
  for (const DrainPodState& pod : state.drain) drained.push_back(pod.id);
  EXPECT_THAT(drained, ::testing::IsSupersetOf({"ml/train-0", "ml/train-1"}));

  for (int i = 0; i < 10 && State("n1").step != RemediationStep::kRecovering; ++i) {
    clock_.Advance(absl::Seconds(5));
    ASSERT_TRUE(Pass().ok());
  }
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(api_->Node("n1")["metadata"]["labels"].value("vigil.dev/reboot-requested", ""), "true");
  // Back after the reboot; the health check lifts its rule after the hysteresis.
  clock_.Advance(absl::Seconds(2));
  Pass("n1");
  ASSERT_TRUE(Pass().ok());
  ASSERT_EQ(State("n1").step, RemediationStep::kVerifying);
  RemoveRule();
  clock_.Advance(absl::Minutes(5));
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kIdle);
  EXPECT_FALSE(::vigil::testing::HasNoScheduleTaint(api_->Node("n1"), "vigil.dev/remediation"));
}

TEST_F(GpuEpisodeTest, ANodeWithNeitherTaintNorRuleIsNotDrained) {
  Start({.mode = Mode::kOn});
  FailGpu3("reset-gpu");
  api_->ModifyNode("n1", [](Json& object) {
    PublishedFaults faults = *ParseFaults(
        object["metadata"]["annotations"][std::string(kFaultsAnnotation)].get<std::string>());
    faults.devices.clear();  // the rule was refused: the node taint is on its way
    object["metadata"]["annotations"][std::string(kFaultsAnnotation)] = FaultsToJson(faults);
  });
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(State("n1").step, RemediationStep::kIdle);
  EXPECT_EQ(PodNames().size(), 6u);
}

TEST(StateMachineTest, EveryArrowOfTheTableAndNoOther) {
  struct Row {
    RemediationStep from;
    Transition on;
    std::optional<RemediationStep> to;
  };
  const Row rows[] = {
      {RemediationStep::kIdle, Transition::kTakeOn, RemediationStep::kDraining},
      {RemediationStep::kIdle, Transition::kEscalate, RemediationStep::kEscalated},
      {RemediationStep::kDraining, Transition::kDrained, RemediationStep::kRecovering},
      {RemediationStep::kDraining, Transition::kDrainTimedOut, RemediationStep::kDrainStuck},
      {RemediationStep::kDrainStuck, Transition::kHealthyAgain, RemediationStep::kIdle},
      {RemediationStep::kRecovering, Transition::kRecovered, RemediationStep::kVerifying},
      {RemediationStep::kRecovering, Transition::kEscalate, RemediationStep::kEscalated},
      {RemediationStep::kVerifying, Transition::kVerified, RemediationStep::kIdle},
      {RemediationStep::kVerifying, Transition::kFailedAttempt, RemediationStep::kIdle},
      {RemediationStep::kVerifying, Transition::kEscalate, RemediationStep::kEscalated},
      {RemediationStep::kEscalated, Transition::kHandedBack, RemediationStep::kIdle},
      // No arrow: a drain cannot be skipped, an escalation is left only by a person.
      {RemediationStep::kIdle, Transition::kRecovered, std::nullopt},
      {RemediationStep::kEscalated, Transition::kVerified, std::nullopt},
      {RemediationStep::kDrainStuck, Transition::kDrained, std::nullopt},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(NextStep(row.from, row.on), row.to)
        << RemediationStepName(row.from) << " on " << TransitionName(row.on);
  }
}

TEST(ChooseActionTest, TheStrongestActionableActionAndItsGpus) {
  const auto fault = [](int gpu, std::string_view action, bool injected = false,
                        bool allowed = false) {
    return PublishedFault{.gpu = gpu,
                          .uuid = gpu >= 0 ? fmt::format("GPU-{}", gpu) : "",
                          .system = gpu >= 0 ? "memory" : "nvswitch",
                          .code = "C",
                          .action = *RecommendedActionFromText(action),
                          .injected = injected,
                          .actions_allowed = allowed};
  };
  struct Row {
    std::vector<PublishedFault> faults;
    std::string action;
    std::vector<uint32_t> gpus;
    bool drill_only;
  };
  const Row rows[] = {
      {{fault(3, "reset-gpu")}, "reset-gpu", {3}, false},
      {{fault(1, "restart-app"), fault(2, "reset-gpu")}, "reset-gpu", {2}, false},
      {{fault(2, "reset-gpu"), fault(-1, "reboot")}, "reboot", {}, false},
      {{fault(2, "reboot"), fault(4, "reboot"), fault(2, "reboot")}, "reboot", {2, 4}, false},
      {{fault(1, "inspect"), fault(2, "reboot")}, "inspect", {1}, false},
      // A drill's fault without permission chooses nothing while a real one is there...
      {{fault(1, "reboot", true), fault(2, "reset-gpu")}, "reset-gpu", {2}, false},
      // ...and is a dry run when it is all there is; with permission it counts.
      {{fault(1, "reboot", true)}, "reboot", {1}, true},
      {{fault(1, "reboot", true, true), fault(2, "reset-gpu")}, "reboot", {1}, false},
      {{fault(1, "none")}, "none", {1}, false},
  };
  for (const Row& row : rows) {
    const ActionChoice choice = ChooseAction({.faults = row.faults});
    std::vector<uint32_t> gpus;
    for (const GpuRef& gpu : choice.gpus) gpus.push_back(gpu.index);
    EXPECT_EQ(RecommendedActionText(choice.action), row.action) << choice.incident;
    EXPECT_EQ(gpus, row.gpus) << choice.incident;
    EXPECT_EQ(choice.drill_only, row.drill_only) << choice.incident;
  }
  EXPECT_EQ(
      ChooseAction({.faults = {fault(3, "reset-gpu"), fault(-1, "reset-gpu", true)}}).incident,
      "GPU 3 memory C");
}

}  // namespace
}  // namespace vigil::remediator

namespace vigil::remediator {
namespace {

// The breaker counts GPUs as well as nodes: GPUs DeviceTaintRules quarantine (no node taint) of
// the GPUs the nodes say they have (GPU Feature Discovery's nvidia.com/gpu.count, else the
// device plugin's capacity).
TEST_F(GpuEpisodeTest, TheBreakerCountsQuarantinedGpusOutOfTheFleetsGpus) {
  for (const char* node : {"n1", "n2"}) {
    api_->ModifyNode(
        node, [](Json& object) { object["metadata"]["labels"]["nvidia.com/gpu.count"] = "8"; });
  }
  api_->ModifyNode("n3",
                   [](Json& object) { object["status"]["capacity"]["nvidia.com/gpu"] = "8"; });
  // 10% of 24 GPUs: at most 2 out of service.
  Start({.mode = Mode::kOn, .max_tainted_share = 0.1});
  FailGpu3("reset-gpu");
  ASSERT_TRUE(Pass().ok());
  Json data = api_->ConfigMap("vigil", "vigil-circuit-breaker")["data"];
  EXPECT_EQ(data["state"], "closed");
  EXPECT_EQ(data["outOfServiceGpus"], "1");
  EXPECT_EQ(data["gpus"], "24");
  EXPECT_EQ(data["maxOutOfServiceGpus"], "2");
  EXPECT_EQ(data["taintedNodes"], "0");

  // A second GPU quarantined on n1: one more would exceed the share, so the breaker opens.
  api_->ModifyNode("n1", [](Json& object) {
    PublishedFaults faults = *ParseFaults(
        object["metadata"]["annotations"][std::string(kFaultsAnnotation)].get<std::string>());
    faults.devices.push_back({.uuid = "GPU-6",
                              .driver = "gpu.nvidia.com",
                              .pool = "n1",
                              .device = "gpu-1",
                              .rule = "vigil-n1-gpu-1"});
    object["metadata"]["annotations"][std::string(kFaultsAnnotation)] = FaultsToJson(faults);
  });
  ASSERT_TRUE(Pass().ok());
  data = api_->ConfigMap("vigil", "vigil-circuit-breaker")["data"];
  EXPECT_EQ(data["state"], "open");
  EXPECT_EQ(data["outOfServiceGpus"], "2");
  auto published = BreakerFromData(data);
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->gpus, 24u);
  EXPECT_EQ(published->max_out_of_service_gpus, 2u);
}

}  // namespace
}  // namespace vigil::remediator

namespace vigil::remediator {
namespace {

// The rules a health check leaves when its node is deleted with a GPU quarantined: nothing would
// ever lift them, so the remediator deletes them — at its first pass, and when a GPU node leaves.
TEST_F(GpuEpisodeTest, TheRulesOfANodeThatNoLongerExistsAreCollected) {
  const auto make = [&](const std::string& name, const std::string& node) {
    const Json rule = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "DeviceTaintRule"},
        {"metadata", {{"name", name}, {"labels", {{"vigil.dev/node", node}}}}},
        {"spec",
         {{"deviceSelector", {{"driver", "gpu.nvidia.com"}, {"pool", node}, {"device", "gpu-0"}}},
          {"taint", {{"key", "vigil.dev/gpu-fail"}, {"value", "X"}, {"effect", "NoSchedule"}}}}}};
    auto made = kube_->Call("POST", "/apis/resource.k8s.io/v1/devicetaintrules", kube::kJsonContent,
                            rule.dump());
    ASSERT_TRUE(made.ok() && made->status == 201);
  };
  const auto names = [&] {
    std::vector<std::string> out;
    for (const Json& rule : api_->DeviceTaintRules()) out.push_back(rule["metadata"]["name"]);
    return out;
  };
  Start({.mode = Mode::kOn});
  make("vigil-gone-gpu-0", "gone");
  make("vigil-n1-gpu-0", "n1");
  make("vigil-n2-gpu-0", "n2");
  ASSERT_TRUE(Pass().ok());
  EXPECT_THAT(names(), ::testing::UnorderedElementsAre("vigil-n1-gpu-0", "vigil-n2-gpu-0"));
  api_->DeleteNode("n2");
  ASSERT_TRUE(
      ::vigil::testing::Eventually([&] { return remediator_->ResourceVersionOf("n2").empty(); }));
  ASSERT_TRUE(remediator_->ReconcileOnce().ok());
  EXPECT_THAT(names(), ::testing::ElementsAre("vigil-n1-gpu-0"));
  EXPECT_EQ(remediator_->stats().rules_collected, 2u);
  EXPECT_THAT(remediator_->Metrics(),
              HasSubstr("vigil_remediator_device_taint_rules_collected_total 2\n"));
}

}  // namespace
}  // namespace vigil::remediator
