// End-to-end tests of `vigil healthcheck` with the real binaries on loopback: it agrees with the
// exporter on the verdict and the seq after an injected XID 79, it refuses another node's engine,
// it turns a lost engine into UNKNOWN and 503 — never PASS, never FAIL — and returns to the true
// (persisted) verdict when the engine is back; with --kubernetes --taint against the fake API
// server it keeps the node's condition and taint in line, and a slow API server does not slow
// its endpoints.
#include <signal.h>

#include <fstream>
#include <map>
#include <regex>

#include "absl/time/clock.h"
#include "api/circuit_breaker.h"
#include "daemon.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/fake_kube_api.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using ::vigil::testing::FakeKubeApi;
using ::vigil::testing::KubeCredentials;
using ::vigil::testing::KubeRequest;

Json Parse(const std::string& body) { return Json::parse(body, nullptr, false); }

// The exporter's vigil_gpu_health_status for `gpu` as the worst value over its systems, and the
// seq and instance_id of the tick it rendered.
struct ExporterVerdict {
  std::map<int, int> gpu_status;
  uint64_t seq = 0;
  std::string instance_id;
};

ExporterVerdict ReadExporter(const std::string& metrics) {
  ExporterVerdict verdict;
  const std::regex row("vigil_gpu_health_status\\{gpu=\"([0-9]+)\",[^}]*\\} (-?[0-9]+)");
  for (auto it = std::sregex_iterator(metrics.begin(), metrics.end(), row);
       it != std::sregex_iterator(); ++it) {
    const int gpu = std::stoi((*it)[1]);
    const int status = std::stoi((*it)[2]);
    auto [entry, inserted] = verdict.gpu_status.emplace(gpu, status);
    if (!inserted) entry->second = std::max(entry->second, status);
  }
  std::smatch match;
  if (std::regex_search(metrics, match, std::regex("\nvigil_engine_seq ([0-9]+)"))) {
    verdict.seq = std::stoull(match[1]);
  }
  if (std::regex_search(metrics, match, std::regex("instance_id=\"([0-9a-f]+)\""))) {
    verdict.instance_id = match[1];
  }
  return verdict;
}

HttpDaemon StartHealthcheck(const std::string& dir, const std::string& engine,
                            const std::string& node_name) {
  return HttpDaemon("healthcheck", dir, engine, {"--node-name", node_name});
}

TEST(HealthcheckTest, AgreesWithTheExporterOnVerdictAndSeqAfterXid79) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 4);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  HttpDaemon exporter("exporter", dir.path(), engine.unix_address);
  // With its own process_* series (--enable-exporter-metrics), which must lint clean too.
  HttpDaemon check("healthcheck", dir.path(), engine.unix_address,
                   {"--node-name", "n1", "--enable-exporter-metrics"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  check.GetUntil("/readyz", [](const std::string& body) { return body.starts_with("ready"); });
  EXPECT_EQ(Parse(check.Get("/status"))["status"], "PASS");

  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "3", "--xid", "79", "--engine",
                        engine.unix_address})
                .exit_code,
            0);
  const absl::Time injected = absl::Now();
  // Both must show GPU 3 failing within 2 s; the health check's seq must be no older than the
  // exporter's (read first).
  ExporterVerdict exported;
  Json status;
  bool agreed = false;
  while (!agreed && absl::Now() - injected < absl::Seconds(2)) {
    exported = ReadExporter(exporter.Get("/metrics"));
    status = Parse(check.Get("/status"));
    agreed = exported.gpu_status[3] == 20 && status.is_object() && status["gpus"].size() == 4 &&
             status["gpus"][3]["status"] == "FAIL" && status["seq"].get<uint64_t>() >= exported.seq;
    if (!agreed) absl::SleepFor(absl::Milliseconds(10));  // polling other processes
  }
  ASSERT_TRUE(agreed) << status.dump(2);
  EXPECT_EQ(status["status"], "FAIL");
  EXPECT_EQ(status["node"], "n1");
  EXPECT_EQ(status["engine"]["instance_id"], exported.instance_id);
  EXPECT_GE(status["seq"].get<uint64_t>(), exported.seq);
  for (int gpu = 0; gpu < 4; ++gpu) {
    EXPECT_EQ(status["gpus"][gpu]["status"], gpu == 3 ? "FAIL" : "PASS") << gpu;
    EXPECT_EQ(exported.gpu_status[gpu], gpu == 3 ? 20 : 0) << gpu;
  }
  const Json incident = status["gpus"][3]["incidents"][0];
  EXPECT_EQ(incident["code"], "DCGM_FR_FALLEN_OFF_BUS");
  EXPECT_EQ(incident["system"], "driver");
  EXPECT_EQ(incident["injected"], true);
  EXPECT_THAT(incident["action"].get<std::string>(), HasSubstr("restart"));

  const std::string metrics = check.Get("/metrics");
  EXPECT_THAT(metrics, HasSubstr("vigil_healthcheck_status 20\n"));
  EXPECT_THAT(metrics, HasSubstr("vigil_healthcheck_engine_up 1\n"));
  EXPECT_THAT(metrics, HasSubstr("vigil_healthcheck_node_mismatch 0\n"));
  EXPECT_TRUE(std::regex_search(
      metrics, std::regex("vigil_healthcheck_gpu_status\\{gpu=\"3\",[^}]*\\} 20")));
  EXPECT_TRUE(std::regex_search(metrics, std::regex("vigil_healthcheck_verdict_age_seconds 0\\.")));
  EXPECT_TRUE(std::regex_search(metrics, std::regex("\nprocess_open_fds [1-9][0-9]*\n")));
  EXPECT_THAT(metrics, HasSubstr("\n# TYPE process_cpu_seconds_total counter\n"));
  // The health check's own metrics pass promtool's lint.
  const std::string metrics_file = dir.File("healthcheck.prom");
  std::ofstream(metrics_file) << metrics;
  const CommandResult lint = Shell("promtool check metrics < " + metrics_file);
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
}

TEST(HealthcheckTest, RefusesTheEngineOfAnotherNode) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  HttpDaemon check = StartHealthcheck(dir.path(), engine.tcp_address, "other");
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  ASSERT_TRUE(check.process().WaitForStderr("belongs to node"));
  int code = 0;
  const std::string why = check.Get("/readyz", &code);
  EXPECT_EQ(code, 503);
  EXPECT_THAT(why, HasSubstr("'n1'"));
  EXPECT_THAT(why, HasSubstr("'other'"));
  EXPECT_THAT(check.process().Stderr(), HasSubstr("error"));
  const Json status = Parse(check.Get("/status"));
  EXPECT_EQ(status["status"], "UNKNOWN");
  EXPECT_EQ(status["engine"]["node_mismatch"], true);
  EXPECT_TRUE(status["gpus"].empty()) << "another node's GPUs must never be reported";
  const std::string metrics = check.Get("/metrics");
  EXPECT_THAT(metrics, HasSubstr("vigil_healthcheck_node_mismatch 1\n"));
  EXPECT_THAT(metrics, HasSubstr("vigil_healthcheck_status -1\n"));
}

TEST(HealthcheckTest, LostEngineIsUnknownAndTheTrueVerdictReturns) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
  ASSERT_FALSE(engine->tcp_address.empty()) << engine->process->Stderr();
  HttpDaemon check = StartHealthcheck(dir.path(), engine->unix_address, "n1");
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "1", "--xid", "79", "--engine",
                        engine->unix_address})
                .exit_code,
            0);
  check.GetUntil("/status", [](const std::string& b) { return Parse(b)["status"] == "FAIL"; });
  const std::string first_instance = Parse(check.Get("/status"))["engine"]["instance_id"];

  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  const Json lost = Parse(check.GetUntil(
      "/status", [](const std::string& b) { return Parse(b)["status"] == "UNKNOWN"; }));
  EXPECT_EQ(lost["status"], "UNKNOWN");
  EXPECT_EQ(lost["fresh"], false);
  // The last verdict is still shown, as stale: its own status and age, every GPU UNKNOWN now.
  EXPECT_EQ(lost["verdict_status"], "FAIL");
  EXPECT_GE(lost["verdict_age_seconds"].get<double>(), 0.0);
  for (const Json& gpu : lost["gpus"]) EXPECT_EQ(gpu["status"], "UNKNOWN") << gpu.dump();
  int code = 0;
  EXPECT_THAT(check.Get("/readyz", &code), HasSubstr("not ready"));
  EXPECT_EQ(code, 503);
  EXPECT_THAT(check.Get("/metrics"), HasSubstr("vigil_healthcheck_engine_up 0\n"));

  // A new engine on the same state dir: the persisted FAIL is the verdict again.
  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
  ASSERT_FALSE(engine->tcp_address.empty()) << engine->process->Stderr();
  const Json back = Parse(check.GetUntil(
      "/status",
      [&](const std::string& b) {
        const Json s = Parse(b);
        return s["fresh"] == true && s["engine"]["instance_id"] != first_instance;
      },
      absl::Seconds(20)));
  EXPECT_EQ(back["status"], "FAIL") << back.dump(2);
  EXPECT_EQ(back["gpus"][1]["status"], "FAIL");
  EXPECT_EQ(back["gpus"][0]["status"], "PASS");
  EXPECT_EQ(check.Get("/readyz", &code).substr(0, 5), "ready");
  EXPECT_EQ(code, 200);
  EXPECT_THAT(check.Get("/metrics"), HasSubstr("vigil_healthcheck_engine_reconnects_total 1\n"));
}

// The GpuProblem condition of `node` on the fake API server ("" when absent).
std::string ConditionStatus(const FakeKubeApi& api, const std::string& node_name) {
  return testing::ConditionStatus(api.Node(node_name), "GpuProblem");
}

bool Tainted(const FakeKubeApi& api, const std::string& node_name) {
  return HasNoScheduleTaint(api.Node(node_name), "vigil.dev/gpu-problem");
}

// The fake API server is another thread's state: poll it often.
bool EventuallyInApi(const std::function<bool()>& predicate) {
  return Eventually(predicate, absl::Seconds(10), absl::Milliseconds(20));
}

TEST(HealthcheckTest, KubernetesConditionTaintAndEventsFollowTheVerdict) {
  TempDir dir;
  std::string error;
  // The in-cluster environment the pod would have is set for the daemon to inherit.
  const std::unique_ptr<FakeKubeApi> server = FakeKubeApi::Start(dir.path().string(), &error);
  ASSERT_NE(server, nullptr) << error;
  FakeKubeApi& api = *server;
  const KubeCredentials& credentials = api.credentials();
  api.AddNode("n1", {{"nvidia.com/gpu.present", "true"}});

  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4);
  ASSERT_FALSE(engine->tcp_address.empty()) << engine->process->Stderr();
  HttpDaemon check(
      "healthcheck", dir.path(), engine->unix_address,
      {"--node-name", "n1", "--kubernetes", "--taint", "--service-account-dir",
       credentials.service_account_dir, "--untaint-after", "2s", "--unknown-after", "1s"});
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "False"; }))
      << check.process().Stderr();
  EXPECT_FALSE(Tainted(api, "n1"));

  // A drill without --allow-actions: the condition turns True and says why nothing acts on it;
  // the taint is withheld.
  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "3", "--xid", "79", "--engine",
                        engine->unix_address})
                .exit_code,
            0);
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "True"; }))
      << check.process().Stderr();
  EXPECT_TRUE(check.process().WaitForStderr("would taint node n1"));
  EXPECT_FALSE(Tainted(api, "n1"));
  EXPECT_THAT(ConditionMessage(api.Node("n1"), "GpuProblem"),
              HasSubstr("(no automatic action: every failure is a drill's, injected without "
                        "--allow-actions)"));
  EXPECT_THAT(check.Get("/metrics"), HasSubstr("vigil_healthcheck_kube_taints_withheld_total 1\n"));
  // The same fault from a drill that allows actions: the taint follows.
  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "3", "--xid", "79",
                        "--allow-actions", "--engine", engine->unix_address})
                .exit_code,
            0);
  ASSERT_TRUE(EventuallyInApi([&] {
    return ConditionStatus(api, "n1") == "True" && Tainted(api, "n1");
  })) << api.Node("n1").dump(2)
      << check.process().Stderr();
  ASSERT_TRUE(EventuallyInApi([&] { return api.Events().size() == 2; }));
  // The check watches its own node (one LIST at start) and the remediator's breaker; with no
  // remediator deployed, the taint decision counted the GPU nodes itself: one LIST of them.
  int own_lists = 0, gpu_node_lists = 0;
  for (const KubeRequest& request : api.Requests()) {
    if (!request.list()) continue;
    own_lists += request.params.contains("fieldSelector") &&
                 request.params.at("fieldSelector") == "metadata.name=n1";
    gpu_node_lists += request.params.contains("labelSelector");
  }
  EXPECT_EQ(own_lists, 1);
  EXPECT_EQ(gpu_node_lists, 1);
  EXPECT_TRUE(EventuallyInApi([&] { return api.open_watches() == 3; }))
      << "its node, the breaker's ConfigMap, its ResourceSlices: " << api.open_watches();
  const Json status = Json::parse(check.Get("/status"));
  EXPECT_EQ(status["kubernetes"]["circuit_breaker"]["source"], "own-count");
  EXPECT_THAT(status["kubernetes"]["circuit_breaker"]["why"].get<std::string>(),
              HasSubstr("is the remediator deployed"));
  EXPECT_THAT(check.Get("/metrics"), HasSubstr("vigil_healthcheck_kube_breaker_published 0\n"));
  const std::vector<Json> events = api.Events();
  EXPECT_EQ(events[1]["reason"], "GpuFailed");
  EXPECT_EQ(events[1]["type"], "Warning");
  EXPECT_THAT(events[1]["message"].get<std::string>(), HasSubstr("GPU 3"));
  EXPECT_THAT(events[1]["message"].get<std::string>(), HasSubstr("DCGM_FR_FALLEN_OFF_BUS"));
  EXPECT_THAT(check.GetUntil("/metrics",
                             [](const std::string& body) {
                               return body.find("vigil_healthcheck_node_tainted 1\n") !=
                                      std::string::npos;
                             }),
              HasSubstr("vigil_healthcheck_kube_taints_added_total 1\n"));

  // An API server that takes 3 s per answer does not slow the endpoints down.
  api.SetDelay(absl::Seconds(3));
  ASSERT_EQ(
      RunCommand({VigilBinary(), "health", "clear", "--gpu", "3", "--engine", engine->unix_address})
          .exit_code,
      0);
  for (int i = 0; i < 5; ++i) {
    const absl::Time asked = absl::Now();
    EXPECT_EQ(Parse(check.Get("/status"))["node"], "n1");
    EXPECT_LT(absl::Now() - asked, absl::Milliseconds(500));
    absl::SleepFor(absl::Milliseconds(100));
  }
  api.SetDelay(absl::ZeroDuration());
  // Healthy again: the condition turns False at once, the taint goes after 2 s of health.
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "False"; }));
  ASSERT_TRUE(EventuallyInApi([&] { return !Tainted(api, "n1"); })) << check.process().Stderr();
  // Logged once the API server has answered the patch, so a moment after the fake applied it.
  EXPECT_TRUE(check.process().WaitForStderr("removed the vigil.dev/gpu-problem"))
      << check.process().Stderr();

  // The engine goes away: Unknown after --unknown-after, and no taint for not knowing.
  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "Unknown"; }));
  EXPECT_FALSE(Tainted(api, "n1"));
  // The Event follows the condition's patch.
  EXPECT_TRUE(
      EventuallyInApi([&] { return api.Events().back()["reason"] == "EngineUnreachable"; }));
  for (const KubeRequest& request : api.Requests()) {
    EXPECT_EQ(request.authorization, "Bearer " + credentials.token);
    EXPECT_THAT(request.user_agent, ::testing::StartsWith("vigil/"));
  }
}

// The devices NVIDIA's DRA driver would publish for the engine's GPUs (`discovery --json`'s):
// GPU g is device gpu-(N-1-g), named by a device minor that does not follow the engine's index;
// GPU `pci_only_gpu`'s device gives only its PCI bus id, as pcieBusID (an older driver).
Json DraDevicesOf(const Json& gpus, int pci_only_gpu = -1) {
  Json devices = Json::array();
  const int count = static_cast<int>(gpus.size());
  for (int gpu = 0; gpu < count; ++gpu) {
    std::string pci = gpus[gpu]["pci_bus_id"].get<std::string>().substr(4);  // "0000:18:00.0"
    std::transform(pci.begin(), pci.end(), pci.begin(), ::tolower);
    Json attributes = {{"type", {{"string", "gpu"}}},
                       {"productName", {{"string", "NVIDIA H100 80GB HBM3"}}}};
    if (gpu == pci_only_gpu) {
      attributes["pcieBusID"] = {{"string", pci}};
    } else {
      attributes["uuid"] = {{"string", gpus[gpu]["uuid"]}};
      attributes["resource.kubernetes.io/pciBusID"] = {{"string", pci}};
    }
    devices.push_back(
        {{"name", fmt::format("gpu-{}", count - 1 - gpu)}, {"attributes", attributes}});
  }
  return devices;
}

// A fake API server with one GPU node, n1, for the DRA tests.
class DraHealthcheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = FakeKubeApi::Start(dir.path().string(), &error);
    ASSERT_NE(server_, nullptr) << error;
    server_->AddNode("n1", {{"nvidia.com/gpu.present", "true"}});
  }
  // The engine's GPUs as `vigil discovery --json` lists them.
  static Json GpusOf(const EngineProcess& engine) {
    const CommandResult discovery =
        RunCommand({VigilBinary(), "discovery", "--json", "--engine", engine.unix_address});
    EXPECT_EQ(discovery.exit_code, 0) << discovery.err;
    return Json::parse(discovery.out, nullptr, false)["gpus"];
  }

  TempDir dir;
  std::unique_ptr<FakeKubeApi> server_;
};

// The engine's GPUs as the DRA driver publishes them: a slice of this node whose device names do
// not follow the engine's indexes (the driver names GPUs by device minor), read in the newest
// version the API server serves ResourceSlices in (a 1.33-like server: v1beta2, v1beta1), matched
// by UUID — and by PCI bus id for a device an older driver published without one.
TEST_F(DraHealthcheckTest, StatusMapsEachGpuToItsDraDeviceByAttributes) {
  FakeKubeApi& api = *server_;
  api.ServeDraVersions({"v1beta2", "v1beta1"}, {"v1alpha3"});
  EngineProcess engine(dir.path(), "n1", 8);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const Json gpus = GpusOf(engine);
  ASSERT_EQ(gpus.size(), 8u);
  api.AddResourceSlice(GpuSlice("n1", DraDevicesOf(gpus, /*pci_only_gpu=*/5)));
  api.AddResourceSlice(
      GpuSlice("n2", Json::array({{{"name", "gpu-0"}, {"attributes", Json::object()}}})));
  HttpDaemon check("healthcheck", dir.path(), engine.unix_address,
                   {"--node-name", "n1", "--kubernetes", "--service-account-dir",
                    api.credentials().service_account_dir});
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  const Json status = Parse(check.GetUntil("/status", [](const std::string& body) {
    const Json status = Parse(body);
    return status.contains("dra") && status["dra"]["synced"] == true &&
           status["dra"]["gpus"].size() == 8;
  }));
  ASSERT_TRUE(status.contains("dra")) << status.dump(2) << check.process().Stderr();
  const Json& dra = status["dra"];
  EXPECT_EQ(dra["driver"], "gpu.nvidia.com");
  EXPECT_EQ(dra["state"], "watching");
  EXPECT_EQ(dra["api_version"], "v1beta2");
  EXPECT_EQ(dra["devices"], 8) << "n2's slice is not this node's";
  for (int gpu = 0; gpu < 8; ++gpu) {
    const Json& entry = dra["gpus"][gpu];
    EXPECT_EQ(entry["gpu"], gpu);
    EXPECT_EQ(entry["device"], fmt::format("gpu-{}", 7 - gpu));
    EXPECT_EQ(entry["pool"], "n1");
    EXPECT_EQ(entry["matched_by"], gpu == 5 ? "pciBusID" : "uuid");
  }
  EXPECT_TRUE(dra["unmatched_gpus"].empty());
  // The slices were asked for this node only.
  bool by_node = false;
  for (const KubeRequest& request : api.Requests()) {
    if (request.path == "/apis/resource.k8s.io/v1beta2/resourceslices") {
      EXPECT_EQ(request.params.at("fieldSelector"), "spec.nodeName=n1");
      by_node = true;
    }
  }
  EXPECT_TRUE(by_node);
}

// Per-GPU quarantine on a node whose 8 GPUs are DRA devices: XID 48 on GPU 3 takes GPU 3's device
// out of service with one DeviceTaintRule (through v1beta2 on a 1.36-like server), the node stays
// untainted, and the rule goes after the hysteresis once the GPU is healthy; a rule the API
// refuses (422) taints the node instead; an NVSwitch's fatal SXid (node-level) taints the node.
TEST_F(DraHealthcheckTest, AFailingGpuIsQuarantinedAloneNotItsNode) {
  FakeKubeApi& api = *server_;
  api.ServeDraVersions({"v1", "v1beta2", "v1beta1"}, {"v1beta2", "v1alpha3"});  // 1.36
  const std::string kmsg = (dir.path() / "kmsg").string();
  std::ofstream(kmsg) << "6,1,1000,-;Linux version 6.1.0-18-amd64\n";
  EngineProcess engine(dir.path(), "n1", 8, std::vector<std::string>{"--kmsg", kmsg});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const Json gpus = GpusOf(engine);
  api.AddResourceSlice(GpuSlice("n1", DraDevicesOf(gpus)));
  HttpDaemon check("healthcheck", dir.path(), engine.unix_address,
                   {"--node-name", "n1", "--kubernetes", "--taint", "--service-account-dir",
                    api.credentials().service_account_dir, "--untaint-after", "2s"});
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "False"; }));
  ASSERT_TRUE(check.process().WaitForStderr("per-GPU quarantine through resource.k8s.io/v1beta2"))
      << check.process().Stderr();
  check.GetUntil("/status",
                 [](const std::string& body) { return Parse(body)["dra"]["gpus"].size() == 8; });

  const auto inject = [&](int gpu, const char* xid) {
    ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", std::to_string(gpu), "--xid",
                          xid, "--allow-actions", "--engine", engine.unix_address})
                  .exit_code,
              0);
  };
  inject(3, "48");
  ASSERT_TRUE(EventuallyInApi([&] { return api.DeviceTaintRules().size() == 1; }))
      << check.process().Stderr();
  const Json rule = api.DeviceTaintRules()[0];
  EXPECT_EQ(rule["metadata"]["name"], "vigil-n1-gpu-4");
  EXPECT_EQ(rule["spec"]["deviceSelector"],
            (Json{{"driver", "gpu.nvidia.com"}, {"pool", "n1"}, {"device", "gpu-4"}}));
  EXPECT_EQ(rule["spec"]["taint"]["key"], "vigil.dev/gpu-fail");
  EXPECT_EQ(rule["spec"]["taint"]["value"], "DCGM_FR_VOLATILE_DBE_DETECTED");
  EXPECT_EQ(rule["spec"]["taint"]["effect"], "NoSchedule");
  EXPECT_EQ(rule["metadata"]["labels"]["vigil.dev/node"], "n1");
  EXPECT_EQ(rule["metadata"]["labels"]["vigil.dev/gpu-uuid"], gpus[3]["uuid"]);
  bool through_v1beta2 = false;
  for (const KubeRequest& request : api.Requests()) {
    through_v1beta2 |= request.method == "POST" &&
                       request.path == "/apis/resource.k8s.io/v1beta2/devicetaintrules";
  }
  EXPECT_TRUE(through_v1beta2);
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "True"; }));
  // The node keeps no taint: its 7 healthy GPUs stay schedulable. (The check records the rule
  // once the API server's answer is back, a moment after the fake has stored it.)
  const Json status = Parse(check.GetUntil("/status", [](const std::string& body) {
    return Parse(body)["quarantine"]["rules"].size() == 1;
  }));
  EXPECT_FALSE(Tainted(api, "n1")) << status.dump(2);
  EXPECT_EQ(status["quarantine"]["rules"].size(), 1u);
  EXPECT_EQ(status["quarantine"]["active"], true) << "what a drill reads to name its stage";
  EXPECT_THAT(check.Get("/metrics"), HasSubstr("vigil_healthcheck_kube_taints_added_total 0\n"));

  // Healthy again: the rule goes after 2 s, the node never tainted.
  ASSERT_EQ(
      RunCommand({VigilBinary(), "health", "clear", "--gpu", "3", "--engine", engine.unix_address})
          .exit_code,
      0);
  ASSERT_TRUE(EventuallyInApi([&] { return api.DeviceTaintRules().empty(); }))
      << check.process().Stderr();
  EXPECT_TRUE(check.process().WaitForStderr("DeviceTaintRule vigil-n1-gpu-4 removed"));
  EXPECT_FALSE(Tainted(api, "n1"));
  // Each step is on the node's record: the quarantine and the release (posted after the log
  // line above).
  std::vector<std::string> reasons;
  EXPECT_TRUE(EventuallyInApi([&] {
    reasons.clear();
    for (const Json& event : api.Events()) reasons.push_back(event["reason"]);
    return std::count(reasons.begin(), reasons.end(), "GpuQuarantined") == 1 &&
           std::count(reasons.begin(), reasons.end(), "GpuReleased") == 1;
  })) << fmt::format("{}", fmt::join(reasons, ", "));

  // A rule the API refuses: said with its cause, and the node is tainted instead.
  api.FailNext(422, 1, "/apis/resource.k8s.io/v1beta2/devicetaintrules", 0, "POST");
  inject(5, "48");
  ASSERT_TRUE(EventuallyInApi([&] { return Tainted(api, "n1"); })) << check.process().Stderr();
  EXPECT_TRUE(check.process().WaitForStderr("the API refused DeviceTaintRule vigil-n1-gpu-2"));
  EXPECT_THAT(
      Parse(check.Get("/status"))["quarantine"]["refused"][gpus[5]["uuid"].get<std::string>()]
          .get<std::string>(),
      HasSubstr("HTTP 422"));
  EXPECT_TRUE(api.DeviceTaintRules().empty());
  ASSERT_EQ(
      RunCommand({VigilBinary(), "health", "clear", "--gpu", "5", "--engine", engine.unix_address})
          .exit_code,
      0);
  ASSERT_TRUE(EventuallyInApi([&] { return !Tainted(api, "n1"); })) << check.process().Stderr();

  // A fatal NVSwitch error is the node's: the node is tainted, whatever the GPUs' devices.
  std::ofstream(kmsg, std::ios::app)
      << "3,2,9500000,-;nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM "
         "Fault Up\n";
  ASSERT_TRUE(EventuallyInApi([&] { return Tainted(api, "n1"); })) << check.process().Stderr();
  EXPECT_TRUE(api.DeviceTaintRules().empty());
}

// The remediator's published breaker counts GPUs out of service across the fleet: while it is
// open, a failing GPU gets no DeviceTaintRule (and its node no taint), with an Event that says
// why — a fleet-wide false alarm must not take the fleet's GPUs out one by one.
TEST_F(DraHealthcheckTest, TheCircuitBreakerRefusesAGpuQuarantineBeyondTheShare) {
  FakeKubeApi& api = *server_;
  EngineProcess engine(dir.path(), "n1", 8);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const Json gpus = GpusOf(engine);
  api.AddResourceSlice(GpuSlice("n1", DraDevicesOf(gpus)));
  // As a remediator publishes it: 2 of 24 GPUs out of service, at most 2 may (share 0.1).
  const absl::Time now = absl::Now();
  api.SetConfigMap("vigil", "vigil-circuit-breaker",
                   BreakerToData({.state = BreakerState::kOpen,
                                  .taint_key = "vigil.dev/gpu-problem",
                                  .tainted_nodes = 0,
                                  .gpu_nodes = 3,
                                  .max_tainted_nodes = 1,
                                  .out_of_service_gpus = 2,
                                  .gpus = 24,
                                  .max_out_of_service_gpus = 2,
                                  .max_tainted_share = 0.1,
                                  .changed = now,
                                  .renewed = now,
                                  .decided_by = "vigil-remediator-0"}));
  HttpDaemon check("healthcheck", dir.path(), engine.unix_address,
                   {"--node-name", "n1", "--kubernetes", "--taint", "--service-account-dir",
                    api.credentials().service_account_dir, "--max-tainted-share", "0.1"});
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  check.GetUntil("/status",
                 [](const std::string& body) { return Parse(body)["dra"]["gpus"].size() == 8; });
  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "3", "--xid", "48",
                        "--allow-actions", "--engine", engine.unix_address})
                .exit_code,
            0);
  ASSERT_TRUE(EventuallyInApi([&] {
    for (const Json& event : api.Events()) {
      if (event.value("reason", "") == "GpuQuarantineRefused") return true;
    }
    return false;
  })) << check.process().Stderr();
  std::string message;
  for (const Json& event : api.Events()) {
    if (event.value("reason", "") == "GpuQuarantineRefused") message = event["message"];
  }
  EXPECT_THAT(message, HasSubstr("the circuit breaker is open (0 of 3 GPU nodes tainted, 2 of 24 "
                                 "GPUs out of service, decided by vigil-remediator-0)"));
  ASSERT_TRUE(EventuallyInApi([&] { return ConditionStatus(api, "n1") == "True"; }));
  EXPECT_TRUE(api.DeviceTaintRules().empty());
  EXPECT_FALSE(Tainted(api, "n1")) << "the same breaker refuses the node taint";
}

// A driver that publishes nothing for this node is said once; a cluster without DRA too.
TEST_F(DraHealthcheckTest, ADraDriverWithoutDevicesHereOrNoDraApiIsSaidOnce) {
  FakeKubeApi& api = *server_;
  EngineProcess engine(dir.path(), "n1", 2);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  HttpDaemon check("healthcheck", dir.path(), engine.unix_address,
                   {"--node-name", "n1", "--kubernetes", "--service-account-dir",
                    api.credentials().service_account_dir, "--dra-driver", "gpu.example.com"});
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  EXPECT_TRUE(
      check.process().WaitForStderr("driver gpu.example.com publishes no device for node n1"))
      << check.process().Stderr();
  const Json status = Parse(check.Get("/status"));
  EXPECT_EQ(status["dra"]["devices"], 0);
  EXPECT_EQ(status["dra"]["unmatched_gpus"].size(), 2u);

  api.ServeDraVersions({}, {});
  HttpDaemon without("healthcheck", dir.path(), engine.unix_address,
                     {"--node-name", "n1", "--kubernetes", "--service-account-dir",
                      api.credentials().service_account_dir});
  ASSERT_GT(without.port(), 0) << without.process().Stderr();
  EXPECT_TRUE(without.process().WaitForStderr("serves no resourceslices in resource.k8s.io"))
      << without.process().Stderr();
  EXPECT_EQ(Parse(without.Get("/status"))["dra"]["state"], "no_dra_api");
}

TEST(HealthcheckTest, BadFlagsAreRefusedWithOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--taint"}, "--taint needs --kubernetes"},
      {{"--kubernetes", "--taint", "--max-tainted-share", "1.5"}, "--max-tainted-share"},
      {{"--untaint-after", "soon"}, "--untaint-after"},
      {{"--heartbeat", "1s"}, "--heartbeat 1s is too short"},
      {{"--heartbeat", "often"}, "--heartbeat"},
      {{"--taint-key", "Bad Key!"}, "--taint-key"},
      {{"--node-name", "a b"}, "--node-name"},
      {{"--listen", "nowhere"}, "nowhere"},
      {{"--dra-driver", "GPU_Driver"}, "--dra-driver 'GPU_Driver' is not a DRA driver name"},
      {{"--quarantine", "rack"}, "--quarantine 'rack' is not a quarantine"},
      {{"--device-taint-effect", "PreferNoSchedule"}, "--device-taint-effect 'PreferNoSchedule'"},
  };
  for (const auto& [extra, expected] : cases) {
    std::vector<std::string> args = {VigilBinary(), "healthcheck", "--engine",
                                     "unix:///nonexistent.sock"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandResult result = RunCommand(args);
    EXPECT_EQ(result.exit_code, 2) << fmt::format("{}", fmt::join(extra, " "));
    EXPECT_THAT(result.err, HasSubstr(expected));
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
  // --kubernetes outside a cluster says so.
  unsetenv("KUBERNETES_SERVICE_HOST");
  const CommandResult outside = RunCommand(
      {VigilBinary(), "healthcheck", "--engine", "unix:///nonexistent.sock", "--kubernetes"});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_THAT(outside.err, HasSubstr("KUBERNETES_SERVICE_HOST"));
}

}  // namespace
}  // namespace vigil::testing
