// Tests of the remediator's state machine against the fake API server, on a fake clock: the
// health check's side (the condition, the published faults, the reset result) is played by the
// test, the remediator's by the code under test, one pass at a time.
#include "remediator/remediator.h"

#include "absl/time/clock.h"
#include "api/circuit_breaker.h"
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
        InClusterKube::Create(api_->credentials().service_account_dir, "remediator", &clock_);
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
  std::unique_ptr<InClusterKube> kube_;
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
  EXPECT_EQ(state.drain[0].outcome, "evicted");
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
  EXPECT_EQ(state.drain[1].outcome, "evicted");

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
  EXPECT_EQ(state.drain[0].outcome, "deleted");
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
