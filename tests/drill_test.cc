// End-to-end tests of `vigil drill` with the real binary: a passing drill (engine, exporter,
// health check) whose --json carries every stage and leaves nothing injected and the GPU as it
// was; preflight refusals — an exporter that follows another node's engine, a GPU already FAIL —
// that inject nothing (exit 2); a real Prometheus without the rules failing the alert stage
// (exit 1); the Kubernetes stages against the fake API server, as a dry run (the health check
// withholds the taint) and with --allow-actions (the taint follows, and goes after the cleanup).
#include <signal.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "daemon.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/fake_kube_api.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

// The GPU's status once the engine has ticked.
std::string GpuStatus(const EngineProcess& engine, int gpu) {
  std::string status;
  Eventually([&] {
    const Json verdict = VigilJson(
        {"health", "--json", "--gpu", std::to_string(gpu), "--engine", engine.unix_address});
    if (!verdict.is_object() || verdict.value("seq", 0) < 1) return false;
    status = verdict["gpus"][0]["status"].get<std::string>();
    return true;
  });
  return status;
}

// A GPU of the simulation that passes (the simulated GPUs may warn, e.g. for power).
int PassingGpu(const EngineProcess& engine, int gpus) {
  for (int gpu = 0; gpu < gpus; ++gpu) {
    if (GpuStatus(engine, gpu) == "PASS") return gpu;
  }
  return -1;
}

// What the drill left behind: the engine's active injections and scenarios, and the XIDs and
// injections it was sent.
int ActiveInjections(const EngineProcess& engine) {
  const Json list = VigilJson({"inject", "list", "--json", "--engine", engine.unix_address});
  return list.is_object() ? static_cast<int>(list["injections"].size() + list["scenarios"].size())
                          : -1;
}
int InjectedFaults(const EngineProcess& engine) {
  int injected = 0;
  for (const Json& event :
       JsonLines(Vigil({"events", "--json", "--no-follow", "--engine", engine.unix_address}).out)) {
    injected += event.value("injected", false) &&
                (event["kind"] == "XID" || event["kind"] == "INJECTION_STARTED");
  }
  return injected;
}

struct Chain {
  explicit Chain(const TempDir& dir, const std::string& node = "n1")
      : engine(dir.path(), node, 4),
        exporter("exporter", dir.path(), engine.unix_address, {"--node-name", node}),
        healthcheck("healthcheck", dir.path(), engine.unix_address, {"--node-name", node}) {}
  std::string exporter_url() const { return fmt::format("http://127.0.0.1:{}", exporter.port()); }
  std::string healthcheck_url() const {
    return fmt::format("http://127.0.0.1:{}", healthcheck.port());
  }
  EngineProcess engine;
  HttpDaemon exporter;
  HttpDaemon healthcheck;
};

TEST(DrillTest, APassingDrillCarriesEveryStageAndLeavesNothingBehind) {
  TempDir dir;
  Chain chain(dir);
  ASSERT_GT(chain.exporter.port(), 0) << chain.exporter.process().Stderr();
  ASSERT_GT(chain.healthcheck.port(), 0) << chain.healthcheck.process().Stderr();
  const int gpu = PassingGpu(chain.engine, 4);
  ASSERT_GE(gpu, 0);
  // The health check needs a fresh verdict before a drill can use it.
  chain.healthcheck.GetUntil("/status", [](const std::string& body) {
    return body.find("\"fresh\":true") != std::string::npos;
  });

  const CommandResult run =
      Vigil({"drill", "--engine", chain.engine.unix_address, "--xid", "79", "--gpu",
             std::to_string(gpu), "--exporter", chain.exporter_url(), "--healthcheck",
             chain.healthcheck_url(), "--deadline", "20s", "--json"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json report = Json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(report["outcome"], "passed");
  EXPECT_EQ(report["target"]["node"], "n1");
  EXPECT_EQ(report["target"]["fault_status"], "FAIL");
  const std::string instance = report["target"]["instance_id"];
  std::map<std::string, std::string> there, back;
  for (const Json& stage : report["stages"]) {
    const std::string name = stage["stage"];
    (stage["phase"] == "fault" ? there : back)[name] = stage["result"];
    if (stage["result"] == "PASS") {
      EXPECT_GE(stage["seen_after_ms"].get<int64_t>(), 0) << name;
      EXPECT_LT(stage["seen_after_ms"].get<int64_t>(), 20'000) << name;
      EXPECT_EQ(stage["instance_id"], instance) << name;
      EXPECT_GT(stage["seq"].get<uint64_t>(), 0u) << name;
    }
  }
  EXPECT_EQ(there, (std::map<std::string, std::string>{{"engine", "PASS"},
                                                       {"exporter", "PASS"},
                                                       {"healthcheck", "PASS"},
                                                       {"node-condition", "SKIP"},
                                                       {"taint", "SKIP"},
                                                       {"alert", "SKIP"},
                                                       {"alertmanager", "SKIP"},
                                                       {"quarantine", "SKIP"},
                                                       {"drain", "SKIP"},
                                                       {"recovery", "SKIP"}}));
  EXPECT_EQ(back, (std::map<std::string, std::string>{
                      {"engine", "PASS"}, {"exporter", "PASS"}, {"healthcheck", "PASS"}}));
  // Nothing stays injected, and the GPU passes again.
  EXPECT_EQ(ActiveInjections(chain.engine), 0);
  EXPECT_EQ(GpuStatus(chain.engine, gpu), "PASS");

  // The table says the same for people.
  const CommandResult table =
      Vigil({"drill", "--engine", chain.engine.unix_address, "--xid", "79", "--gpu",
             std::to_string(gpu), "--exporter", chain.exporter_url(), "--deadline", "20s"});
  EXPECT_EQ(table.exit_code, 0) << table.out << table.err;
  EXPECT_THAT(table.out, HasSubstr("The way there (since the injection):"));
  EXPECT_THAT(table.out, HasSubstr("Drill passed"));
}

TEST(DrillTest, AnExporterOfAnotherNodesEngineIsRefusedAtPreflight) {
  TempDir dir;
  Chain here(dir, "n1");
  EngineProcess there(dir.path(), "n2", 4);
  HttpDaemon wrong("exporter", dir.path(), there.unix_address, {"--node-name", "n1"});
  ASSERT_GT(wrong.port(), 0) << wrong.process().Stderr();
  wrong.GetUntil("/metrics", [](const std::string& body) {
    return body.find("vigil_engine_up 1") != std::string::npos;
  });
  const std::string there_instance =
      VigilJson({"info", "--json", "--engine", there.unix_address})["instance_id"];
  const std::string url = fmt::format("http://127.0.0.1:{}", wrong.port());
  const CommandResult run = Vigil({"drill", "--engine", here.engine.unix_address, "--xid", "79",
                                   "--gpu", "0", "--exporter", url});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr(fmt::format("the exporter at {} follows engine {} of node n2, "
                                             "not this node's engine",
                                             url, there_instance)));
  EXPECT_THAT(run.err, HasSubstr("nothing was injected"));
  EXPECT_EQ(InjectedFaults(here.engine), 0);
  EXPECT_EQ(ActiveInjections(here.engine), 0);
}

TEST(DrillTest, AGpuThatAlreadyFailsIsRefusedAtPreflight) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ASSERT_EQ(Vigil({"inject", "xid", "--gpu", "1", "--xid", "79", "--engine", engine.unix_address})
                .exit_code,
            0);
  ASSERT_TRUE(Eventually([&] { return GpuStatus(engine, 1) == "FAIL"; }));
  const CommandResult run =
      Vigil({"drill", "--engine", engine.unix_address, "--xid", "48", "--gpu", "1", "--json"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  const Json report = Json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(report["outcome"], "refused");
  ASSERT_EQ(report["problems"].size(), 1u);
  EXPECT_THAT(report["problems"][0].get<std::string>(), HasSubstr("GPU 1 already FAILs (driver)"));
  EXPECT_EQ(InjectedFaults(engine), 1) << "only the XID injected before the drill";
  // Bad flags are usage errors, before anything is reached.
  const CommandResult usage = Vigil({"drill", "--engine", engine.unix_address, "--gpu", "0"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("give one fault"));
  const CommandResult stage = Vigil({"drill", "--engine", engine.unix_address, "--xid", "79",
                                     "--gpu", "0", "--stage-deadline", "alert=1m"});
  EXPECT_EQ(stage.exit_code, 2);
  EXPECT_THAT(stage.err, HasSubstr("the alert stage is not part of this drill"));
}

TEST(DrillTest, APrometheusWithoutTheRulesFailsTheAlertStage) {
  TempDir dir;
  Chain chain(dir);
  ASSERT_GT(chain.exporter.port(), 0) << chain.exporter.process().Stderr();
  const int prometheus_port = FreePort();
  const std::string config = dir.File("prometheus.yml");
  std::ofstream(config) << fmt::format(R"(global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: vigil-exporter
    static_configs:
      - targets: ['127.0.0.1:{}']
        labels: {{node: n1}}
)",
                                       chain.exporter.port());
  Process prometheus(
      {"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.File("tsdb"),
       fmt::format("--web.listen-address=127.0.0.1:{}", prometheus_port)},
      dir.path());
  httplib::Client client("127.0.0.1", prometheus_port);
  ASSERT_TRUE(Eventually([&] {
    auto ready = client.Get("/-/ready");
    return ready && ready->status == 200;
  })) << prometheus.Stderr();
  const int gpu = PassingGpu(chain.engine, 4);
  ASSERT_GE(gpu, 0);
  const CommandResult run =
      Vigil({"drill", "--engine", chain.engine.unix_address, "--xid", "79", "--gpu",
             std::to_string(gpu), "--exporter", chain.exporter_url(), "--prometheus",
             fmt::format("http://127.0.0.1:{}", prometheus_port), "--deadline", "20s",
             "--stage-deadline", "alert=4s", "--json"},
            /*uid=*/-1);
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json report = Json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(report["outcome"], "stage_failed");
  for (const Json& stage : report["stages"]) {
    if (stage["phase"] != "fault") continue;
    if (stage["stage"] == "alert") {
      EXPECT_EQ(stage["result"], "FAIL");
      EXPECT_THAT(stage["detail"].get<std::string>(), HasSubstr("no alerting rules loaded"));
    } else if (stage["stage"] == "engine" || stage["stage"] == "exporter") {
      EXPECT_EQ(stage["result"], "PASS") << stage.dump();
    }
  }
  EXPECT_EQ(ActiveInjections(chain.engine), 0) << "a failed drill cleans up too";
  EXPECT_EQ(GpuStatus(chain.engine, gpu), "PASS");
  prometheus.Signal(SIGTERM);
  prometheus.Wait();
}

// Node n1 of the fake API server (the in-cluster environment, KUBERNETES_SERVICE_HOST/PORT, is
// set for the processes to inherit), its engine on 2 simulated GPUs, and a health check keeping
// its condition and taint (with `extra` flags), once the node has the condition.
struct KubeChain {
  KubeChain(const TempDir& dir, const std::vector<std::string>& extra) {
    std::string error;
    server = FakeKubeApi::Start(dir.path().string(), &error);
    if (server == nullptr) {
      ADD_FAILURE() << error;
      return;
    }
    server->AddNode("n1", {{"nvidia.com/gpu.present", "true"}});
    accounts = server->credentials().service_account_dir;
    engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
    std::vector<std::string> args = {"--node-name",           "n1",    "--kubernetes", "--taint",
                                     "--service-account-dir", accounts};
    args.insert(args.end(), extra.begin(), extra.end());
    check = std::make_unique<HttpDaemon>("healthcheck", dir.path(), engine->unix_address, args);
    ready = check->port() > 0 &&
            Eventually([&] { return ConditionStatus(server->Node("n1"), "GpuProblem") != ""; });
    if (!ready) ADD_FAILURE() << check->process().Stderr();
  }
  std::unique_ptr<FakeKubeApi> server;
  std::string accounts;
  std::unique_ptr<EngineProcess> engine;
  std::unique_ptr<HttpDaemon> check;
  bool ready = false;
};

TEST(DrillTest, TheKubernetesStagesAreADryRunUnlessActionsAreAllowed) {
  TempDir dir;
  KubeChain chain(dir, {"--untaint-after", "1s"});
  ASSERT_TRUE(chain.ready);
  FakeKubeApi& api = *chain.server;
  const std::string& accounts = chain.accounts;
  const EngineProcess& engine = *chain.engine;
  HttpDaemon& check = *chain.check;
  const int gpu = PassingGpu(engine, 2);
  ASSERT_GE(gpu, 0);
  const std::vector<std::string> drill = {"drill",
                                          "--engine",
                                          engine.unix_address,
                                          "--xid",
                                          "79",
                                          "--gpu",
                                          std::to_string(gpu),
                                          "--kubernetes",
                                          "--taint",
                                          "--service-account-dir",
                                          accounts,
                                          "--deadline",
                                          "20s",
                                          "--json"};
  const auto results = [](const Json& report) {
    std::map<std::string, std::string> out;
    for (const Json& stage : report["stages"]) {
      out[fmt::format("{} {}", stage["phase"].get<std::string>(),
                      stage["stage"].get<std::string>())] =
          stage["result"].get<std::string>() + " " + stage["detail"].get<std::string>();
    }
    return out;
  };

  // A dry run: the condition shows the fault, the taint is only reported.
  const CommandResult dry = Vigil(drill);
  EXPECT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  auto rows = results(Json::parse(dry.out, nullptr, false));
  EXPECT_THAT(rows["fault node-condition"], ::testing::StartsWith("PASS GpuProblem=True"));
  EXPECT_THAT(rows["fault taint"], ::testing::StartsWith("PASS would taint (dry run"));
  EXPECT_THAT(rows["recovery node-condition"], ::testing::StartsWith("PASS"));
  EXPECT_FALSE(HasNoScheduleTaint(api.Node("n1"), "vigil.dev/gpu-problem"));

  // With --allow-actions the taint follows; --wait-recovery follows its removal too.
  std::vector<std::string> acting = drill;
  acting.push_back("--allow-actions");
  acting.push_back("--wait-recovery");
  const CommandResult act = Vigil(acting, /*uid=*/-1);
  EXPECT_EQ(act.exit_code, 0) << act.out << act.err;
  rows = results(Json::parse(act.out, nullptr, false));
  EXPECT_THAT(rows["fault taint"], ::testing::StartsWith("PASS vigil.dev/gpu-problem:NoSchedule"));
  EXPECT_THAT(rows["recovery taint"], ::testing::StartsWith("PASS no taint"));
  EXPECT_FALSE(HasNoScheduleTaint(api.Node("n1"), "vigil.dev/gpu-problem"));

  // Without --wait-recovery the taint's way back is pending, with the health check's hysteresis.
  std::vector<std::string> pending = drill;
  pending.push_back("--allow-actions");
  pending.push_back("--healthcheck");
  pending.push_back(fmt::format("http://127.0.0.1:{}", check.port()));
  const CommandResult left = Vigil(pending);
  EXPECT_EQ(left.exit_code, 0) << left.out << left.err;
  rows = results(Json::parse(left.out, nullptr, false));
  EXPECT_THAT(rows["recovery taint"],
              ::testing::StartsWith("PENDING the health check removes the taint once the node "
                                    "has been healthy for 1s"));
}

// The whole loop in a drill's timeline: with --remediation --allow-actions the drill follows the
// remediator (vigil remediator --mode on, against the fake API server) taking the node on,
// draining it, resetting the GPU through the health check's relay, and handing it back.
TEST(DrillTest, WithActionsAllowedTheTimelineShowsTheRemediationLoop) {
  TempDir dir;
  KubeChain chain(dir, {"--untaint-after", "2s", "--remediation", "--pod-resources-socket", ""});
  ASSERT_TRUE(chain.ready);
  FakeKubeApi& api = *chain.server;
  const std::string& accounts = chain.accounts;
  const EngineProcess& engine = *chain.engine;
  HttpDaemon& check = *chain.check;
  HttpDaemon remediator("remediator", dir.path(), "",
                        {"--mode", "on", "--untaint-after", "2s", "--identity", "r1",
                         "--service-account-dir", accounts});
  ASSERT_GT(remediator.port(), 0) << remediator.process().Stderr();
  const int gpu = PassingGpu(engine, 2);
  ASSERT_GE(gpu, 0);
  const CommandResult run = RunCommand(
      {VigilBinary(), "drill", "--engine", engine.unix_address, "--xid", "48", "--gpu",
       std::to_string(gpu), "--healthcheck", fmt::format("http://127.0.0.1:{}", check.port()),
       "--kubernetes", "--taint", "--remediation", "--allow-actions", "--wait-recovery",
       "--service-account-dir", accounts, "--deadline", "30s"},
      absl::Minutes(3));
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err << remediator.process().Stderr();
  std::map<std::string, int> passed;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    for (const char* stage : {"quarantine ", "drain ", "recovery "}) {
      if (line.rfind(stage, 0) == 0 && line.find(" PASS ") != std::string::npos) ++passed[stage];
    }
  }
  EXPECT_EQ(passed,
            (std::map<std::string, int>{{"quarantine ", 2}, {"drain ", 2}, {"recovery ", 2}}))
      << "each there and back:\n"
      << run.out;
  EXPECT_THAT(run.out, HasSubstr("handed back"));
  EXPECT_FALSE(HasNoScheduleTaint(api.Node("n1"), "vigil.dev/gpu-problem"));
  std::cout << run.out;  // the timeline, for the record of how long the loop takes on sim
}

// `make drill` itself: the script with this build's binary — vigil node, the health check on the
// fake API server, a real Prometheus and Alertmanager — passes every stage, there and back.
TEST(DrillTest, MakeDrillPassesEveryStage) {
  const CommandResult run =
      Shell(SourceDir() + "/scripts/drill " + VigilBinary(), absl::Seconds(240));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("every for: shortened to 5s"));
  EXPECT_THAT(run.out, HasSubstr("Drill passed"));
  int passed = 0;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    for (const char* stage : {"engine ", "exporter ", "healthcheck ", "node-condition ", "taint ",
                              "alert ", "alertmanager "}) {
      if (line.rfind(stage, 0) == 0) {
        EXPECT_THAT(line, HasSubstr(" PASS ")) << line;
        ++passed;
      }
    }
  }
  EXPECT_EQ(passed, 14) << "seven stages there and back:\n" << run.out;
}

}  // namespace
}  // namespace vigil::testing
