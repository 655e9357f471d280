// End-to-end tests of --web-config-file with the real binary, curl and a real Prometheus: the
// exporter over TLS with basic auth is scraped by Prometheus with its own tls_config and
// basic_auth, refuses plain HTTP and answers a wrong password 401; the health check with
// RequireAndVerifyClientCert serves a client certificate its CA signed and refuses none, another
// CA's and an expired one, each with one line in its log; a bad web config is one line and exit 2.
#include <fstream>
#include <string>

#include "daemon.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/bcrypt.h"
#include "testing/eventually.h"
#include "testing/temp_dir.h"
#include "testing/test_pki.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;

// curl's answer: the HTTP status ("000" when there was none) and its exit code.
struct Curl {
  std::string code;
  int exit_code;
};
Curl CurlStatus(const std::string& args) {
  const CommandResult result =
      Shell("curl -sS -o /dev/null --max-time 5 -w '%{http_code}' " + args);
  return {.code = result.out, .exit_code = result.exit_code};
}

class WebConfigTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  TempDir dir_;
  TestPki pki_{dir_.path().string(), "web"};
  TestPki::Issued server_ = pki_.Issue(
      "server",
      {.common_name = "vigil-exporter", .dns_names = {"localhost"}, .ip_localhost = true});
};

TEST_F(WebConfigTest, PrometheusScrapesTheExporterOverTlsWithBasicAuth) {
  const std::string web =
      Write("web.yml",
            "tls_server_config:\n  cert_file: " + server_.cert + "\n  key_file: " + server_.key +
                "\nhttp_server_config:\n  headers:\n"
                "    X-Content-Type-Options: nosniff\nbasic_auth_users:\n  prometheus: '" +
                BcryptForTest("s3cret") + "'\n");
  EngineProcess engine(dir_.path(), "n1", 2);
  HttpDaemon exporter("exporter", dir_.path(), engine.unix_address, {"--web-config-file", web});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  EXPECT_THAT(exporter.process().Stderr(), HasSubstr("listening on https://"));
  const std::string url = fmt::format("https://127.0.0.1:{}", exporter.port());
  const std::string ca = "--cacert " + pki_.ca_file() + " ";

  EXPECT_EQ(CurlStatus(ca + "-u prometheus:s3cret " + url + "/metrics").code, "200");
  EXPECT_EQ(CurlStatus(ca + "-u prometheus:wrong " + url + "/metrics").code, "401");
  EXPECT_EQ(CurlStatus(ca + url + "/metrics").code, "401");
  EXPECT_EQ(CurlStatus(ca + url + "/healthz").code, "200");  // probes need no password
  const CommandResult headers = Shell("curl -sS -D - -o /dev/null --max-time 5 " + ca +
                                      "-u prometheus:s3cret " + url + "/metrics");
  EXPECT_THAT(headers.out, HasSubstr("X-Content-Type-Options: nosniff"));
  // Plain HTTP to the TLS port gets no HTTP answer.
  const Curl plain = CurlStatus(fmt::format("http://127.0.0.1:{}/metrics", exporter.port()));
  EXPECT_NE(plain.code, "200");
  EXPECT_NE(plain.exit_code, 0);

  const int port = FreePort();
  const std::string config = dir_.File("prometheus.yml");
  std::ofstream(config) << fmt::format(
      "global:\n  scrape_interval: 1s\nscrape_configs:\n"
      "  - job_name: vigil\n    scheme: https\n"
      "    tls_config: {{ca_file: {}, server_name: localhost}}\n"
      "    basic_auth: {{username: prometheus, password: s3cret}}\n"
      "    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n"
      "  - job_name: wrong-password\n    scheme: https\n"
      "    tls_config: {{ca_file: {}}}\n"
      "    basic_auth: {{username: prometheus, password: guess}}\n"
      "    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
      pki_.ca_file(), exporter.port(), pki_.ca_file(), exporter.port());
  Process prometheus(
      {"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir_.File("tsdb"),
       fmt::format("--web.listen-address=127.0.0.1:{}", port)},
      dir_.path());
  httplib::Client client("127.0.0.1", port);
  const auto value = [&](const std::string& expr) {
    auto response = client.Post("/api/v1/query", httplib::Params{{"query", expr}});
    if (!response) return std::string();
    const nlohmann::json body = nlohmann::json::parse(response->body, nullptr, false);
    if (body.is_discarded() || body["data"]["result"].empty()) return std::string();
    return body["data"]["result"][0]["value"][1].get<std::string>();
  };
  ASSERT_TRUE(
      Eventually([&] { return value("vigil_engine_up{job=\"vigil\"}") == "1"; }, absl::Seconds(30)))
      << prometheus.Stderr();
  EXPECT_EQ(value("up{job=\"vigil\"}"), "1");
  ASSERT_TRUE(
      Eventually([&] { return value("up{job=\"wrong-password\"}") == "0"; }, absl::Seconds(30)));
  prometheus.Signal(SIGTERM);
  prometheus.Wait();
}

TEST_F(WebConfigTest, TheHealthCheckServesOnlyClientCertificatesItsCaSigned) {
  const std::string web = Write("web.yml", "tls_server_config:\n  cert_file: " + server_.cert +
                                               "\n  key_file: " + server_.key +
                                               "\n  client_auth_type: RequireAndVerifyClientCert\n"
                                               "  client_ca_file: " +
                                               pki_.ca_file() + "\n");
  const TestPki::Issued client = pki_.Issue("client", {.common_name = "prometheus"});
  const TestPki::Issued expired = pki_.Issue(
      "expired",
      {.common_name = "old", .valid_from = absl::Hours(-48), .valid_for = absl::Hours(1)});
  TempDir other_dir;
  TestPki other(other_dir.path().string(), "other");
  const TestPki::Issued stranger = other.Issue("stranger", {.common_name = "stranger"});
  EngineProcess engine(dir_.path(), "n1", 1);
  HttpDaemon check("healthcheck", dir_.path(), engine.unix_address, {"--web-config-file", web});
  ASSERT_GT(check.port(), 0) << check.process().Stderr();
  const std::string url = fmt::format("https://127.0.0.1:{}/status", check.port());
  const std::string ca = "--cacert " + pki_.ca_file() + " ";
  const auto with = [&](const TestPki::Issued& cert) {
    return CurlStatus(ca + "--cert " + cert.cert + " --key " + cert.key + " " + url);
  };
  ASSERT_TRUE(Eventually([&] { return with(client).code == "200"; })) << check.process().Stderr();
  for (const Curl& refused : {CurlStatus(ca + url), with(stranger), with(expired)}) {
    EXPECT_NE(refused.code, "200");
    EXPECT_NE(refused.exit_code, 0);
  }
  EXPECT_TRUE(check.process().WaitForStderr("TLS handshake from 127.0.0.1:"));
  const std::string log = check.process().Stderr();
  EXPECT_THAT(log, HasSubstr("peer did not return a certificate"));
  EXPECT_THAT(log, HasSubstr("certificate verify failed"));
}

TEST_F(WebConfigTest, ABadWebConfigIsOneLineAndExit2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tls_server_config:\n  cert_file: " + dir_.File("missing.pem") +
           "\n  key_file: " + server_.key + "\n",
       "cannot read"},
      {"tls_server_config:\n  cert_file: " + server_.cert + "\n  key_file: " + server_.key +
           "\n  client_auth_type: Maybe\n",
       "unknown 'Maybe'"},
      {"basic_auth_users:\n  prometheus: s3cret\n", "not a bcrypt hash"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string web = Write("bad.yml", text);
    for (const char* command : {"exporter", "healthcheck"}) {
      auto result = Vigil({command, "--listen", "127.0.0.1:0", "--engine", "127.0.0.1:1",
                           "--web-config-file", web});
      EXPECT_EQ(result.exit_code, 2) << command << ": " << result.err;
      EXPECT_THAT(result.err, HasSubstr(expected)) << command;
      EXPECT_THAT(result.err, HasSubstr(web)) << command;
    }
  }
  auto missing = Vigil({"exporter", "--web-config-file", dir_.File("nope.yml")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--web-config-file: cannot read"));
}

}  // namespace
}  // namespace vigil::testing
