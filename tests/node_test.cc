// End-to-end tests of `vigil node` (engine + exporter + health check in one process) and of
// `make demo`'s script, with the real binary.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <regex>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/bcrypt.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string Get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  auto response = client.Get(path.c_str());
  return response ? response->body : "";
}

int PortFromLog(const std::string& log, const std::string& what) {
  std::smatch match;
  if (!std::regex_search(log, match,
                         std::regex(what + " listening on https?://127\\.0\\.0\\.1:([0-9]+)/"))) {
    return 0;
  }
  return std::stoi(match[1]);
}

TEST(NodeTest, OneProcessServesEngineExporterAndHealthcheckThatAgree) {
  TempDir dir;
  const std::string socket = dir.File("vigil.sock");
  Process node({VigilBinary(), "node", "--backend", "sim", "--gpus", "4", "--socket", socket,
                "--listen", "127.0.0.1:0", "--node-name", "n1", "--state-dir", dir.File("state"),
                "--exporter-listen", "127.0.0.1:0", "--healthcheck-listen", "127.0.0.1:0"},
               dir.path());
  ASSERT_TRUE(node.WaitForStderr("healthcheck listening on")) << node.Stderr();
  const int exporter = PortFromLog(node.Stderr(), "exporter");
  const int check = PortFromLog(node.Stderr(), "healthcheck");
  ASSERT_GT(exporter, 0);
  ASSERT_GT(check, 0);

  // The CLI reaches the same engine over its Unix socket.
  const CommandResult info =
      RunCommand({VigilBinary(), "info", "--json", "--engine", "unix://" + socket});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const std::string instance = Json::parse(info.out)["instance_id"];
  ASSERT_EQ(RunCommand({VigilBinary(), "inject", "xid", "--gpu", "2", "--xid", "79", "--engine",
                        "unix://" + socket})
                .exit_code,
            0);
  Json status;
  std::string metrics;
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (absl::Now() < deadline) {
    status = Json::parse(Get(check, "/status"), nullptr, false);
    metrics = Get(exporter, "/metrics");
    if (status.is_object() && status["status"] == "FAIL" &&
        metrics.find("system=\"driver\"} 20") != std::string::npos) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));  // polling the process under test
  }
  EXPECT_EQ(status["status"], "FAIL");
  EXPECT_EQ(status["gpus"][2]["status"], "FAIL");
  EXPECT_EQ(status["engine"]["instance_id"], instance);
  EXPECT_EQ(status["engine"]["address"], "in-process");
  EXPECT_TRUE(std::regex_search(
      metrics, std::regex("vigil_gpu_health_status\\{gpu=\"2\",[^}]*system=\"driver\","
                          "injected=\"true\"\\} 20")))
      << "an injected FAIL says so";
  EXPECT_THAT(metrics, HasSubstr("instance_id=\"" + instance + "\""));
  EXPECT_THAT(metrics, HasSubstr("Hostname=\"n1\""));

  node.Signal(SIGTERM);
  EXPECT_EQ(node.Wait(), 0) << node.Stderr();
  struct stat info_buffer;
  EXPECT_NE(stat(socket.c_str(), &info_buffer), 0) << "the socket file is removed";
}

// One web config serves both endpoints: TLS with the certificate it names and basic auth, /healthz
// open for probes; a mistake in it is one line before any GPU is opened.
TEST(NodeTest, TheWebConfigSecuresBothEndpoints) {
  TempDir dir;
  TestPki pki(dir.path().string(), "node");
  const TestPki::Issued server =
      pki.Issue("server", {.common_name = "localhost", .dns_names = {"localhost"}});
  const std::string web = dir.File("web.yml");
  std::ofstream(web) << "tls_server_config:\n  cert_file: " << server.cert
                     << "\n  key_file: " << server.key << "\nbasic_auth_users:\n  prometheus: '"
                     << BcryptForTest("s3cret") << "'\n";
  const std::vector<std::string> args = {VigilBinary(),
                                         "node",
                                         "--backend",
                                         "sim",
                                         "--gpus",
                                         "2",
                                         "--socket",
                                         dir.File("vigil.sock"),
                                         "--listen",
                                         "",
                                         "--state-dir",
                                         dir.File("state"),
                                         "--node-name",
                                         "n1",
                                         "--exporter-listen",
                                         "127.0.0.1:0",
                                         "--healthcheck-listen",
                                         "127.0.0.1:0",
                                         "--web-config-file",
                                         web};
  Process node(args, dir.path());
  ASSERT_TRUE(node.WaitForStderr("healthcheck listening on")) << node.Stderr();
  EXPECT_THAT(node.Stderr(), HasSubstr("exporter listening on https://"));
  for (const auto& [what, path] : std::vector<std::pair<std::string, std::string>>{
           {"exporter", "/metrics"}, {"healthcheck", "/status"}}) {
    SCOPED_TRACE(what);
    const std::string url =
        "https://localhost:" + std::to_string(PortFromLog(node.Stderr(), what)) + path;
    const std::string curl =
        "curl -sS -o /dev/null --max-time 5 -w '%{http_code}' --cacert " + pki.ca_file() + " ";
    EXPECT_EQ(Shell(curl + "-u prometheus:s3cret " + url).out, "200");
    EXPECT_EQ(Shell(curl + "-u prometheus:wrong " + url).out, "401");
    EXPECT_EQ(Shell(curl + url.substr(0, url.rfind('/')) + "/healthz").out, "200");
    EXPECT_NE(Shell(curl + "http" + url.substr(5)).out, "200") << "plain HTTP";
  }

  std::ofstream(web) << "tls_server_config:\n  cert_file: " << server.cert
                     << "\n  key_file: " << server.key << "\n  client_auth_type: RequireSomeCert\n";
  std::vector<std::string> bad = args;
  bad[bad.size() - 1] = web;
  const CommandResult refused = RunCommand(bad);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("client_auth_type"));
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
}

TEST(NodeTest, BadFlagsAreRefused) {
  TempDir dir;
  const CommandResult neither = RunCommand({VigilBinary(), "node", "--backend", "sim", "--socket",
                                            dir.File("s.sock"), "--state-dir", dir.File("state"),
                                            "--exporter-listen", "", "--healthcheck-listen", ""});
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_THAT(neither.err, HasSubstr("vigil engine"));
  const CommandResult bad_listen = RunCommand(
      {VigilBinary(), "node", "--backend", "sim", "--socket", dir.File("s.sock"), "--listen", "",
       "--state-dir", dir.File("state"), "--exporter-listen", "nowhere"});
  EXPECT_EQ(bad_listen.exit_code, 2);
  EXPECT_THAT(bad_listen.err, HasSubstr("--exporter-listen"));
}

TEST(NodeTest, MakeDemoRunsVigilNodeAndSaysWhereToLook) {
  const std::string script = SourceDir() + "/scripts/demo";
  const CommandResult demo = RunCommand(
      {"/usr/bin/env", "DEMO_COUNT=2", "DEMO_EXPORTER_PORT=" + std::to_string(FreePort()),
       "DEMO_HEALTHCHECK_PORT=" + std::to_string(FreePort()), script, VigilBinary()},
      absl::Seconds(30));
  ASSERT_EQ(demo.exit_code, 0) << demo.out << demo.err;
  EXPECT_THAT(demo.out, HasSubstr("`vigil node`"));
  EXPECT_THAT(demo.out, HasSubstr("/metrics"));
  EXPECT_THAT(demo.out, HasSubstr("/status"));
  EXPECT_THAT(demo.out, HasSubstr("inject xid"));
  EXPECT_THAT(demo.out, HasSubstr("/state/sim-sysfs/class/infiniband/mlx5_3/ports/1/state"));
  EXPECT_THAT(demo.out, HasSubstr("GPU 7"));  // the live table of 8 GPUs
}

}  // namespace
}  // namespace vigil::testing
