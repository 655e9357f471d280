// End-to-end tests of remediation with the real binaries on simulated GPUs: `vigil engine`,
// `vigil healthcheck --kubernetes --taint --remediation` (the node's side) and `vigil remediator`
// (the cluster's), against the fake API server (pods, evictions and PDBs, Leases, node patches)
// and a fake kubelet's pod-resources API. Each test follows a fault through the whole loop —
// quarantine, drain, recovery, verify — as the cluster would see it: node annotations, Events,
// pods, the Lease.
#include "api/remediation.h"

#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <map>

#include "absl/time/clock.h"
#include "daemon.h"
#include "fake_kubelet.h"
#include "fake_nvml/script.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json GpuPod(const std::string& ns, const std::string& name, const std::string& node) {
  return {
      {"metadata", {{"namespace", ns}, {"name", name}}},
      {"spec",
       {{"nodeName", node},
        {"containers", Json::array({{{"name", "main"},
                                     {"resources", {{"limits", {{"nvidia.com/gpu", "1"}}}}}}})}}}};
}

class RemediationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api_ = FakeKubeApi::Start(dir_.path().string(), &error);
    ASSERT_NE(api_, nullptr) << error;
    api_->AddNode("n1", {{"nvidia.com/gpu.present", "true"}});
    api_->AddNode("n2", {{"nvidia.com/gpu.present", "true"}});
    api_->AddNode("n3", {{"nvidia.com/gpu.present", "true"}});
    boot_id_file_ = dir_.File("boot_id");
    std::ofstream(boot_id_file_) << "boot-one\n";
    setenv("VIGIL_BOOT_ID_FILE", boot_id_file_.c_str(), 1);  // inherited by the engines
    StartEngine();
    const Json gpus =
        Json::parse(Vigil({"discovery", "--json", "--engine", engine_->unix_address}).out)["gpus"];
    uuids_ = {gpus[0]["uuid"], gpus[1]["uuid"]};
    api_->AddPod(GpuPod("ml", "train-0", "n1"));  // holds GPU 0
    api_->AddPod(GpuPod("ml", "train-1", "n1"));  // holds GPU 1
    kubelet_.AddPod("ml", "train-0", "main", {uuids_[0]});
    kubelet_.AddPod("ml", "train-1", "main", {uuids_[1]});
    if (const Json migs = gpus[0].value("mig_instances", Json::array()); !migs.empty()) {
      mig2_uuid_ = migs[1]["uuid"];  // MigRemediationTest: a pod on GPU instance 2
      kubelet_.AddMigPod("ml", "infer-2", "main", "nvidia.com/mig-1g.10gb", {mig2_uuid_});
    }
    ASSERT_TRUE(kubelet_.Serve(dir_.File("kubelet.sock")));
  }
  void TearDown() override { unsetenv("VIGIL_BOOT_ID_FILE"); }

  void StartEngine() {
    engine_ = backend_args_.empty()
                  ? std::make_unique<EngineProcess>(dir_.path(), "n1", gpu_count_, engine_args_)
                  : std::make_unique<EngineProcess>(dir_.path(), "n1", backend_args_, engine_args_);
    ASSERT_FALSE(engine_->tcp_address.empty()) << engine_->process->Stderr();
  }
  // The node's health check, handing off with the remediator.
  void StartHealthcheck(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--node-name",
                                     "n1",
                                     "--kubernetes",
                                     "--taint",
                                     "--untaint-after",
                                     "2s",
                                     "--remediation",
                                     "--pod-resources-socket",
                                     dir_.File("kubelet.sock"),
                                     "--service-account-dir",
                                     Accounts()};
    args.insert(args.end(), extra.begin(), extra.end());
    check_ = std::make_unique<HttpDaemon>("healthcheck", dir_.path(), engine_->unix_address, args);
    ASSERT_GT(check_->port(), 0) << check_->process().Stderr();
  }
  std::unique_ptr<HttpDaemon> StartRemediator(const std::string& identity,
                                              const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "--identity",       identity, "--untaint-after",       "2s",
        "--lease-duration", "3s",     "--service-account-dir", Accounts()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto remediator = std::make_unique<HttpDaemon>("remediator", dir_.path(), "", args);
    EXPECT_GT(remediator->port(), 0) << remediator->process().Stderr();
    return remediator;
  }
  std::string Accounts() const { return api_->credentials().service_account_dir; }
  // XID 48 injected on GPU 0 with actions allowed, followed through quarantine, drain (a PDB
  // refusing twice), the reset and verification to the node handed back.
  void RunXid48Loop(const std::string& backend);

  void Inject(const std::string& xid, int gpu, bool allow_actions) {
    std::vector<std::string> args = {"inject", "xid", "--gpu",    std::to_string(gpu),
                                     "--xid",  xid,   "--engine", engine_->unix_address};
    if (allow_actions) args.push_back("--allow-actions");
    const auto injected = Vigil(args);
    ASSERT_EQ(injected.exit_code, 0) << injected.err;
  }

  std::string Annotation(const std::string& key) const {
    return api_->Node("n1")["metadata"].value("annotations", Json::object()).value(key, "");
  }
  std::string Step() const {
    const std::string text = Annotation(std::string(kRemediationAnnotation));
    if (text.empty()) return "none";
    return Json::parse(text).value("step", "?");
  }
  std::vector<std::string> Reasons(const std::string& component) const {
    std::vector<std::string> reasons;
    for (const Json& event : api_->Events()) {
      if (event.value("reportingComponent", "") == component) reasons.push_back(event["reason"]);
    }
    return reasons;
  }
  // How many Events with `reason` the remediator has posted.
  int Count(const std::string& reason) const {
    const std::vector<std::string> reasons = Reasons("vigil-remediator");
    return static_cast<int>(std::count(reasons.begin(), reasons.end(), reason));
  }
  // Whether the remediator posts an Event with `reason` within `timeout`.
  bool EventuallyEvent(const std::string& reason, absl::Duration timeout) const {
    return Eventually(
        [&] {
          const std::vector<std::string> reasons = Reasons("vigil-remediator");
          return std::find(reasons.begin(), reasons.end(), reason) != reasons.end();
        },
        timeout);
  }
  std::vector<std::string> PodNames() const {
    std::vector<std::string> names;
    for (const Json& pod : api_->Pods()) names.push_back(pod["metadata"]["name"]);
    return names;
  }
  bool Tainted(const std::string& key = "vigil.dev/gpu-problem") const {  // NoSchedule
    for (const Json& taint : api_->Node("n1")["spec"].value("taints", Json::array())) {
      if (taint.value("key", "") == key) return true;
    }
    return false;
  }
  // `vigil drill --kubernetes --taint --remediation --allow-actions --wait-recovery` of XID `xid`
  // on `gpu`, following the health check at its /status: its --json report, and each row's
  // "RESULT DETAIL" by "PHASE STAGE" ("fault taint", "recovery drain").
  struct DrillRun {
    CommandResult run;
    Json report;
    std::map<std::string, std::string> rows;
  };
  DrillRun Drill(const std::string& xid, int gpu) const {
    DrillRun drill;
    drill.run = RunCommand({VigilBinary(),
                            "drill",
                            "--engine",
                            engine_->unix_address,
                            "--xid",
                            xid,
                            "--gpu",
                            std::to_string(gpu),
                            "--healthcheck",
                            fmt::format("http://127.0.0.1:{}", check_->port()),
                            "--kubernetes",
                            "--taint",
                            "--remediation",
                            "--allow-actions",
                            "--wait-recovery",
                            "--service-account-dir",
                            Accounts(),
                            "--deadline",
                            "30s",
                            "--json"},
                           absl::Minutes(3));
    drill.report = Json::parse(drill.run.out, nullptr, /*allow_exceptions=*/false);
    for (const Json& stage : drill.report.value("stages", Json::array())) {
      drill.rows[fmt::format("{} {}", stage["phase"].get<std::string>(),
                             stage["stage"].get<std::string>())] =
          stage["result"].get<std::string>() + " " + stage["detail"].get<std::string>();
    }
    return drill;
  }
  std::string Logs(HttpDaemon* remediator) const {
    return "health check:\n" + check_->process().Stderr() + "\nremediator:\n" +
           (remediator != nullptr ? remediator->process().Stderr() : "");
  }

  TempDir dir_;
  std::unique_ptr<FakeKubeApi> api_;
  std::string boot_id_file_;
  std::vector<std::string> backend_args_;  // the engine's backend flags; none: 2 simulated GPUs
  std::vector<std::string> engine_args_;   // the engine's extra flags
  int gpu_count_ = 2;                      // simulated GPUs
  std::string mig2_uuid_;                  // with --mig: GPU 0's GPU instance 2
  std::unique_ptr<EngineProcess> engine_;
  std::vector<std::string> uuids_;
  FakeKubelet kubelet_;
  std::unique_ptr<HttpDaemon> check_;
};

TEST_F(RemediationTest, Xid48IsDrainedForItsGpuResetAndHandedBackAfterPass) { RunXid48Loop("sim"); }

// Per-GPU quarantine on a node whose 8 GPUs are DRA devices of NVIDIA's driver (named by minor:
// GPU i is device gpu-<7-i>), with pods holding GPUs 3 and 5 through ResourceClaims.
class DraRemediationTest : public RemediationTest {
 protected:
  DraRemediationTest() { gpu_count_ = 8; }
  void SetUp() override {
    RemediationTest::SetUp();
    const Json gpus =
        Json::parse(Vigil({"discovery", "--json", "--engine", engine_->unix_address}).out)["gpus"];
    ASSERT_EQ(gpus.size(), 8u);
    uuid3_ = gpus[3]["uuid"];
    Json devices = Json::array();
    for (const Json& gpu : gpus) {
      devices.push_back(
          {{"name", Device(gpu["index"])},
           {"attributes", {{"type", {{"string", "gpu"}}}, {"uuid", {{"string", gpu["uuid"]}}}}}});
    }
    api_->AddResourceSlice(GpuSlice("n1", devices));
    AddClaimPod("claim-3", 3);
    AddClaimPod("claim-5", 5);
  }
  static std::string Device(int gpu) { return "gpu-" + std::to_string(7 - gpu); }
  // Pod ml/NAME on n1 holding GPU `gpu` through ResourceClaim NAME-gpu.
  void AddClaimPod(const std::string& name, int gpu) {
    Json pod = {{"metadata", {{"namespace", "ml"}, {"name", name}}},
                {"spec", {{"nodeName", "n1"}, {"containers", Json::array({{{"name", "main"}}})}}}};
    pod["spec"]["resourceClaims"] = Json::array({{{"name", "gpu"}}});
    pod["status"]["resourceClaimStatuses"] =
        Json::array({{{"name", "gpu"}, {"resourceClaimName", name + "-gpu"}}});
    api_->AddPod(pod);
    Json claim = Json::object();
    claim["metadata"] = {{"namespace", "ml"}, {"name", name + "-gpu"}};
    claim["status"]["allocation"]["devices"]["results"] =
        Json::array({{{"request", "gpu"},
                      {"driver", "gpu.nvidia.com"},
                      {"pool", "n1"},
                      {"device", Device(gpu)}}});
    api_->AddResourceClaim(claim);
  }
  // The devices DeviceTaintRules taint now.
  std::vector<std::string> TaintedDevices() const {
    std::vector<std::string> devices;
    for (const Json& rule : api_->DeviceTaintRules()) {
      devices.push_back(rule["spec"]["deviceSelector"].value("device", ""));
    }
    return devices;
  }
  std::string uuid3_;
};

// XID 48 on GPU 3: one DeviceTaintRule for its device and no node taint, so the other 7 GPUs stay
// schedulable; the pod whose claim holds GPU 3 is evicted (after a PDB refuses once), the pod on
// GPU 5 and the device plugin's pods are untouched; the reset, PASS, and the rule lifted after
// the hysteresis.
TEST_F(DraRemediationTest, Xid48QuarantinesOneGpuDrainsItsClaimsPodAndLiftsTheRuleAfterPass) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "on"});
  api_->BlockEvictions("ml", "claim-3", 1);
  const absl::Time injected = absl::Now();
  Inject("48", 3, /*allow_actions=*/true);
  ASSERT_TRUE(Eventually([&] { return !TaintedDevices().empty(); }, absl::Seconds(30)))
      << Logs(remediator.get());
  const absl::Duration to_rule = absl::Now() - injected;
  EXPECT_THAT(TaintedDevices(), ::testing::ElementsAre(Device(3)));
  const Json rule = api_->DeviceTaintRules()[0];
  EXPECT_EQ(rule["spec"]["taint"]["key"], "vigil.dev/gpu-fail");
  EXPECT_EQ(rule["spec"]["taint"]["effect"], "NoSchedule");
  EXPECT_EQ(rule["metadata"]["labels"]["vigil.dev/gpu-uuid"], uuid3_);
  // During the episode: the node stays schedulable; 7 of 7 healthy GPUs are (before per-GPU
  // quarantine, the node taint made it 0 of 7).
  ASSERT_TRUE(EventuallyEvent("VigilDrained", absl::Seconds(60))) << Logs(remediator.get());
  EXPECT_FALSE(Tainted()) << "no node taint";
  EXPECT_FALSE(Tainted("vigil.dev/remediation"));
  // A healthy GPU is schedulable when neither the node nor its device is tainted.
  const int schedulable_healthy_during =
      Tainted() ? 0 : 7 - static_cast<int>(TaintedDevices().size() - 1);
  EXPECT_EQ(schedulable_healthy_during, 7);
  EXPECT_THAT(PodNames(), ::testing::UnorderedElementsAre("train-0", "train-1", "claim-5"))
      << "only the pod whose claim holds GPU 3";

  ASSERT_TRUE(EventuallyEvent("VigilRecovered", absl::Seconds(60))) << Logs(remediator.get());
  EXPECT_TRUE(TaintedDevices().empty()) << "the rule is lifted before the hand-back";
  EXPECT_FALSE(Tainted());
  EXPECT_EQ(Step(), "idle");
  EXPECT_THAT(Reasons("vigil-remediator"),
              ::testing::IsSupersetOf({"VigilQuarantined", "VigilDrained", "VigilResetRequested",
                                       "VigilGpuReset", "VigilRecovered"}));
  EXPECT_THAT(Reasons("vigil-healthcheck"),
              ::testing::IsSupersetOf({"GpuQuarantined", "GpuReleased"}));
  std::cout << "XID 48 on a DRA node: injection to DeviceTaintRule "
            << absl::FormatDuration(to_rule) << ", to handed back "
            << absl::FormatDuration(absl::Now() - injected)
            << "; schedulable healthy GPUs during the episode: " << schedulable_healthy_during
            << " of 7\n";
}

// The same loop on the nvml backend with the fake libnvidia-ml, whose nvidia-smi refuses a reset
// while any process holds NVML: the engine releases it for the reset and takes it back.
class NvmlRemediationTest : public RemediationTest {
 protected:
  void SetUp() override {
    fake_ = std::make_unique<FakeNvmlScript>(dir_.File("fake-nvml.json"), 2);
    backend_args_ = {"--backend",      "nvml",
                     "--nvml-library", FakeNvmlDir() + "/current/libnvidia-ml.so.1",
                     "--kmsg",         ""};
    engine_args_ = {"--gpu-reset-command", FakeNvidiaSmi() + " --gpu-reset -i {uuid}"};
    RemediationTest::SetUp();
  }
  std::unique_ptr<FakeNvmlScript> fake_;
};

TEST_F(NvmlRemediationTest, Xid48IsDrainedForItsGpuResetAndHandedBackAfterPass) {
  RunXid48Loop("nvml");
  const nlohmann::json script = nlohmann::json::parse(std::ifstream(dir_.File("fake-nvml.json")));
  EXPECT_EQ(script["gpus"][0].value("resets", 0), 1) << "the fake's nvidia-smi reset GPU 0";
  EXPECT_EQ(script["gpus"][1].value("resets", 0), 0);
}

void RemediationTest::RunXid48Loop(const std::string& backend) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "on"});
  api_->BlockEvictions("ml", "train-0", 2);  // a PodDisruptionBudget, for the first two tries
  const absl::Time injected = absl::Now();
  Inject("48", 0, /*allow_actions=*/true);

  // The loop, as the cluster sees it, to the end: handed back, no taint, no cordon.
  ASSERT_TRUE(EventuallyEvent("VigilRecovered", absl::Seconds(60))) << Logs(remediator.get());
  const absl::Duration loop = absl::Now() - injected;
  EXPECT_THAT(Reasons("vigil-remediator"),
              ::testing::IsSupersetOf({"VigilQuarantined", "VigilDrained", "VigilResetRequested",
                                       "VigilGpuReset", "VigilRecovered"}));
  EXPECT_THAT(PodNames(), ::testing::ElementsAre("train-1")) << "only GPU 0's pod was evicted";
  EXPECT_FALSE(Tainted());
  EXPECT_EQ(Step(), "idle");
  const Json state = Json::parse(Annotation(std::string(kRemediationAnnotation)));
  EXPECT_EQ(state["attempts"].size(), 1u) << "the attempt counts for the window";
  const Json result = Json::parse(Annotation(std::string(kResetResultAnnotation)));
  EXPECT_EQ(result["outcome"], "done");
  // The engine's audit trail: the reset, asked by the health check's relay.
  const auto events = Vigil(
      {"events", "--recent", "100", "--no-follow", "--json", "--engine", engine_->unix_address});
  EXPECT_THAT(events.out, HasSubstr("GPU_RESET"));
  EXPECT_THAT(events.out, HasSubstr("vigil remediator: GPU 0 memory"));
  EXPECT_EQ(Vigil({"health", "--engine", engine_->unix_address}).exit_code, 0) << "PASS";
  const std::string status = remediator->Get("/status");
  EXPECT_THAT(status, HasSubstr("\"leading\": true"));
  EXPECT_THAT(remediator->Get("/metrics"), HasSubstr("vigil_remediator_recoveries_total 1"));
  std::cout << "XID 48 loop on " << backend
            << ", injection to handed back: " << absl::FormatDuration(loop) << "\n";
}

// With the remediator deployed (here --mode off: it publishes the breaker and acts on nothing),
// a transition to FAIL costs the health check three requests — the condition, the Event, and one
// node write carrying both the taint and the faults — none refused as a conflict; each node write
// is sent to two watchers (the node's own check and the remediator), however many nodes there are.
TEST_F(RemediationTest, ATransitionCostsThreeRequestsWithoutAConflictAndTwoWatchEventsPerWrite) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "off"});
  ASSERT_TRUE(Eventually([&] {
    const std::string status = check_->Get("/status");
    return status.find("\"source\": \"remediator\"") != std::string::npos;
  })) << Logs(remediator.get());
  // The start-up's writes done: the condition and its Event.
  ASSERT_TRUE(Eventually([&] {
    return ::vigil::testing::ConditionStatus(api_->Node("n1"), "GpuProblem") == "False" &&
           !Reasons("vigil-healthcheck").empty();
  }));
  absl::SleepFor(absl::Seconds(1));  // and their watch events delivered
  api_->ClearRequests();
  const uint64_t node_events = api_->watch_events("Node");
  Inject("79", 0, /*allow_actions=*/true);
  ASSERT_TRUE(Eventually([&] {
    return Tainted() && !Annotation(std::string(kFaultsAnnotation)).empty();
  })) << Logs(remediator.get());
  absl::SleepFor(absl::Seconds(2));  // a late retry or second write would be counted too
  std::vector<KubeRequest> by_check;
  int node_writes = 0;
  for (const KubeRequest& request : api_->Requests()) {
    if (request.watch() || request.user_agent.find("(healthcheck)") == std::string::npos) continue;
    by_check.push_back(request);
    node_writes += request.method == "PATCH" && request.path.starts_with("/api/v1/nodes/n1");
  }
  std::string said;
  for (const KubeRequest& request : by_check) {
    said += request.method + " " + request.path + " " + request.body.substr(0, 300) + "\n";
  }
  ASSERT_EQ(by_check.size(), 3u) << said << Logs(remediator.get());
  EXPECT_EQ(by_check[0].path, "/api/v1/nodes/n1/status");
  EXPECT_EQ(by_check[1].path, "/api/v1/namespaces/default/events");
  EXPECT_EQ(by_check[2].path, "/api/v1/nodes/n1");
  EXPECT_THAT(by_check[2].body, HasSubstr("vigil.dev~1gpu-faults"));
  EXPECT_THAT(check_->Get("/metrics"), HasSubstr("vigil_healthcheck_kube_api_conflicts_total 0\n"));
  EXPECT_EQ(node_writes, 2);
  EXPECT_TRUE(Eventually([&] { return api_->watch_events("Node") - node_events == 4; }))
      << api_->watch_events("Node") - node_events << " watch events for 2 node writes";
}

// The breaker refuses a taint beyond --max-tainted-share with the remediator absent (the check
// counts the GPU nodes itself) and present (its published decision), and lets it through once the
// remediator sees a tainted node recover.
TEST_F(RemediationTest, TheBreakerRefusesATaintBeyondTheShareWithAndWithoutTheRemediator) {
  // One of three GPU nodes tainted already: max(1, 3 x 0.5) = 1, the limit is reached.
  api_->ModifyNode("n2", [](Json& node) {
    node["spec"]["taints"] =
        Json::array({{{"key", "vigil.dev/gpu-problem"}, {"effect", "NoSchedule"}}});
  });
  StartHealthcheck();
  Inject("79", 0, /*allow_actions=*/true);
  ASSERT_TRUE(check_->process().WaitForStderr(
      "NOT tainting node n1 although a GPU fails: 1 of 3 GPU nodes"))
      << Logs(nullptr);
  EXPECT_THAT(check_->process().Stderr(), HasSubstr("decided by this check's own count"));
  EXPECT_EQ(::vigil::testing::ConditionStatus(api_->Node("n1"), "GpuProblem"), "True");
  EXPECT_FALSE(Tainted());
  EXPECT_THAT(check_->Get("/metrics"),
              ::testing::Not(HasSubstr("vigil_healthcheck_kube_taint_refusals_total 0\n")));
  Json breaker = Json::parse(check_->Get("/status"))["kubernetes"]["circuit_breaker"];
  EXPECT_EQ(breaker["source"], "own-count") << breaker.dump();

  // The remediator comes: it publishes the breaker open, and the check follows its decision.
  // (With its process_* series: --enable-exporter-metrics.)
  auto remediator = StartRemediator("r1", {"--mode", "off", "--enable-exporter-metrics"});
  ASSERT_TRUE(Eventually([&] {
    breaker = Json::parse(check_->Get("/status"))["kubernetes"]["circuit_breaker"];
    return breaker.value("source", "") == "remediator";
  })) << Logs(remediator.get());
  EXPECT_EQ(breaker["state"], "open");
  EXPECT_EQ(breaker["tainted_nodes"], 1);
  EXPECT_EQ(breaker["gpu_nodes"], 3);
  EXPECT_FALSE(Tainted());

  // n2 recovers: the remediator closes the breaker, and the failing n1 is tainted at last.
  api_->ModifyNode("n2", [](Json& node) { node["spec"].erase("taints"); });
  ASSERT_TRUE(Eventually([&] { return Tainted(); }, absl::Seconds(20))) << Logs(remediator.get());
  breaker = Json::parse(check_->Get("/status"))["kubernetes"]["circuit_breaker"];
  EXPECT_EQ(breaker["source"], "remediator");
  const std::string metrics = remediator->Get("/metrics");
  EXPECT_THAT(metrics, HasSubstr("vigil_remediator_taint_breaker_writes_total"));
  EXPECT_THAT(metrics, HasSubstr("\n# TYPE process_resident_memory_bytes gauge\n"));
  EXPECT_GT(metrics.find("\nprocess_open_fds "), metrics.rfind("\nvigil_")) << "after the others";
}

TEST_F(RemediationTest, Xid79RequestsARebootThroughTheSentinelAndANewBootClearsIt) {
  const std::string sentinel = dir_.File("reboot-required");
  StartHealthcheck({"--reboot-sentinel", sentinel});
  auto remediator = StartRemediator("r1", {"--mode", "on", "--reboot-via", "sentinel"});
  Inject("79", 1, /*allow_actions=*/true);
  ASSERT_TRUE(Eventually([&] { return std::ifstream(sentinel).good(); }, absl::Seconds(30)))
      << Logs(remediator.get());
  EXPECT_TRUE(PodNames().empty()) << "a reboot drains every GPU pod";
  EXPECT_EQ(Step(), "recovering");
  std::string line;
  std::getline(std::ifstream(sentinel), line);
  EXPECT_THAT(line, HasSubstr("vigil remediator, request reboot-n1-"));

  // The node reboots (kured's part): the engine comes back with a new boot id.
  engine_->process->Signal(SIGKILL);
  engine_->process->Wait();
  std::ofstream(boot_id_file_) << "boot-two\n";
  StartEngine();
  ASSERT_TRUE(EventuallyEvent("VigilRecovered", absl::Seconds(60))) << Logs(remediator.get());
  EXPECT_FALSE(Tainted());
  EXPECT_THAT(Reasons("vigil-remediator"), ::testing::Contains("VigilRebootRequested"));
}

TEST_F(RemediationTest, DryRunAndADrillsFaultWithoutPermissionChangeNothing) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "on"});
  Inject("48", 0, /*allow_actions=*/false);  // a drill that did not allow actions
  ASSERT_TRUE(EventuallyEvent("VigilDryRun", absl::Seconds(30))) << Logs(remediator.get());
  bool said_why = false;
  for (const Json& event : api_->Events()) {
    said_why |=
        event.value("message", "").find("injected without --allow-actions") != std::string::npos;
  }
  EXPECT_TRUE(said_why);
  EXPECT_EQ(PodNames().size(), 2u);
  EXPECT_EQ(Step(), "none");
  EXPECT_TRUE(Annotation(std::string(kResetRequestAnnotation)).empty());
  EXPECT_FALSE(Tainted()) << "the health check withholds a drill's taint too";
  // The published faults say why: injected, actions not allowed.
  const Json faults = Json::parse(Annotation(std::string(kFaultsAnnotation)));
  EXPECT_TRUE(faults["faults"][0].value("injected", false));
  EXPECT_FALSE(faults["faults"][0].value("actions_allowed", false));
  ASSERT_TRUE(faults.contains("pods"));
  EXPECT_EQ(faults["pods"][uuids_[0]], Json::array({"ml/train-0"}));
}

TEST_F(RemediationTest, ModeDryRunRecordsEveryStepAndTheApiServerIsUnchanged) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "dry-run"});
  Inject("48", 0, /*allow_actions=*/true);
  ASSERT_TRUE(Eventually(
      [&] {
        int steps = 0;
        for (const std::string& reason : Reasons("vigil-remediator"))
          steps += reason == "VigilDryRun";
        return steps >= 3;
      },
      absl::Seconds(30)))
      << Logs(remediator.get());
  EXPECT_EQ(PodNames().size(), 2u);
  EXPECT_EQ(Step(), "none");
  for (const KubeRequest& request : api_->Requests()) {
    if (request.user_agent.find("remediator") == std::string::npos) continue;
    // Reads, Events, its Lease, and the circuit breaker it publishes in every mode.
    EXPECT_TRUE(request.method == "GET" || request.path.find("/events") != std::string::npos ||
                request.path.find("/leases") != std::string::npos ||
                request.path.find("/configmaps") != std::string::npos)
        << request.method << " " << request.path;
  }
  const auto status = Vigil(
      {"remediator", "status", "--url", "http://127.0.0.1:" + std::to_string(remediator->port())});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("mode dry-run"));
  EXPECT_THAT(status.out, HasSubstr("dry run recorded"));
}

TEST_F(RemediationTest, TheOtherReplicaTakesOverMidDrainAndResumesIt) {
  StartHealthcheck();
  auto first = StartRemediator("r1", {"--mode", "on"});
  ASSERT_TRUE(Eventually(
      [&] { return first->Get("/status").find("\"leading\": true") != std::string::npos; }));
  auto second = StartRemediator("r2", {"--mode", "on"});
  api_->BlockEvictions("ml", "train-0", 1000);  // held up until the test lets it go
  Inject("48", 0, /*allow_actions=*/true);
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string text = Annotation(std::string(kRemediationAnnotation));
        return !text.empty() && Json::parse(text)["drain"]["pods"][0]["attempts"] >= 2;
      },
      absl::Seconds(30)))
      << Logs(first.get());
  EXPECT_THAT(second->Get("/status"), HasSubstr("\"leading\": false"));

  first->process().Signal(SIGKILL);  // no time to give the Lease up: it must expire
  api_->BlockEvictions("ml", "train-0", 0);
  ASSERT_TRUE(EventuallyEvent("VigilRecovered", absl::Seconds(60))) << Logs(second.get());
  EXPECT_EQ(api_->Lease("default", "vigil-remediator")["spec"]["holderIdentity"], "r2");
  int quarantines = 0;
  for (const std::string& reason : Reasons("vigil-remediator")) {
    quarantines += reason == "VigilQuarantined";
  }
  EXPECT_EQ(quarantines, 1) << "resumed, not started over";
  EXPECT_THAT(PodNames(), ::testing::ElementsAre("train-1"));
}

TEST_F(RemediationTest, AFailureBackAfterTwoRecoveriesNeedsInspectionAndStaysQuarantined) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "on", "--max-attempts", "2"});
  for (int round = 1; round <= 2; ++round) {
    Inject("48", 0, /*allow_actions=*/true);
    ASSERT_TRUE(Eventually([&] { return Count("VigilRecovered") == round; }, absl::Seconds(60)))
        << "round " << round << "\n"
        << Logs(remediator.get());
  }
  Inject("48", 0, /*allow_actions=*/true);  // the third time in the window
  ASSERT_TRUE(EventuallyEvent("VigilNeedsInspection", absl::Seconds(30))) << Logs(remediator.get());
  EXPECT_EQ(Step(), "escalated");
  EXPECT_EQ(api_->Node("n1")["metadata"]["labels"].value(std::string(kNeedsInspectionLabel), ""),
            "true");
  EXPECT_EQ(Count("VigilResetRequested"), 2) << "no third reset";
  // The GPU passes again (an operator clears it): the health check's taint goes after its
  // hysteresis, the remediator's stays.
  ASSERT_EQ(Vigil({"health", "clear", "--gpu", "0", "--engine", engine_->unix_address}).exit_code,
            0);
  ASSERT_TRUE(Eventually([&] { return !Tainted(); }, absl::Seconds(30)));
  EXPECT_TRUE(Tainted(std::string(kNeedsInspectionTaint)));
  EXPECT_EQ(Step(), "escalated");
}

TEST_F(RemediationTest, TwoNodesFailingTogetherWithMaxConcurrentOneGoOneAfterTheOther) {
  StartHealthcheck();
  EngineProcess second(dir_.path(), "n2", 2);
  ASSERT_FALSE(second.tcp_address.empty()) << second.process->Stderr();
  HttpDaemon second_check(
      "healthcheck", dir_.path(), second.unix_address,
      {"--node-name", "n2", "--kubernetes", "--taint", "--untaint-after", "2s", "--remediation",
       "--pod-resources-socket", "", "--service-account-dir", Accounts()});
  ASSERT_GT(second_check.port(), 0) << second_check.process().Stderr();
  // Two of three GPU nodes tainted: over the default breaker, which this test is not about.
  auto remediator =
      StartRemediator("r1", {"--mode", "on", "--max-concurrent", "1", "--max-tainted-share", "1"});
  Inject("48", 0, /*allow_actions=*/true);
  const auto injected = Vigil({"inject", "xid", "--gpu", "1", "--xid", "48", "--allow-actions",
                               "--engine", second.unix_address});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  ASSERT_TRUE(Eventually([&] { return Count("VigilRecovered") == 2; }, absl::Seconds(90)))
      << Logs(remediator.get());
  // In the order the API server took the Events: the second node taken on only after the first
  // was out of drain and recovery (its reset done), and told to wait before that.
  std::map<std::string, std::map<std::string, size_t>> at;  // node -> reason -> first index
  const std::vector<Json> events = api_->Events();
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].value("reportingComponent", "") != "vigil-remediator") continue;
    at[events[i]["involvedObject"]["name"]].emplace(events[i]["reason"], i);
  }
  const std::string first =
      at["n1"]["VigilQuarantined"] < at["n2"]["VigilQuarantined"] ? "n1" : "n2";
  const std::string later = first == "n1" ? "n2" : "n1";
  ASSERT_TRUE(at[later].contains("VigilWaiting")) << "the later node waited";
  EXPECT_GT(at[later]["VigilQuarantined"], at[first]["VigilGpuReset"]);
}

TEST_F(RemediationTest, BadFlagsAreRefusedWithOneLine) {
  const auto mode = Vigil({"remediator", "--mode", "yolo"});
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_THAT(mode.err, HasSubstr("--mode 'yolo': give off, dry-run"));
  const auto reboot = Vigil({"remediator", "--reboot-via", "ssh"});
  EXPECT_EQ(reboot.exit_code, 2);
  EXPECT_THAT(reboot.err, HasSubstr("--reboot-via 'ssh'"));
  const auto lease = Vigil({"remediator", "--lease-duration", "1s"});
  EXPECT_EQ(lease.exit_code, 2);
  EXPECT_THAT(lease.err, HasSubstr("too short"));
  const auto relay = Vigil({"healthcheck", "--remediation"});
  EXPECT_EQ(relay.exit_code, 2);
  EXPECT_THAT(relay.err, HasSubstr("--remediation needs --kubernetes"));
}

// GPU 0 in MIG mode (a 2g.20gb at 0, 1g.10gb instances 2 and 3), a pod on instance 2.
class MigRemediationTest : public RemediationTest {
 protected:
  void SetUp() override {
    engine_args_ = {"--mig", "0:1g.10gb,1g.10gb,2g.20gb"};
    RemediationTest::SetUp();
  }
};

TEST_F(MigRemediationTest, AFailingMigGpuListsItsInstancesAndTheirPodsForADrain) {
  StartHealthcheck();
  const auto injected = Vigil({"inject", "xid", "--gpu", "0", "--xid", "48", "--gpu-instance", "2",
                               "--engine", engine_->unix_address});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  Json gpu0;
  ASSERT_TRUE(Eventually([&] {
    const Json status = Json::parse(check_->Get("/status"), nullptr, false);
    if (status.is_discarded() || status["gpus"].empty()) return false;
    gpu0 = status["gpus"][0];
    return gpu0["status"] == "FAIL" && gpu0.contains("pods");
  })) << check_->Get("/status");
  EXPECT_THAT(gpu0["incidents"][0]["message"].get<std::string>(),
              HasSubstr("XID 48 in GPU instance 2 (1g.10gb, " + mig2_uuid_ + ")"));
  ASSERT_EQ(gpu0["mig_instances"].size(), 3u);
  Json instance2;
  for (const Json& instance : gpu0["mig_instances"]) {
    if (instance["gpu_instance_id"] == 2) instance2 = instance;
    if (instance["gpu_instance_id"] == 3) {
      EXPECT_EQ(instance["pods"], Json::array());
    }
  }
  EXPECT_EQ(instance2["profile"], "1g.10gb");
  EXPECT_EQ(instance2["pods"], Json::array({"ml/infer-2"}));
  // The GPU's pods (what a drain of the GPU takes): its own and its instances'.
  EXPECT_EQ(gpu0["pods"], Json::array({"ml/train-0", "ml/infer-2"}));
  // The published faults carry the same for the remediator.
  ASSERT_TRUE(Eventually([&] { return !Annotation(std::string(kFaultsAnnotation)).empty(); }));
  const Json faults = Json::parse(Annotation(std::string(kFaultsAnnotation)));
  EXPECT_EQ(faults["pods"][uuids_[0]], Json::array({"ml/train-0", "ml/infer-2"}));
}

}  // namespace
}  // namespace vigil::testing

namespace vigil::testing {
namespace {

// XID 79 on GPU 3 of a DRA node: its rule at once and the node left in service; the node is
// tainted (vigil.dev/remediation) only when the remediator takes it for the reboot, and handed
// back — that taint and the rule gone — once the node is back and PASS held.
TEST_F(DraRemediationTest, Xid79QuarantinesTheGpuAtOnceAndTheNodeOnlyForTheReboot) {
  const std::string sentinel = dir_.File("reboot-required");
  StartHealthcheck({"--reboot-sentinel", sentinel});
  // The remediator starts later: what the health check does alone comes first.
  Inject("79", 3, /*allow_actions=*/true);
  ASSERT_TRUE(Eventually([&] { return !TaintedDevices().empty(); }, absl::Seconds(30)))
      << check_->process().Stderr();
  EXPECT_THAT(TaintedDevices(), ::testing::ElementsAre(Device(3)));
  EXPECT_FALSE(Tainted()) << "a reboot's GPU is quarantined alone until the remediator takes it";

  auto remediator = StartRemediator("r1", {"--mode", "on", "--reboot-via", "sentinel"});
  ASSERT_TRUE(Eventually([&] { return Tainted("vigil.dev/remediation"); }, absl::Seconds(30)))
      << Logs(remediator.get());
  EXPECT_FALSE(Tainted()) << "the health check's node taint stays off";
  ASSERT_TRUE(Eventually([&] { return std::ifstream(sentinel).good(); }, absl::Seconds(30)))
      << Logs(remediator.get());
  EXPECT_TRUE(PodNames().empty()) << "a reboot drains every GPU pod, the claims' too";

  // The node reboots: the engine comes back with a new boot id.
  engine_->process->Signal(SIGKILL);
  engine_->process->Wait();
  std::ofstream(boot_id_file_) << "boot-two\n";
  StartEngine();
  ASSERT_TRUE(EventuallyEvent("VigilRecovered", absl::Seconds(60))) << Logs(remediator.get());
  EXPECT_FALSE(Tainted("vigil.dev/remediation"));
  EXPECT_TRUE(TaintedDevices().empty()) << Logs(remediator.get());
}

// `vigil drill --kubernetes --taint` on a DRA node: its stage is device-quarantine — GPU 3's
// DeviceTaintRule with the node untainted — and the way back (the rule lifted); the remediator's
// episode is the GPU's, the node staying in service; nothing of the drill stays behind.
TEST_F(DraRemediationTest, TheDrillShowsTheDeviceQuarantinedAndItsWayBack) {
  StartHealthcheck();
  auto remediator = StartRemediator("r1", {"--mode", "on"});
  DrillRun drill = Drill("48", 3);
  EXPECT_EQ(drill.run.exit_code, 0) << drill.run.out << drill.run.err << Logs(remediator.get());
  EXPECT_THAT(drill.rows["fault device-quarantine"],
              ::testing::StartsWith(
                  fmt::format("PASS device quarantined: DeviceTaintRule vigil-n1-{} taints "
                              "gpu.nvidia.com/n1/{} vigil.dev/gpu-fail=",
                              Device(3), Device(3))))
      << drill.run.out;
  EXPECT_THAT(drill.rows["fault device-quarantine"], HasSubstr(":NoSchedule; node untainted"));
  EXPECT_EQ(drill.rows["recovery device-quarantine"], "PASS the rule lifted; no taint");
  EXPECT_FALSE(drill.rows.contains("fault taint")) << "the node's taint is not this node's stage";
  EXPECT_THAT(drill.rows["fault quarantine"], HasSubstr("only, the node stays in service"));
  for (const char* stage : {"fault drain", "fault recovery", "recovery quarantine",
                            "recovery drain", "recovery recovery"}) {
    EXPECT_THAT(drill.rows[stage], ::testing::StartsWith("PASS")) << stage << "\n" << drill.run.out;
  }
  EXPECT_THAT(drill.report["notes"].dump(), HasSubstr("quarantines the GPU (DeviceTaintRules)"));
  for (const auto& [row, text] : drill.rows) std::cout << row << ": " << text << "\n";
  EXPECT_TRUE(TaintedDevices().empty());
  EXPECT_FALSE(Tainted());
}

}  // namespace
}  // namespace vigil::testing

namespace vigil::testing {
namespace {

// A device-plugin node: the plugin marked the failing GPU unhealthy and offers 7 of 8 (and would
// until it restarts). The node is tainted as before; after the verified recovery the remediator
// deletes the node's plugin pod once (its DaemonSet brings it back, offering all 8), and an Event
// says why, as does the drill's timeline. Nothing else of the plugin's namespace is touched.
TEST_F(RemediationTest, AfterARecoveryTheDevicePluginThatStillHidesTheGpuIsRestartedOnce) {
  api_->ModifyNode("n1", [](Json& node) {
    node["status"]["capacity"]["nvidia.com/gpu"] = "8";
    node["status"]["allocatable"]["nvidia.com/gpu"] = "7";
  });
  const auto plugin_pod = [](const std::string& name, const std::string& node) {
    return Json{{"metadata",
                 {{"namespace", "gpu-operator"},
                  {"name", name},
                  {"labels", {{"app", "nvidia-device-plugin-daemonset"}}},
                  {"ownerReferences", Json::array({{{"kind", "DaemonSet"},
                                                    {"name", "nvidia-device-plugin-daemonset"},
                                                    {"controller", true}}})}}},
                {"spec", {{"nodeName", node}}}};
  };
  api_->AddPod(plugin_pod("nvidia-device-plugin-daemonset-n1", "n1"));
  api_->AddPod(plugin_pod("nvidia-device-plugin-daemonset-n2", "n2"));
  StartHealthcheck();
  auto remediator = StartRemediator(
      "r1", {"--mode", "on", "--device-plugin-selector", "app=nvidia-device-plugin-daemonset",
             "--device-plugin-namespace", "gpu-operator"});
  // A drill of the loop: the node's taint, and in its timeline the plugin's restart.
  DrillRun drill = Drill("48", 0);
  EXPECT_EQ(drill.run.exit_code, 0) << drill.run.out << drill.run.err << Logs(remediator.get());
  EXPECT_THAT(drill.rows["fault taint"], ::testing::StartsWith("PASS vigil.dev/gpu-problem"));
  EXPECT_FALSE(drill.rows.contains("fault device-quarantine"));
  EXPECT_THAT(drill.rows["recovery recovery"],
              HasSubstr("restarted the device plugin (allocatable nvidia.com/gpu is 7 of 8 after "
                        "the recovery: deleted its pod "
                        "gpu-operator/nvidia-device-plugin-daemonset-n1)"))
      << drill.run.out;
  ASSERT_TRUE(EventuallyEvent("VigilRecovered", absl::Seconds(60))) << Logs(remediator.get());
  ASSERT_TRUE(EventuallyEvent("VigilDevicePluginRestarted", absl::Seconds(10)))
      << Logs(remediator.get());
  EXPECT_THAT(PodNames(),
              ::testing::UnorderedElementsAre("train-1", "nvidia-device-plugin-daemonset-n2"))
      << "GPU 0's pod drained, n1's plugin pod deleted, n2's untouched";
  std::string message;
  for (const Json& event : api_->Events()) {
    if (event.value("reason", "") == "VigilDevicePluginRestarted") message = event["message"];
  }
  EXPECT_THAT(message, HasSubstr("allocatable nvidia.com/gpu is 7 of 8 after the recovery: "
                                 "deleted the device plugin's pod "
                                 "gpu-operator/nvidia-device-plugin-daemonset-n1"));
  EXPECT_EQ(Count("VigilDevicePluginRestarted"), 1);
  EXPECT_THAT(remediator->Get("/metrics"),
              HasSubstr("vigil_remediator_device_plugin_restarts_total 1\n"));
}

}  // namespace
}  // namespace vigil::testing
