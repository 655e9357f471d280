// End-to-end tests of `vigil exporter` with the real binaries on loopback: the scrape's shape and
// promtool's verdict, a real Prometheus server scraping it, engine loss and return, pod
// attribution from a fake kubelet, and reloading the counters file.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "absl/time/clock.h"
#include "common/strings.h"
#include "daemon.h"
#include "fake_kubelet.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "k8s/podresources/v1/api.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/eventually.h"
#include "testing/fake_kube_api.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// `vigil exporter` with the node name the tests expect in the Hostname label.
struct ExporterProcess : HttpDaemon {
  ExporterProcess(const std::string& dir, const std::string& engine,
                  const std::vector<std::string>& extra = {})
      : HttpDaemon("exporter", dir, engine, WithNodeName(extra)) {}
  static std::vector<std::string> WithNodeName(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--node-name", "node-a"});
    return extra;
  }
  std::string ScrapeUntil(const std::function<bool(const std::string&)>& predicate,
                          absl::Duration timeout = absl::Seconds(10)) const {
    return GetUntil("/metrics", predicate, timeout);
  }
  // A scrape once pod `pod` has its labels somewhere.
  std::string ScrapeUntilPod(const std::string& pod) const {
    return ScrapeUntil(
        [&](const std::string& b) { return b.find("pod=\"" + pod + "\"") != std::string::npos; });
  }
  // The flags of an exporter attributing pods from the kubelet at `socket`.
  static std::vector<std::string> Kubernetes(const std::string& socket) {
    return {"--kubernetes", "--pod-resources-socket", socket, "--pod-refresh", "1s"};
  }
};

// The engine's GPUs as `vigil discovery --json` lists them.
nlohmann::json GpusOf(const EngineProcess& engine) {
  return nlohmann::json::parse(
      RunCommand({VigilBinary(), "discovery", "--json", "--engine", engine.unix_address})
          .out)["gpus"];
}

int CountLines(const std::string& text, const std::string& prefix) {
  int count = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) count += line.rfind(prefix, 0) == 0;
  return count;
}

std::string WriteFile(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.File(name)) << text;
  return dir.File(name);
}

TEST(ExporterTest, ScrapeHasEveryGpuAndPassesPromtool) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 4);
  ExporterProcess exporter(dir.path(), engine.unix_address);
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  const std::string body = exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("vigil_engine_up 1") != std::string::npos; });
  const std::string instance = nlohmann::json::parse(
      RunCommand({VigilBinary(), "info", "--json", "--engine", engine.unix_address})
          .out)["instance_id"];
  EXPECT_EQ(CountLines(body, "DCGM_FI_DEV_GPU_TEMP{"), 4);
  for (int gpu = 0; gpu < 4; ++gpu) {
    EXPECT_THAT(body,
                HasSubstr("DCGM_FI_DEV_GPU_TEMP{gpu=\"" + std::to_string(gpu) + "\",UUID=\"GPU-"));
  }
  EXPECT_THAT(body, HasSubstr(",Hostname=\"node-a\",DCGM_FI_DRIVER_VERSION=\"580.82.07\"}"));
  EXPECT_THAT(body, HasSubstr("vigil_engine_up 1\n"));
  EXPECT_THAT(body, HasSubstr("vigil_engine_info{node=\"n1\",instance_id=\"" + instance + "\""));
  EXPECT_THAT(body, Not(HasSubstr("DCGM_FI_DEV_VGPU_LICENSE_STATUS{")));  // unsupported: omitted
  int status = 0;
  exporter.Get("/readyz", &status);
  EXPECT_EQ(status, 200);

  // promtool: the text parses. Its only complaints are the naming lints that dcgm-exporter's
  // own series carry by design (camelCase labels, counters without _total): keeping those names
  // is what makes this a drop-in. Vigil's own metrics must be lint-clean.
  const std::string scrape = WriteFile(dir, "scrape.txt", body);
  auto promtool = Shell("promtool check metrics < " + scrape);
  EXPECT_TRUE(promtool.exit_code == 0 || promtool.exit_code == 3) << promtool.err << promtool.out;
  std::istringstream lints(promtool.err + promtool.out);
  int lint_lines = 0;
  for (std::string line; std::getline(lints, line);) {
    if (line.empty()) continue;
    ++lint_lines;
    EXPECT_TRUE(line.rfind("DCGM_", 0) == 0) << "lint on a non-DCGM series: " << line;
    EXPECT_THAT(line, ::testing::AnyOf(HasSubstr("snake_case"), HasSubstr("_total\" suffix"),
                                       HasSubstr("should not include type")))
        << line;
  }
  EXPECT_GT(lint_lines, 0);
}

TEST(ExporterTest, RealPrometheusScrapesIt) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 3);
  ExporterProcess exporter(dir.path(), engine.unix_address);
  ASSERT_GT(exporter.port(), 0);
  const int prometheus_port = FreePort();
  const std::string config = WriteFile(dir, "prometheus.yml",
                                       fmt::format(R"(global:
  scrape_interval: 1s
scrape_configs:
  - job_name: vigil
    static_configs:
      - targets: ['127.0.0.1:{}']
)",
                                                   exporter.port()));
  Process prometheus(
      {"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.File("tsdb"),
       fmt::format("--web.listen-address=127.0.0.1:{}", prometheus_port)},
      dir.path());
  httplib::Client client("127.0.0.1", prometheus_port);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  nlohmann::json result;
  while (absl::Now() < deadline) {
    auto response = client.Get("/api/v1/query?query=DCGM_FI_DEV_GPU_TEMP");
    if (response && response->status == 200) {
      result = nlohmann::json::parse(response->body)["data"]["result"];
      if (result.size() == 3) break;
    }
    absl::SleepFor(absl::Milliseconds(200));  // Prometheus scrapes on its own schedule
  }
  ASSERT_EQ(result.size(), 3u) << prometheus.Stderr();
  std::set<std::string> gpus;
  for (const auto& series : result) {
    gpus.insert(series["metric"]["gpu"].get<std::string>());
    EXPECT_EQ(series["metric"]["Hostname"], "node-a");
    EXPECT_THAT(series["metric"]["UUID"].get<std::string>(), ::testing::StartsWith("GPU-"));
  }
  EXPECT_EQ(gpus, (std::set<std::string>{"0", "1", "2"}));
  // Prometheus asks for gzip on every scrape; the exporter answered compressed and Prometheus read
  // it (the series above came through those scrapes).
  nlohmann::json gzip_scrapes;
  ASSERT_TRUE(Eventually([&] {
    auto response = client.Get("/api/v1/query?query=vigil_exporter_gzip_scrapes_total");
    if (!response || response->status != 200) return false;
    gzip_scrapes = nlohmann::json::parse(response->body)["data"]["result"];
    return !gzip_scrapes.empty() && std::stod(gzip_scrapes[0]["value"][1].get<std::string>()) > 0;
  })) << gzip_scrapes.dump();
  prometheus.Signal(SIGTERM);
  prometheus.Wait();
}

// gzip when the scraper accepts it (compressed once per render, the same text), plain otherwise.
TEST(ExporterTest, GzipWhenAcceptedPlainOtherwise) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ExporterProcess exporter(dir.path(), engine.unix_address);
  ASSERT_GT(exporter.port(), 0);
  exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("vigil_engine_up 1") != std::string::npos; });
  const std::string url = fmt::format("http://127.0.0.1:{}/metrics", exporter.port());
  std::string headers;
  ASSERT_TRUE(Eventually([&] {
    headers = Shell("curl -s -o /dev/null -D - -H 'Accept-Encoding: gzip' " + url).out;
    return headers.find("Content-Encoding: gzip") != std::string::npos;
  })) << headers;
  EXPECT_THAT(headers, HasSubstr("Vary: Accept-Encoding"));
  const auto gunzipped = Shell("curl -sf -H 'Accept-Encoding: gzip' " + url + " | gzip -dc");
  ASSERT_EQ(gunzipped.exit_code, 0) << gunzipped.err;
  EXPECT_EQ(CountLines(gunzipped.out, "DCGM_FI_DEV_GPU_TEMP{"), 2);
  EXPECT_THAT(gunzipped.out, HasSubstr("vigil_engine_up 1\n"));
  EXPECT_THAT(gunzipped.out, HasSubstr("vigil_exporter_scrapes_total "));
  const auto plain = Shell("curl -s -D - -H 'Accept-Encoding: identity' " + url);
  EXPECT_THAT(plain.out, Not(HasSubstr("Content-Encoding")));
  EXPECT_EQ(CountLines(plain.out, "DCGM_FI_DEV_GPU_TEMP{"), 2);
}

TEST(ExporterTest, EngineLossIsVisibleWithinThreeSecondsAndRecovers) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
  ExporterProcess exporter(dir.path(), engine->unix_address);
  ASSERT_GT(exporter.port(), 0);
  exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("vigil_engine_up 1") != std::string::npos; });
  const std::string first_instance = nlohmann::json::parse(
      RunCommand({VigilBinary(), "info", "--json", "--engine", engine->unix_address})
          .out)["instance_id"];

  engine->process->Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  engine->process->Wait();
  const std::string down = exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("vigil_engine_up 0") != std::string::npos; });
  EXPECT_LT(absl::Now() - killed, absl::Seconds(3));
  EXPECT_THAT(down, HasSubstr("vigil_engine_up 0\n"));
  EXPECT_THAT(down, Not(HasSubstr("DCGM_FI_")));
  int status = 0;
  EXPECT_THAT(exporter.Get("/readyz", &status), HasSubstr("not ready"));
  EXPECT_EQ(status, 503);

  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);  // same socket, new instance
  // The exporter's reconnect backoff reaches 5 s (plus gRPC's own, at most 2 s) while the engine
  // is away, so the way back may take that long after the engine is up again.
  const std::string back = exporter.ScrapeUntil(
      [&](const std::string& b) {
        return b.find("vigil_engine_up 1") != std::string::npos &&
               b.find(first_instance) == std::string::npos;
      },
      absl::Seconds(20));
  EXPECT_THAT(back, HasSubstr("vigil_engine_up 1\n"));
  EXPECT_EQ(CountLines(back, "DCGM_FI_DEV_GPU_TEMP{"), 2);
  EXPECT_THAT(back, Not(HasSubstr(first_instance)));
  EXPECT_THAT(back, HasSubstr("vigil_exporter_engine_reconnects_total 1\n"));
}

// The exporter shows what the engine it follows decided: an engine whose config fails XID 43 (the
// built-in policy ignores it as the application's problem) and its exporter agree on the verdict.
// The XID's err_msg stays dcgm-exporter's text for the code (a site's words would change the
// series' identity): the site's meaning is in the engine's events and incidents.
TEST(ExporterTest, AnEngineConfiguredToFailXid43AndItsExporterAgree) {
  TempDir dir;
  const std::string config = WriteFile(dir, "engine.yaml", R"(health:
  xid:
    "43": {severity: fail, meaning: "site policy: XID 43 means a reset", action: "reset the GPU"}
)");
  EngineProcess engine(dir.path(), "n1", 2, {"--config", config});
  const std::string counters = WriteFile(dir, "counters.csv", R"(DCGM_FI_DEV_GPU_TEMP, gauge, T.
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_EXP_GPU_HEALTH_STATUS, gauge, Health.
)");
  ExporterProcess exporter(dir.path(), engine.unix_address, {"-f", counters});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("vigil_engine_up 1") != std::string::npos; });

  const CommandResult injected =
      Vigil({"inject", "xid", "--gpu", "1", "--xid", "43", "--engine", engine.unix_address});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  const std::string message = "err_code=\"43\",err_msg=\"GPU stopped processing\"}";
  const std::string body = exporter.ScrapeUntil([&](const std::string& b) {
    return b.find(message) != std::string::npos &&
           b.find("system=\"driver\",injected=\"true\"} 20") != std::string::npos;
  });
  EXPECT_THAT(body, HasSubstr(message));
  // The verdict: GPU 1's driver system FAIL in the exporter's own series and in DCGM's health
  // metric, GPU 0 untouched — as the engine itself says.
  EXPECT_THAT(
      body,
      ::testing::ContainsRegex(
          R"re(vigil_gpu_health_status\{gpu="1",UUID="[^"]+",system="driver",injected="true"\} 20)re"));
  EXPECT_THAT(body,
              ::testing::ContainsRegex(
                  R"re(vigil_gpu_health_status\{gpu="0",UUID="[^"]+",system="driver"\} 0)re"));
  const CommandResult health =
      Vigil({"health", "--json", "--gpu", "1", "--engine", engine.unix_address});
  EXPECT_EQ(health.exit_code, 1) << health.err;
  const nlohmann::json verdict = nlohmann::json::parse(health.out);
  EXPECT_EQ(verdict["gpus"][0]["systems"]["driver"]["status"], "FAIL") << health.out;
  // The event stream carries the engine's policy for the code with the XID itself.
  const CommandResult events =
      Vigil({"events", "--no-follow", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(events.exit_code, 0) << events.err;
  bool seen = false;
  std::istringstream lines(events.out);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json event = nlohmann::json::parse(line);
    if (event["kind"] != "XID") continue;
    seen = true;
    EXPECT_EQ(event["xid_info"]["meaning"], "site policy: XID 43 means a reset");
    EXPECT_EQ(event["xid_info"]["severity"], "fail");
    EXPECT_EQ(event["xid_info"]["action"], "reset the GPU");
  }
  EXPECT_TRUE(seen) << events.out;
}

TEST(ExporterTest, PodAttributionFromTheKubeletAndWithoutIt) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  const nlohmann::json gpus = GpusOf(engine);
  const std::string uuid1 = gpus[1]["uuid"];

  FakeKubelet kubelet;
  kubelet.AddPod("ml", "train-0", "trainer", {uuid1});
  kubelet.AddPod("default", "web", "web", {});
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));

  ExporterProcess exporter(dir.path(), engine.unix_address, ExporterProcess::Kubernetes(socket));
  ASSERT_GT(exporter.port(), 0);
  const std::string body = exporter.ScrapeUntilPod("train-0");
  EXPECT_THAT(body, HasSubstr("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"" + uuid1));
  EXPECT_THAT(body, HasSubstr(",container=\"trainer\",namespace=\"ml\",pod=\"train-0\"}"));
  EXPECT_EQ(CountLines(body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), 1);
  EXPECT_THAT(body, Not(HasSubstr("gpu=\"0\",UUID=\"" + gpus[0]["uuid"].get<std::string>() +
                                  "\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\","
                                  "modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\","
                                  "DCGM_FI_DRIVER_VERSION=\"580.82.07\",container")));
  // Scrapes never call the kubelet: far fewer calls than scrapes.
  for (int i = 0; i < 20; ++i) exporter.Get("/metrics");
  EXPECT_LT(kubelet.calls.load(), 10);

  // The kubelet goes away: metrics continue without pod labels, and a counter says why.
  kubelet.Stop();
  const std::string without = exporter.ScrapeUntil([](const std::string& b) {
    return b.find("pod=\"train-0\"") == std::string::npos &&
           b.find("vigil_exporter_pod_mapping_errors_total 0\n") == std::string::npos;
  });
  EXPECT_THAT(without, Not(HasSubstr("pod=\"train-0\"")));
  EXPECT_EQ(CountLines(without, "DCGM_FI_DEV_GPU_TEMP{"), 2);
  EXPECT_TRUE(exporter.process().WaitForStderr("cannot list pod resources from the kubelet"));
}

// The fake API server and an engine of two simulated GPUs, for the exporter's options that read
// the API server.
class ExporterApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    api = FakeKubeApi::Start(dir.path(), &error);
    ASSERT_NE(api, nullptr) << error;
    engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
    const nlohmann::json gpus = GpusOf(*engine);
    uuid0 = gpus[0]["uuid"];
    uuid1 = gpus[1]["uuid"];
  }
  TempDir dir;
  std::unique_ptr<FakeKubeApi> api;
  std::unique_ptr<EngineProcess> engine;
  std::string uuid0, uuid1;
};

// --kubernetes-enable-pod-uid: the UID of each pod the kubelet names, from the API server's pods
// of this node (the fake API server, as the exporter's service account would reach it).
TEST_F(ExporterApiTest, PodUidFromTheApiServerWhenAsked) {
  auto pod = [](const std::string& ns, const std::string& name, const std::string& node) {
    return nlohmann::json{{"metadata", {{"namespace", ns}, {"name", name}}},
                          {"spec", {{"nodeName", node}}}};
  };
  api->AddPod(pod("ml", "train-0", "node-a"));
  api->AddPod(pod("ml", "train-0", "node-b"));  // another node's pod of that name: not ours
  auto uid_of = [&](const std::string& ns, const std::string& name) {
    for (const nlohmann::json& p : api->Pods()) {
      if (p["metadata"]["namespace"] == ns && p["metadata"]["name"] == name &&
          p["spec"]["nodeName"] == "node-a") {
        return p["metadata"]["uid"].get<std::string>();
      }
    }
    return std::string();
  };

  FakeKubelet kubelet;
  kubelet.AddPod("ml", "train-0", "trainer", {uuid0});
  kubelet.AddPod("ml", "infer-0", "triton", {uuid1});  // not on the API server yet
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));
  std::vector<std::string> flags = ExporterProcess::Kubernetes(socket);
  flags.insert(flags.end(), {"--kubernetes-enable-pod-uid", "--service-account-dir",
                             api->credentials().service_account_dir});
  ExporterProcess exporter(dir.path(), engine->unix_address, flags);
  ASSERT_GT(exporter.port(), 0);
  const std::string uid0 = uid_of("ml", "train-0");
  const std::string body = exporter.ScrapeUntil([&](const std::string& b) {
    return b.find("pod_uid=\"" + uid0 + "\"") != std::string::npos;
  });
  EXPECT_THAT(body, HasSubstr(",container=\"trainer\",namespace=\"ml\",pod=\"train-0\",pod_uid=\"" +
                              uid0 + "\"} "));
  // A pod the API server does not know (yet): pod_uid="" as dcgm-exporter's, then its UID.
  EXPECT_THAT(body,
              HasSubstr(",container=\"triton\",namespace=\"ml\",pod=\"infer-0\",pod_uid=\"\"} "));
  api->AddPod(pod("ml", "infer-0", "node-a"));
  const std::string uid1 = uid_of("ml", "infer-0");
  exporter.ScrapeUntil([&](const std::string& b) {
    return b.find(",pod=\"infer-0\",pod_uid=\"" + uid1 + "\"}") != std::string::npos;
  });
  // Only this node's pods were asked for, and the exporter said who it is.
  for (const KubeRequest& request : api->Requests()) {
    EXPECT_EQ(request.path, "/api/v1/pods");
    EXPECT_EQ(request.params.at("fieldSelector"), "spec.nodeName=node-a");
    EXPECT_THAT(request.user_agent, HasSubstr("(exporter)"));
  }
  EXPECT_THAT(body, HasSubstr("vigil_exporter_pod_uid_errors_total 0\n"));
}

// --kubernetes-enable-dra: a GPU a pod holds through a ResourceClaim (the kubelet's
// dynamic_resources) is labelled with the pod and the claim, the claim's device matched to the GPU
// by the DRA driver's ResourceSlice of this node — by UUID, not by the number in its name.
TEST_F(ExporterApiTest, DraClaimPodsFromTheKubeletAndTheDriversSlices) {
  const auto device = [](const std::string& name, const std::string& uuid) {
    return nlohmann::json{
        {"name", name},
        {"attributes", {{"type", {{"string", "gpu"}}}, {"uuid", {{"string", uuid}}}}}};
  };
  // The driver names GPUs by minor: GPU 1 is gpu-0 here, GPU 0 is gpu-1.
  api->AddResourceSlice(
      GpuSlice("node-a", nlohmann::json::array({device("gpu-0", uuid1), device("gpu-1", uuid0)})));
  FakeKubelet kubelet;
  kubelet.AddClaimPod("ml", "train-0", "trainer", "train-0-gpu-x7k2p", "gpu.nvidia.com", "node-a",
                      "gpu-0");
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));
  std::vector<std::string> flags = ExporterProcess::Kubernetes(socket);
  flags.insert(flags.end(), {"--kubernetes-enable-dra", "--service-account-dir",
                             api->credentials().service_account_dir});
  ExporterProcess exporter(dir.path(), engine->unix_address, flags);
  ASSERT_GT(exporter.port(), 0);
  const std::string body = exporter.ScrapeUntil([&](const std::string& b) {
    return b.find("dra_device_name=\"gpu-0\"") != std::string::npos;
  });
  // Every DCGM series of GPU 1 carries the claim's pod, and none of GPU 0's.
  std::string line;
  std::istringstream lines(body);
  for (std::string each; std::getline(lines, each);) {
    if (!each.starts_with("DCGM_") || each.find("UUID=") == std::string::npos) continue;
    const bool gpu1 = each.find("UUID=\"" + uuid1 + "\"") != std::string::npos;
    EXPECT_EQ(each.find("pod=\"train-0\"") != std::string::npos, gpu1) << each;
    if (gpu1 && each.starts_with("DCGM_FI_DEV_GPU_TEMP{")) line = each;
  }
  EXPECT_THAT(line, HasSubstr(",container=\"trainer\",dra_claim_name=\"train-0-gpu-x7k2p\","
                              "dra_claim_namespace=\"ml\",dra_device_name=\"gpu-0\","
                              "dra_driver_name=\"gpu.nvidia.com\",dra_pool_name=\"node-a\","
                              "namespace=\"ml\",pod=\"train-0\"} "));
  // Only this node's slices were asked for.
  for (const KubeRequest& request : api->Requests()) {
    if (request.path.find("/resourceslices") == std::string::npos) continue;
    EXPECT_EQ(request.params.at("fieldSelector"), "spec.nodeName=node-a");
  }
}

TEST(ExporterTest, MigGpuInstancesHaveTheirSeriesAndTheirPods) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2,
                       {"--mig", "0:" + std::string("1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,"
                                                    "1g.10gb,1g.10gb")});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const nlohmann::json gpus = GpusOf(engine);
  ASSERT_EQ(gpus[0]["mig_instances"].size(), 7u);
  const std::string mig3 = gpus[0]["mig_instances"][2]["uuid"];  // GPU instance 3
  ASSERT_EQ(gpus[0]["mig_instances"][2]["gpu_instance_id"].get<int>(), 3);

  FakeKubelet kubelet;
  kubelet.AddMigPod("ml", "infer-3", "triton", "nvidia.com/mig-1g.10gb", {mig3});
  const std::string socket = dir.File("kubelet.sock");
  ASSERT_TRUE(kubelet.Serve(socket));
  ExporterProcess exporter(dir.path(), engine.unix_address, ExporterProcess::Kubernetes(socket));
  ASSERT_GT(exporter.port(), 0);
  const std::string body = exporter.ScrapeUntilPod("infer-3");
  // Seven instance series of each field for GPU 0, none of its own; GPU 1 is whole.
  EXPECT_EQ(CountLines(body, "DCGM_FI_DEV_FB_USED{gpu=\"0\""), 7);
  EXPECT_EQ(CountLines(body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""), 7);
  EXPECT_EQ(CountLines(body, "DCGM_FI_DEV_FB_USED{gpu=\"1\""), 1);
  EXPECT_THAT(body, HasSubstr("modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"1g.10gb\","
                              "GPU_I_ID=\"3\",Hostname=\"node-a\""));
  EXPECT_THAT(body,
              HasSubstr("GPU_I_ID=\"3\",Hostname=\"node-a\",DCGM_FI_DRIVER_VERSION=\"580.82.07\","
                        "container=\"triton\",namespace=\"ml\",pod=\"infer-3\"}"));
  // Only instance 3's series carry the pod: one line per field it has.
  std::istringstream lines(body);
  int with_pod = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("pod=\"infer-3\"") == std::string::npos) continue;
    ++with_pod;
    EXPECT_THAT(line, HasSubstr("GPU_I_ID=\"3\"")) << line;
  }
  EXPECT_GT(with_pod, 5);
  // Each instance's framebuffer is its own: 1g.10gb's total, not the GPU's 80 GB.
  const std::regex fb_total(R"re(DCGM_FI_DEV_FB_FREE\{gpu="0",[^}]*GPU_I_ID="3"[^}]*\} (\d+))re");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(body, match, fb_total)) << body.substr(0, 3000);
  EXPECT_LT(std::stoll(match[1]), 11000);
  // The text still parses (duplicate series would not).
  auto promtool = Shell("promtool check metrics < " + WriteFile(dir, "mig.txt", body));
  EXPECT_TRUE(promtool.exit_code == 0 || promtool.exit_code == 3) << promtool.err << promtool.out;
  EXPECT_THAT(promtool.err + promtool.out, Not(HasSubstr("duplicate")));
}

// dcgm-exporter's shipped counters files (tests/testdata/dcgm-exporter) are accepted as they are,
// and every series they name that the simulated H100s can provide is served under the file's
// name for it — its 1.x names (dcgm_gpu_temp) included, and a name listed twice served once.
TEST(ExporterTest, DcgmExportersShippedCountersFilesServeEverySeriesTheSimulatorHas) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  for (const std::string file :
       {"default-counters.csv", "dcp-metrics-included.csv", "1.x-compatibility-metrics.csv"}) {
    SCOPED_TRACE(file);
    const std::string path = SourceDir() + "/tests/testdata/dcgm-exporter/" + file;
    ExporterProcess exporter(dir.path(), engine.unix_address, {"-f", path});
    ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
    const std::string body = exporter.ScrapeUntil(
        [](const std::string& b) { return b.find("vigil_engine_up 1") != std::string::npos; });
    std::ifstream csv(path);
    int names = 0;
    for (std::string line; std::getline(csv, line);) {
      if (line.empty() || line[0] == '#') continue;
      const std::string name(Trim(line.substr(0, line.find(','))));
      const std::string type(Trim(line.substr(
          line.find(',') + 1, line.find(',', line.find(',') + 1) - line.find(',') - 1)));
      if (name.empty() || type == "label") continue;
      ++names;
      // The simulated H100 SXM has no fan reading, no vGPU license and no PCIe throughput field
      // (200/201, which NVML no longer has): those rows have no series, as on the real board.
      if (name.find("FAN") != std::string::npos || name.find("VGPU") != std::string::npos) continue;
      EXPECT_EQ(CountLines(body, "# HELP " + name + " "), 1) << name;
      EXPECT_EQ(CountLines(body, name + "{gpu=\"0\""), 1) << name;
    }
    EXPECT_GT(names, 15);
  }
}

// --enable-exporter-metrics (dcgm-exporter 4.8.4): the process collector's series after the
// others, named, typed and helped as client_golang writes them, lint-clean for promtool, in the
// gzip scrape too, and moving as the process works; without the flag, none.
TEST(ExporterTest, ExporterMetricsAreTheProcessCollectorsSeriesAndMoveAsItWorks) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  const double started = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  ExporterProcess exporter(dir.path(), engine.unix_address, {"--enable-exporter-metrics"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  const std::string body = exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("DCGM_FI_DEV_GPU_TEMP{") != std::string::npos; });
  const std::map<std::string, std::string> families = {
      {"process_cpu_seconds_total", "counter"},
      {"process_max_fds", "gauge"},
      {"process_network_receive_bytes_total", "counter"},
      {"process_network_transmit_bytes_total", "counter"},
      {"process_open_fds", "gauge"},
      {"process_resident_memory_bytes", "gauge"},
      {"process_start_time_seconds", "gauge"},
      {"process_virtual_memory_bytes", "gauge"},
      {"process_virtual_memory_max_bytes", "gauge"}};
  for (const auto& [name, type] : families) {
    EXPECT_THAT(body, HasSubstr("\n# TYPE " + name + " " + type + "\n" + name + " ")) << name;
    EXPECT_GT(body.find("# HELP " + name), body.rfind("DCGM_FI_")) << name << " after the GPUs'";
  }
  EXPECT_NEAR(SeriesValue(body, "process_start_time_seconds"), started, 30);
  EXPECT_GT(SeriesValue(body, "process_open_fds"), 3);
  EXPECT_GT(SeriesValue(body, "process_resident_memory_bytes"), 1e6);
  const CommandResult promtool =
      Shell("promtool check metrics < " + WriteFile(dir, "own.txt", body));
  std::istringstream lints(promtool.err + promtool.out);
  for (std::string line; std::getline(lints, line);) {
    EXPECT_TRUE(line.empty() || line.rfind("DCGM_", 0) == 0) << "lint: " << line;
  }
  // Work moves the counters: scrapes cost the exporter CPU time and send bytes.
  const double cpu = SeriesValue(body, "process_cpu_seconds_total");
  const std::string later = exporter.ScrapeUntil(
      [&](const std::string& b) { return SeriesValue(b, "process_cpu_seconds_total") > cpu; },
      absl::Seconds(30));
  EXPECT_GT(SeriesValue(later, "process_cpu_seconds_total"), cpu);
  // The gzip scrape carries them too (curl decompresses it).
  const CommandResult gzip =
      Shell(fmt::format("curl -sS --compressed http://127.0.0.1:{}/metrics", exporter.port()));
  EXPECT_THAT(gzip.out, HasSubstr("\nprocess_open_fds "));
  EXPECT_THAT(gzip.out, HasSubstr("DCGM_FI_DEV_GPU_TEMP{"));

  ExporterProcess plain(dir.path(), engine.unix_address);
  EXPECT_THAT(plain.ScrapeUntil([](const std::string& b) {
    return b.find("DCGM_FI_DEV_GPU_TEMP{") != std::string::npos;
  }),
              Not(HasSubstr("\nprocess_")));
}

// --compat picks the dcgm-exporter release whose output to match: 4.8.3 spells the node label
// `hostname`, --hostname-label overrides the release, and an unknown release is one line, exit 2.
TEST(ExporterTest, CompatPicksTheReleasesSpellingOfTheNodeLabel) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 1);
  const auto scrape = [&](const std::vector<std::string>& flags) {
    ExporterProcess exporter(dir.path(), engine.unix_address, flags);
    EXPECT_GT(exporter.port(), 0) << exporter.process().Stderr();
    return exporter.ScrapeUntil(
        [](const std::string& b) { return b.find("DCGM_FI_DEV_GPU_TEMP{") != std::string::npos; });
  };
  const std::string newer = scrape({"--compat", "4.8.3"});
  EXPECT_THAT(newer, HasSubstr(",hostname=\"node-a\""));
  EXPECT_THAT(newer, Not(HasSubstr("Hostname=")));
  EXPECT_THAT(scrape({"--compat", "4.5.3-4.8.2"}), HasSubstr(",Hostname=\"node-a\""));
  EXPECT_THAT(scrape({"--compat", "4.8.3", "--hostname-label", "Hostname"}),
              HasSubstr(",Hostname=\"node-a\""));
  const CommandResult unknown =
      Vigil({"exporter", "--engine", engine.unix_address, "--compat", "4.9.0"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--compat 4.9.0: not a dcgm-exporter release Vigil matches"));
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1) << unknown.err;
}

// The flags users type from dcgm-exporter habit: -r for the engine (its remote host engine),
// -n (no Hostname label), -o (1.x label names), -c (how often the served values change, in ms).
TEST(ExporterTest, DcgmExportersShortFlagsMeanWhatTheyMeanThere) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ExporterProcess exporter(dir.path(), "", {"-r", engine.tcp_address, "-n", "-o", "-c", "5000"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  const std::string first = exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("vigil_engine_up 1") != std::string::npos; });
  EXPECT_THAT(first, HasSubstr("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",uuid=\"GPU-"));
  EXPECT_THAT(first, Not(HasSubstr("Hostname=")));
  const auto seq = [](const std::string& body) {
    return static_cast<long long>(SeriesValue(body, "vigil_engine_seq"));
  };
  const long long before = seq(first);
  const std::string next = exporter.ScrapeUntil(
      [&](const std::string& b) { return seq(b) > before; }, absl::Seconds(15));
  // The engine ticks every second; the served values changed only after five of them.
  EXPECT_GE(seq(next) - before, 4) << "seq " << before << " -> " << seq(next);
}

TEST(ExporterTest, SighupReloadsTheCountersWithoutAnEmptyScrape) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 1);
  const std::string csv =
      WriteFile(dir, "counters.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n");
  ExporterProcess exporter(dir.path(), engine.unix_address, {"-f", csv});
  ASSERT_GT(exporter.port(), 0);
  exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("DCGM_FI_DEV_GPU_TEMP{") != std::string::npos; });
  EXPECT_THAT(exporter.Get("/metrics"), Not(HasSubstr("DCGM_FI_DEV_POWER_USAGE")));

  WriteFile(dir, "counters.csv",
            "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
            "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n");
  exporter.process().Signal(SIGHUP);
  const std::string reloaded = exporter.ScrapeUntil(
      [](const std::string& b) { return b.find("DCGM_FI_DEV_POWER_USAGE{") != std::string::npos; });
  EXPECT_THAT(reloaded, HasSubstr("DCGM_FI_DEV_POWER_USAGE{"));
  EXPECT_THAT(reloaded, HasSubstr("DCGM_FI_DEV_GPU_TEMP{"));

  WriteFile(dir, "counters.csv", "DCGM_FI_DEV_GPU_TMP, gauge, typo\n");
  exporter.process().Signal(SIGHUP);
  ASSERT_TRUE(exporter.process().WaitForStderr("keeping the previous counters"));
  EXPECT_THAT(exporter.process().Stderr(), HasSubstr("counters.csv:1: unknown field"));
  const std::string kept = exporter.Get("/metrics");
  EXPECT_THAT(kept, HasSubstr("DCGM_FI_DEV_POWER_USAGE{"));
  EXPECT_THAT(kept, HasSubstr("vigil_exporter_counters_reload_failures_total 1\n"));
}

TEST(ExporterTest, BadFlagsAndFilesAreRefused) {
  TempDir dir;
  const std::string bad = WriteFile(dir, "bad.csv", "DCGM_FI_DEV_GPU_TEMP, gage, x\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"exporter", "-f", bad}, "bad.csv:1: unknown Prometheus type 'gage'"},
      {{"exporter", "-f", dir.File("missing.csv")}, "cannot read"},
      {{"exporter", "--hostname-label", "host"}, "--hostname-label"},
      {{"exporter", "--listen", "nonsense"}, "--listen"},
      {{"exporter", "--xid-window", "0s"}, "--xid-window"},
      {{"exporter", "--engine", "nowhere"}, "--engine"},
      {{"exporter", "-c", "-5"}, "--collect-interval"},
      {{"exporter", "--kubernetes-gpu-id-type", "serial"}, "--kubernetes-gpu-id-type"},
      {{"exporter", "--kubernetes-enable-pod-uid"}, "it needs --kubernetes (-k)"},
      {{"exporter", "--kubernetes-enable-dra"},
       "--kubernetes-enable-dra labels pod-attributed "
       "series: it needs --kubernetes (-k)"},
      {{"exporter", "-k", "--kubernetes-enable-pod-uid", "--service-account-dir",
        dir.File("no-such-dir")},
       "--kubernetes-enable-pod-uid reads pod UIDs from the API server"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {VigilBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = RunCommand(argv);
    EXPECT_EQ(result.exit_code, 2) << expected << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr(expected));
  }
}

}  // namespace
}  // namespace vigil::testing
