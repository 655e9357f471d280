// Tests of the node reporter against the fake API server, through the real HTTPS client: the
// condition (transition time only on change, heartbeat), Events on transitions, the taint with
// hysteresis and ownership, the circuit breaker, retries after 409/422/500, and the token.
// Time is a FakeClock; each pass is one ReconcileOnce() call.
#include "healthcheck/node_reporter.h"

#include <fstream>

#include "api/circuit_breaker.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_api.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;
using testing::FakeKubeApi;
using testing::KubeCredentials;
using testing::KubeRequest;

const DesiredCondition kHealthy{.status = "False", .reason = "GpusHealthy", .message = "all pass"};
const DesiredCondition kFailed{
    .status = "True",
    .reason = "GpuFailed",
    .message = "GPU 3 (GPU-abc) FAIL: driver DCGM_FR_FALLEN_OFF_BUS: XID 79"};
const DesiredCondition kUnknown{
    .status = "Unknown", .reason = "EngineUnreachable", .message = "engine gone"};

class NodeReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    credentials_ = api_->credentials();
    auto kube =
        kube::InClusterKube::Create(credentials_.service_account_dir, "healthcheck", &clock_);
    ASSERT_TRUE(kube.ok()) << kube.status();
    kube_ = std::move(*kube);
    api_->AddNode("gpu-1", {{"nvidia.com/gpu.present", "true"}},
                  Json::array({{{"key", "dedicated"}, {"value", "ml"}, {"effect", "NoSchedule"}}}));
  }

  // A reporter whose informers have listed its node (and, with a taint, the breaker's
  // ConfigMap) and watch them.
  std::unique_ptr<NodeReporter> Reporter(NodeReporterOptions options = {}) {
    options.node_name = "gpu-1";
    auto reporter = std::make_unique<NodeReporter>(
        options, kube_.get(), &clock_,
        [this](absl::Time) { return DesiredNodeState{.condition = desired_, .faults = faults_}; });
    const int watches = api_->watches_opened();
    reporter->StartWatching();
    EXPECT_TRUE(vigil::testing::Eventually([&] {
      return reporter->node_watch().synced() &&
             (!options.taint || reporter->breaker().watch().synced()) &&
             api_->watches_opened() == watches + (options.taint ? 2 : 1);
    }));
    return reporter;
  }
  // Waits until the reporter's watch has seen the fake's latest change of its node.
  bool Seen(const NodeReporter& reporter) {
    return vigil::testing::Eventually([&] {
      return reporter.node_watch().ResourceVersionOf("gpu-1") ==
             api_->Node("gpu-1")["metadata"]["resourceVersion"].get<std::string>();
    });
  }
  // The remediator's breaker as it would publish it, renewed `age` ago.
  void PublishBreaker(BreakerState state, size_t tainted, size_t nodes,
                      absl::Duration age = absl::ZeroDuration(),
                      const std::string& key = "vigil.dev/gpu-problem") {
    api_->SetConfigMap("vigil", "vigil-circuit-breaker",
                       BreakerToData({.state = state,
                                      .taint_key = key,
                                      .tainted_nodes = tainted,
                                      .gpu_nodes = nodes,
                                      .max_tainted_nodes = MaxTaintedNodes(0.5, nodes),
                                      .changed = clock_.Now() - age,
                                      .renewed = clock_.Now() - age,
                                      .decided_by = "vigil-remediator-0"}));
  }
  // Waits until the reporter's breaker watch has the ConfigMap's latest version.
  bool BreakerSeen(const NodeReporter& reporter) {
    return vigil::testing::Eventually([&] {
      const Json config_map = api_->ConfigMap("vigil", "vigil-circuit-breaker");
      return reporter.breaker().watch().ResourceVersionOf("vigil/vigil-circuit-breaker") ==
             (config_map.is_null() ? "" : config_map["metadata"].value("resourceVersion", ""));
    });
  }
  // The requests that counted the GPU nodes (the breaker's fallback).
  int GpuNodeLists() {
    int lists = 0;
    for (const KubeRequest& request : api_->Requests()) {
      lists += request.list() && request.params.contains("labelSelector");
    }
    return lists;
  }

  Json Condition() {
    const Json node = api_->Node("gpu-1");  // not a temporary: the loop refers into it
    for (const Json& condition : node["status"]["conditions"]) {
      if (condition["type"] == "GpuProblem") return condition;
    }
    return Json();
  }
  std::vector<std::string> TaintKeys() {
    std::vector<std::string> keys;
    const Json node = api_->Node("gpu-1");
    for (const Json& taint : node["spec"].value("taints", Json::array())) {
      keys.push_back(taint["key"]);
    }
    return keys;
  }
  std::vector<KubeRequest> Writes() {
    std::vector<KubeRequest> writes;
    for (const KubeRequest& request : api_->Requests()) {
      if (request.method != "GET") writes.push_back(request);
    }
    return writes;
  }

  vigil::testing::TempDir dir_;
  KubeCredentials credentials_;
  std::unique_ptr<FakeKubeApi> api_;
  FakeClock clock_{absl::FromUnixSeconds(1'800'000'000)};
  std::unique_ptr<kube::InClusterKube> kube_;
  std::optional<DesiredCondition> desired_;
  std::optional<PublishedFaults> faults_;  // null: the source has no fresh verdict
};

TEST_F(NodeReporterTest, ConditionTransitionTimeMovesOnlyOnChangeAndEachTransitionPostsAnEvent) {
  auto reporter = Reporter({.heartbeat = absl::Minutes(1)});
  // No verdict yet: the node is read but not written.
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_TRUE(Writes().empty());
  EXPECT_TRUE(Condition().is_null());

  desired_ = kHealthy;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  std::vector<KubeRequest> writes = Writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].method, "PATCH");
  EXPECT_EQ(writes[0].path, "/api/v1/nodes/gpu-1/status");
  EXPECT_EQ(writes[0].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(writes[0].authorization, "Bearer " + credentials_.token);
  EXPECT_EQ(writes[1].method, "POST");
  EXPECT_EQ(writes[1].path, "/api/v1/namespaces/default/events");
  Json condition = Condition();
  EXPECT_EQ(condition["status"], "False");
  EXPECT_EQ(condition["reason"], "GpusHealthy");
  const std::string first_transition = condition["lastTransitionTime"];
  EXPECT_EQ(first_transition, "2027-01-15T08:00:00Z");
  // The kubelet's conditions are untouched by the merge.
  EXPECT_EQ(api_->Node("gpu-1")["status"]["conditions"][0]["type"], "Ready");

  // Same verdict: nothing to write until the heartbeat is due.
  api_->ClearRequests();
  clock_.Advance(absl::Seconds(30));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_TRUE(api_->Requests().empty());
  clock_.Advance(absl::Seconds(31));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  ASSERT_EQ(Writes().size(), 1u) << "a heartbeat is a patch and no Event";
  EXPECT_THAT(Writes()[0].body, Not(HasSubstr("lastTransitionTime")));
  condition = Condition();
  EXPECT_EQ(condition["lastTransitionTime"], first_transition);
  EXPECT_EQ(condition["lastHeartbeatTime"], "2027-01-15T08:01:01Z");

  // A new message alone (a new seq, a running figure) waits for the heartbeat; a change of what
  // the condition is about (its identity) is written at once, moving no transition time and
  // posting no Event.
  api_->ClearRequests();
  desired_->message = "seq 90: all 8 GPUs pass";
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_TRUE(Writes().empty());
  desired_->identity = "8 GPUs";
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  ASSERT_EQ(Writes().size(), 1u);
  EXPECT_EQ(Condition()["message"], "seq 90: all 8 GPUs pass");
  EXPECT_EQ(Condition()["lastTransitionTime"], first_transition);

  clock_.Advance(absl::Seconds(5));
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  condition = Condition();
  EXPECT_EQ(condition["status"], "True");
  EXPECT_EQ(condition["reason"], "GpuFailed");
  EXPECT_THAT(condition["message"].get<std::string>(), HasSubstr("GPU 3"));
  EXPECT_EQ(condition["lastTransitionTime"], "2027-01-15T08:01:06Z");

  const std::vector<Json> events = api_->Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["type"], "Normal");
  EXPECT_EQ(events[0]["reason"], "GpusHealthy");
  EXPECT_EQ(events[1]["type"], "Warning");
  EXPECT_EQ(events[1]["reason"], "GpuFailed");
  EXPECT_THAT(events[1]["message"].get<std::string>(), HasSubstr("DCGM_FR_FALLEN_OFF_BUS"));
  EXPECT_EQ(events[1]["involvedObject"]["kind"], "Node");
  EXPECT_EQ(events[1]["involvedObject"]["name"], "gpu-1");
  EXPECT_EQ(events[1]["involvedObject"]["uid"], "uid-gpu-1");
  EXPECT_EQ(events[1]["source"]["component"], "vigil-healthcheck");
  EXPECT_EQ(reporter->stats().events.load(), 2u);
}

// Ten minutes of steady state on the fake clock, one pass a second as the reporter's loop runs
// them, the message changing every pass (the engine's seq, a warning's running figure): the
// node's status is written only at the heartbeat, nothing else is requested; then one transition
// to FAIL costs two node writes (status, taint) and one Event, and its taint decision reads the
// watched GPU nodes, not the API. Every request names Vigil and its version.
TEST_F(NodeReporterTest, SteadyStateWritesOnlyAtTheHeartbeatAndATransitionCostsTwoNodeWrites) {
  PublishBreaker(BreakerState::kClosed, 0, 1);  // a remediator decides the breaker
  auto reporter = Reporter({.taint = true});    // the default heartbeat: 5 minutes
  desired_ = DesiredCondition{.status = "False",
                              .reason = "GpuWarning",
                              .message = "seq 1: throttled for power for 7.9 s",
                              .identity = "GPU-abc: power/DCGM_FR_CLOCKS_EVENT_POWER;"};
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  api_->ClearRequests();
  for (int second = 1; second <= 600; ++second) {
    clock_.Advance(absl::Seconds(1));
    desired_->message =
        fmt::format("seq {}: throttled for power for {:.1f} s", second + 1, 7.9 + second % 30);
    ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus()) << second;
  }
  std::vector<KubeRequest> requests = api_->Requests();
  ASSERT_EQ(requests.size(), 2u) << "10 minutes at a 5-minute heartbeat";
  for (const KubeRequest& request : requests) {
    EXPECT_EQ(request.method, "PATCH");
    EXPECT_EQ(request.path, "/api/v1/nodes/gpu-1/status");
    EXPECT_EQ(request.user_agent, std::string("vigil/") + VIGIL_VERSION + " (healthcheck)");
  }
  EXPECT_EQ(Condition()["lastHeartbeatTime"], "2027-01-15T08:10:00Z");
  EXPECT_EQ(Condition()["message"], "seq 601: throttled for power for 7.9 s");

  api_->ClearRequests();
  clock_.Advance(absl::Seconds(1));
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  requests = Writes();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].path, "/api/v1/nodes/gpu-1/status");
  EXPECT_EQ(requests[1].path, "/api/v1/namespaces/default/events");
  EXPECT_EQ(requests[2].path, "/api/v1/nodes/gpu-1");  // the taint
  EXPECT_EQ(api_->Requests().size(), 3u)
      << "no reads either: the taint decision is the remediator's published breaker";
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated", "vigil.dev/gpu-problem"));
}

// Someone else changes the node (here: removes the taint while the GPU still fails): the reporter
// learns it from the watch, without a GET, and puts the taint back — it is the desired state
// while a GPU fails.
TEST_F(NodeReporterTest, AChangeByAnotherClientIsLearnedFromTheWatch) {
  PublishBreaker(BreakerState::kClosed, 0, 1);
  auto reporter = Reporter({.taint = true});
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  ASSERT_EQ(TaintKeys().size(), 2u);
  api_->ModifyNode("gpu-1", [](Json& node) { node["spec"]["taints"].erase(1); });
  ASSERT_TRUE(Seen(*reporter));
  api_->ClearRequests();
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated", "vigil.dev/gpu-problem"));
  ASSERT_EQ(api_->Requests().size(), 1u);
  EXPECT_EQ(api_->Requests()[0].method, "PATCH") << "no GET: the node came from the watch";
}

// A 429 from API Priority and Fairness with Retry-After: 3: the reporter's loop (its own thread,
// on the fake clock) waits at least those 3 s, not its 1 s backoff, before the next request.
TEST_F(NodeReporterTest, A429WithRetryAfterDelaysTheNextRequest) {
  desired_ = kFailed;
  api_->FailNext(429, 1, "/api/v1/nodes/gpu-1/status", /*retry_after=*/3);
  auto reporter = Reporter();
  reporter->Start();
  auto patches = [&] {
    size_t count = 0;
    for (const KubeRequest& request : api_->Requests()) count += request.method == "PATCH";
    return count;
  };
  ASSERT_TRUE(vigil::testing::Eventually([&] { return patches() == 1 && clock_.waiters() == 1; },
                                         absl::Seconds(10), absl::Milliseconds(1)));
  const absl::Time refused = clock_.Now();
  EXPECT_GE(clock_.EarliestDeadline() - refused, absl::Seconds(3));
  EXPECT_TRUE(Condition().is_null());  // refused: not written
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(vigil::testing::Eventually([&] { return Condition()["status"] == "True"; },
                                         absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_EQ(patches(), 2u);
  reporter->Stop();
}

// A five-minute API outage while the verdict changes several times: nothing queues up; when the
// API server answers again the node gets the latest state in one write (and one Event for the
// one transition that the node sees), not a replay of what happened meanwhile.
TEST_F(NodeReporterTest, AnApiOutageEndsInOneConvergingWrite) {
  auto reporter = Reporter();
  desired_ = kHealthy;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  api_->FailNext(503, 1'000'000);
  const DesiredCondition changes[] = {kFailed, kUnknown, kHealthy, kFailed};
  for (int second = 1; second <= 300; ++second) {
    clock_.Advance(absl::Seconds(1));
    desired_ = changes[(second - 1) / 75];  // FAIL, UNKNOWN, PASS, FAIL: 75 s each
    // Fails while there is something to write (the minute the verdict is back to what the node
    // says, there is nothing to write and nothing is asked).
    const absl::Status pass = reporter->ReconcileOnce();
    EXPECT_EQ(pass.ok(), desired_->status == "False") << second << ": " << pass;
  }
  ASSERT_EQ(desired_->status, "True");  // where the verdict ended
  api_->FailNext(503, 0);               // the API server is back
  api_->ClearRequests();
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  const std::vector<KubeRequest> writes = Writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].path, "/api/v1/nodes/gpu-1/status");
  EXPECT_EQ(writes[1].path, "/api/v1/namespaces/default/events");
  EXPECT_EQ(Condition()["status"], "True");
  EXPECT_EQ(api_->Events().back()["reason"], "GpuFailed");
}

// A flapping GPU: repeats of the same Event within the series window update the one object
// (count, lastTimestamp, message), as the kubelet's event correlator does; past the window a
// repeat is a new object; and a node never writes more than kEventBurst Events in the window.
TEST_F(NodeReporterTest, RepeatedEventsAreASeriesAndBurstsAreCapped) {
  auto reporter = Reporter();
  for (int flap = 0; flap < 5; ++flap) {
    desired_ = flap % 2 == 0 ? kHealthy : kFailed;
    ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
    clock_.Advance(absl::Seconds(30));
  }
  std::vector<Json> events = api_->Events();
  ASSERT_EQ(events.size(), 2u) << "one object per type and reason";
  EXPECT_EQ(events[0]["reason"], "GpusHealthy");
  EXPECT_EQ(events[0]["count"], 3);
  EXPECT_EQ(events[0]["firstTimestamp"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(events[0]["lastTimestamp"], "2027-01-15T08:02:00Z");
  EXPECT_EQ(events[1]["reason"], "GpuFailed");
  EXPECT_EQ(events[1]["count"], 2);
  EXPECT_EQ(reporter->stats().events.load(), 5u);

  clock_.Advance(kEventSeriesWindow);  // past the window: a repeat is a new object
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  events = api_->Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2]["count"], 1);

  // Flapping every few seconds: at most kEventBurst Event writes in the window, the rest counted.
  api_->ClearRequests();
  for (int flap = 0; flap < 40; ++flap) {
    clock_.Advance(absl::Seconds(5));
    desired_ = flap % 2 == 0 ? kHealthy : kFailed;
    ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  }
  size_t event_writes = 0;
  for (const KubeRequest& request : api_->Requests()) {
    event_writes += request.path.find("/events") != std::string::npos;
  }
  EXPECT_EQ(event_writes, kEventBurst - 1);  // one was spent just above
  EXPECT_EQ(reporter->stats().events_suppressed.load(), 40 - (kEventBurst - 1));
  EXPECT_EQ(Condition()["status"], "True") << "the condition itself stays up to date";
}

TEST_F(NodeReporterTest, ARestartedCheckKeepsTheTransitionTimeAndPostsNoEvent) {
  desired_ = kFailed;
  ASSERT_EQ(Reporter()->ReconcileOnce(), absl::OkStatus());
  const std::string transition = Condition()["lastTransitionTime"];
  clock_.Advance(absl::Minutes(10));
  api_->ClearRequests();
  ASSERT_EQ(Reporter()->ReconcileOnce(), absl::OkStatus());  // a new process, same verdict
  EXPECT_EQ(Condition()["lastTransitionTime"], transition);
  EXPECT_EQ(api_->Events().size(), 1u);
}

TEST_F(NodeReporterTest, TaintOnFailRemovedOnlyAfterHealthyForTheHysteresisPeriod) {
  auto reporter = Reporter({.taint = true, .untaint_after = absl::Minutes(5)});
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated", "vigil.dev/gpu-problem"));
  EXPECT_EQ(api_->Node("gpu-1")["metadata"]["annotations"]["vigil.dev/taint-owner"],
            "vigil.dev/gpu-problem");
  const KubeRequest taint = Writes().back();
  EXPECT_EQ(taint.path, "/api/v1/nodes/gpu-1");
  EXPECT_EQ(taint.content_type, "application/json-patch+json");
  const Json ops = Json::parse(taint.body);
  // The node has no annotations: the map is created only on the version read. The spec is
  // tested whole (the taint list is not clobbered).
  EXPECT_EQ(ops[0]["op"], "test");
  EXPECT_EQ(ops[0]["path"], "/metadata/resourceVersion");
  EXPECT_EQ(ops[1]["op"], "test");
  EXPECT_EQ(ops[1]["path"], "/spec");
  EXPECT_TRUE(reporter->stats().tainted.load());

  // Healthy for 4 minutes, a blip of Unknown (restarts the clock), then healthy again.
  desired_ = kHealthy;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  clock_.Advance(absl::Minutes(4));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u);
  desired_ = kUnknown;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u) << "Unknown must never untaint";
  desired_ = kHealthy;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  clock_.Advance(absl::Minutes(4));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u) << "4 minutes healthy since the blip is not 5";
  clock_.Advance(absl::Minutes(1));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated"));
  EXPECT_FALSE(api_->Node("gpu-1")["metadata"]["annotations"].contains("vigil.dev/taint-owner"));
  EXPECT_EQ(reporter->stats().taints_added.load(), 1u);
  EXPECT_EQ(reporter->stats().taints_removed.load(), 1u);
  EXPECT_FALSE(reporter->stats().tainted.load());
}

TEST_F(NodeReporterTest, UnknownNeverTaints) {
  auto reporter = Reporter({.taint = true});
  desired_ = kUnknown;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(Condition()["status"], "Unknown");
  EXPECT_EQ(TaintKeys().size(), 1u);
}

TEST_F(NodeReporterTest, NeverRemovesATaintItDidNotAdd) {
  api_->ModifyNode("gpu-1", [](Json& node) {
    node["spec"]["taints"].push_back({{"key", "vigil.dev/gpu-problem"}, {"effect", "NoSchedule"}});
  });
  auto reporter = Reporter({.taint = true, .untaint_after = absl::Minutes(5)});
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u) << "already tainted: no second taint";
  desired_ = kHealthy;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  clock_.Advance(absl::Hours(1));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u) << "an admin's taint stays";
  EXPECT_EQ(reporter->stats().taints_removed.load(), 0u);
}

// No remediator publishes the breaker: the check keeps today's rule on a count of its own, one
// LIST of the GPU nodes when a taint is to be decided (it watches no other node).
TEST_F(NodeReporterTest, WithoutTheRemediatorsBreakerTheCheckCountsTheGpuNodesItself) {
  const Json ours = Json::array({{{"key", "vigil.dev/gpu-problem"}, {"effect", "NoSchedule"}}});
  api_->AddNode("gpu-2", {{"nvidia.com/gpu.present", "true"}}, ours);
  api_->AddNode("gpu-3", {{"nvidia.com/gpu.present", "true"}}, ours);
  api_->AddNode("gpu-4", {{"nvidia.com/gpu.present", "true"}});
  api_->AddNode("cpu-1", {{"kubernetes.io/os", "linux"}}, ours);  // not a GPU node
  auto reporter = Reporter({.taint = true, .max_tainted_share = 0.5});
  EXPECT_EQ(reporter->node_watch().size(), 1u) << "only its own node is watched";
  std::string why;
  EXPECT_FALSE(reporter->breaker().Published(&why).has_value());
  EXPECT_THAT(why, HasSubstr("no configmap vigil/vigil-circuit-breaker"));
  api_->ClearRequests();
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 1u) << "2 of 4 GPU nodes tainted already: the limit is 2";
  EXPECT_EQ(Condition()["status"], "True") << "the condition still says what is wrong";
  EXPECT_EQ(reporter->stats().taint_refusals.load(), 1u);
  EXPECT_EQ(GpuNodeLists(), 1) << "one count for the decision";
  EXPECT_EQ(reporter->breaker().stats().own_counts.load(), 1u);
  EXPECT_EQ(reporter->breaker().StatusJson()["source"], "own-count");

  // A refused node does not count the fleet every pass: the refusal stands for a minute.
  api_->ModifyNode("gpu-3", [](Json& node) { node["spec"].erase("taints"); });
  api_->ClearRequests();
  clock_.Advance(absl::Seconds(59));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(GpuNodeLists(), 0);
  EXPECT_EQ(TaintKeys().size(), 1u);
  // One of them recovered meanwhile: the next count lets this node be tainted.
  clock_.Advance(absl::Seconds(1));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u);
  EXPECT_EQ(GpuNodeLists(), 1);
  EXPECT_EQ(api_->Requests().back().path, "/api/v1/nodes/gpu-1");
}

// The remediator publishes the breaker: the check obeys it without a LIST, and learns of its
// opening and closing from its watch of that one object.
TEST_F(NodeReporterTest, TheRemediatorsPublishedBreakerDecidesWithoutAList) {
  PublishBreaker(BreakerState::kOpen, 2, 4);
  auto reporter = Reporter({.taint = true, .max_tainted_share = 0.5});
  api_->ClearRequests();
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 1u) << "the breaker is open";
  EXPECT_EQ(reporter->stats().taint_refusals.load(), 1u);
  EXPECT_EQ(GpuNodeLists(), 0);
  const Json status = reporter->breaker().StatusJson();
  EXPECT_EQ(status["source"], "remediator");
  EXPECT_EQ(status["state"], "open");
  EXPECT_EQ(status["tainted_nodes"], 2);
  EXPECT_THAT(reporter->breaker().Metrics(),
              HasSubstr("vigil_healthcheck_kube_breaker_published 1\n"));

  // The remediator closes it (a tainted node recovered): one watch event, and the taint follows.
  PublishBreaker(BreakerState::kClosed, 1, 4);
  ASSERT_TRUE(BreakerSeen(*reporter));
  api_->ClearRequests();
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u);
  ASSERT_EQ(api_->Requests().size(), 1u) << "one taint patch, no read";
  EXPECT_EQ(api_->Requests()[0].path, "/api/v1/nodes/gpu-1");
  EXPECT_EQ(reporter->breaker().stats().decisions_published.load(), 2u);
}

// A breaker the check cannot trust is not used: one not renewed for longer than
// kBreakerStaleAfter (a remediator gone or stuck), or one counting another taint; the count of its
// own decides, and /status says why.
TEST_F(NodeReporterTest, AStaleOrForeignBreakerFallsBackToTheChecksOwnCount) {
  PublishBreaker(BreakerState::kOpen, 2, 4, absl::Minutes(20));
  auto reporter = Reporter({.taint = true});
  std::string why;
  EXPECT_FALSE(reporter->breaker().Published(&why).has_value());
  EXPECT_THAT(why, HasSubstr("last renewed 20m ago"));
  EXPECT_THAT(reporter->breaker().Metrics(),
              HasSubstr("vigil_healthcheck_kube_breaker_published 0\n"));
  PublishBreaker(BreakerState::kOpen, 2, 4, absl::ZeroDuration(), "example.com/other");
  ASSERT_TRUE(BreakerSeen(*reporter));
  EXPECT_FALSE(reporter->breaker().Published(&why).has_value());
  EXPECT_THAT(why, HasSubstr("counts taint example.com/other"));
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u) << "its own count: 0 of 1 GPU node tainted";
  EXPECT_EQ(GpuNodeLists(), 1);
  EXPECT_THAT(reporter->breaker().StatusJson()["why"].get<std::string>(),
              HasSubstr("counts taint example.com/other"));
}

// The node's watch is its own: another node's writes are not sent to it.
TEST_F(NodeReporterTest, TheCheckWatchesOnlyItsOwnNode) {
  api_->AddNode("gpu-2", {{"nvidia.com/gpu.present", "true"}});
  auto reporter = Reporter();
  for (const KubeRequest& request : api_->Requests()) {
    if (request.path != "/api/v1/nodes") continue;
    EXPECT_EQ(request.params.at("fieldSelector"), "metadata.name=gpu-1");
    EXPECT_FALSE(request.params.contains("labelSelector"));
  }
  const uint64_t before = api_->watch_events("Node");
  for (int i = 0; i < 5; ++i) {
    api_->ModifyNode("gpu-2", [i](Json& node) { node["metadata"]["labels"]["round"] = i; });
  }
  api_->ModifyNode("gpu-1", [](Json& node) { node["metadata"]["labels"]["touched"] = "yes"; });
  ASSERT_TRUE(Seen(*reporter));
  EXPECT_EQ(api_->watch_events("Node") - before, 1u) << "gpu-2's five writes reach no one";
}

// With --remediation the faults go with the taint: a transition is one condition write, one
// Event and one node write, and nothing the check writes tests a version its own write moved.
TEST_F(NodeReporterTest, TheFaultsGoWithTheTaintInOneWriteAndNothingConflicts) {
  PublishBreaker(BreakerState::kClosed, 0, 1);
  api_->ModifyNode("gpu-1", [](Json& node) {
    node["metadata"]["annotations"] = {{"node.alpha.kubernetes.io/ttl", "0"}};
  });
  auto reporter = Reporter({.taint = true, .untaint_after = absl::Minutes(5)});
  desired_ = kHealthy;
  faults_ = PublishedFaults{.engine = "e1", .seq = 10};
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  api_->ClearRequests();
  desired_ = kFailed;
  faults_->seq = 11;
  faults_->faults.push_back({.gpu = 3,
                             .uuid = "GPU-abc",
                             .system = "driver",
                             .code = "DCGM_FR_FALLEN_OFF_BUS",
                             .action = v1::RECOMMENDED_ACTION_REBOOT});
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  std::vector<KubeRequest> writes = Writes();
  ASSERT_EQ(writes.size(), 3u);
  EXPECT_EQ(writes[0].path, "/api/v1/nodes/gpu-1/status");
  EXPECT_EQ(writes[1].path, "/api/v1/namespaces/default/events");
  EXPECT_EQ(writes[2].path, "/api/v1/nodes/gpu-1");
  EXPECT_EQ(writes[2].content_type, "application/json-patch+json");
  Json node = api_->Node("gpu-1");
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated", "vigil.dev/gpu-problem"));
  auto published = ParseFaults(node["metadata"]["annotations"].value("vigil.dev/gpu-faults", ""));
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(published->faults.at(0).code, "DCGM_FR_FALLEN_OFF_BUS");
  EXPECT_EQ(node["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"], "0");
  EXPECT_EQ(reporter->stats().conflicts.load(), 0u);
  EXPECT_EQ(reporter->stats().faults_published.load(), 1u);

  // A new verdict's seq is no news; the kubelet's and the remediator's writes of the node's
  // metadata or status do not make the next taint change conflict.
  faults_->seq = 12;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(Writes().size(), 3u);
  api_->ModifyNode("gpu-1", [](Json& node) {
    node["metadata"]["annotations"]["vigil.dev/remediation"] = "{}";
    node["status"]["conditions"][0]["lastHeartbeatTime"] = "2027-01-15T08:00:10Z";
  });
  // Recovered: the faults go at once (alone), the taint after the hysteresis.
  api_->ClearRequests();
  desired_ = kHealthy;
  faults_->faults.clear();
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  writes = Writes();
  ASSERT_EQ(writes.size(), 3u);
  EXPECT_EQ(writes[2].content_type, "application/merge-patch+json");
  EXPECT_FALSE(api_->Node("gpu-1")["metadata"]["annotations"].contains("vigil.dev/gpu-faults"));
  clock_.Advance(absl::Minutes(5));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated"));
  EXPECT_EQ(reporter->stats().conflicts.load(), 0u)
      << "the node moved (metadata, status) but its spec did not";
  EXPECT_EQ(api_->Node("gpu-1")["metadata"]["annotations"]["vigil.dev/remediation"], "{}");
}

TEST_F(NodeReporterTest, TheFirstTaintIsAlwaysAllowed) {
  auto reporter = Reporter({.taint = true, .max_tainted_share = 0.1});
  desired_ = kFailed;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(TaintKeys().size(), 2u);
}

TEST_F(NodeReporterTest, ConflictsAndServerErrorsAreRetried) {
  auto reporter = Reporter({.taint = true});
  desired_ = kHealthy;
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());

  api_->FailNext(409);
  desired_ = kFailed;
  absl::Status status = reporter->ReconcileOnce();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_EQ(reporter->stats().conflicts.load(), 1u);
  api_->ClearRequests();
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(api_->Requests().front().method, "GET") << "a conflict re-reads the node first";
  EXPECT_EQ(Condition()["status"], "True");

  desired_ = kHealthy;
  api_->FailNext(500);
  status = reporter->ReconcileOnce();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("500"));
  EXPECT_EQ(Condition()["status"], "True");
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(Condition()["status"], "False");
  EXPECT_EQ(reporter->stats().api_errors.load(), 2u);
}

TEST_F(NodeReporterTest, ATaintRaceIsRefusedByTheServerAndRetriedOnTheNewNode) {
  auto reporter = Reporter({.taint = true});
  // Between our read of the node and our taint patch, an admin adds a taint of their own: the
  // resourceVersion test fails (422) and their taint is not clobbered.
  api_->ChangeBefore("PATCH", "/api/v1/nodes/gpu-1", "gpu-1", [](Json& node) {
    node["spec"]["taints"].push_back({{"key", "maintenance"}, {"effect", "NoSchedule"}});
  });
  desired_ = kFailed;
  absl::Status status = reporter->ReconcileOnce();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("422"));
  EXPECT_THAT(TaintKeys(), ::testing::ElementsAre("dedicated", "maintenance"));
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_THAT(TaintKeys(),
              ::testing::ElementsAre("dedicated", "maintenance", "vigil.dev/gpu-problem"));
}

TEST_F(NodeReporterTest, AFailedEventIsRetriedWithoutRewritingTheCondition) {
  auto reporter = Reporter();
  desired_ = kFailed;
  api_->FailNext(500, 1, "/api/v1/namespaces/");
  EXPECT_FALSE(reporter->ReconcileOnce().ok());
  EXPECT_EQ(Condition()["status"], "True");
  EXPECT_TRUE(api_->Events().empty());
  api_->ClearRequests();
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  ASSERT_EQ(api_->Events().size(), 1u);
  ASSERT_EQ(Writes().size(), 1u);
  EXPECT_EQ(Writes()[0].method, "POST");
}

// Writes the server carried out but whose answers were lost (a proxy's 504): the condition's
// write shows up through the watch and still gets its Event; the Event's retry meets its own
// object (409) instead of creating a second one.
TEST_F(NodeReporterTest, LostAnswersLoseNoEventAndDuplicateNone) {
  auto reporter = Reporter();
  desired_ = kFailed;
  api_->LoseAnswers(1, "/api/v1/nodes/gpu-1/status");
  EXPECT_FALSE(reporter->ReconcileOnce().ok());
  EXPECT_EQ(Condition()["status"], "True") << "carried out";
  EXPECT_TRUE(api_->Events().empty());
  ASSERT_TRUE(Seen(*reporter));
  api_->LoseAnswers(1, "/api/v1/namespaces/");
  EXPECT_FALSE(reporter->ReconcileOnce().ok());
  ASSERT_EQ(api_->Events().size(), 1u) << "carried out";
  api_->ClearRequests();
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  ASSERT_EQ(Writes().size(), 1u) << "the condition is not written again";
  EXPECT_EQ(Writes()[0].method, "POST");
  ASSERT_EQ(api_->Events().size(), 1u) << "the retry met its own Event";
  EXPECT_EQ(api_->Events()[0]["reason"], "GpuFailed");
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(api_->Events().size(), 1u);
}

TEST_F(NodeReporterTest, WrongTokenIsPermissionDeniedAndARotatedTokenIsPickedUp) {
  auto reporter = Reporter();
  desired_ = kHealthy;
  api_->SetToken("rotated-token");
  absl::Status status = reporter->ReconcileOnce();
  EXPECT_TRUE(absl::IsPermissionDenied(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("ClusterRole"));
  // The kubelet mounts the rotated token: the next call re-reads it after the 401.
  std::ofstream(credentials_.service_account_dir + "/token") << "rotated-token\n";
  ASSERT_EQ(reporter->ReconcileOnce(), absl::OkStatus());
  EXPECT_EQ(Condition()["status"], "False");
}

TEST_F(NodeReporterTest, UnknownNodeSaysToCheckTheNodeName) {
  NodeReporterOptions options;
  options.node_name = "no-such-node";
  NodeReporter reporter(options, kube_.get(), &clock_,
                        [](absl::Time) { return DesiredNodeState{.condition = kHealthy}; });
  const absl::Status status = reporter.ReconcileOnce();
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("--node-name"));
}

}  // namespace
}  // namespace vigil
