// Tests of the drill's GETs (against a real local HTTP server) and of its scrape parse.
#include "drill/http_get.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace vigil::drill {
namespace {

using ::testing::HasSubstr;

TEST(HttpGetTest, AnswersErrorsAndSilenceAreToldApart) {
  httplib::Server server;
  server.Get("/metrics", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("up 1\n", "text/plain");
  });
  server.Get("/status", [](const httplib::Request&, httplib::Response& response) {
    response.status = 503;
    response.set_content("not ready: no verdict\nmore", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  const std::string base = "http://127.0.0.1:" + std::to_string(port);

  auto ok = HttpGet(base, "/metrics");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, "up 1\n");
  auto prefixed = HttpGet(base + "/", "/metrics");  // a trailing slash is no second one
  EXPECT_TRUE(prefixed.ok()) << prefixed.status();
  auto refused = HttpGet(base, "/status");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("HTTP 503: not ready: no verdict"));
  EXPECT_THAT(refused.status().message(), ::testing::Not(HasSubstr("more")));
  server.stop();
  serving.join();
  auto silent = HttpGet(base, "/metrics", absl::Seconds(1));
  EXPECT_EQ(silent.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(silent.status().message(), HasSubstr("GET " + base + "/metrics"));

  EXPECT_TRUE(CheckHttpUrl("--exporter", "https://10.0.0.7:9400").ok());
  EXPECT_THAT(CheckHttpUrl("--exporter", "10.0.0.7:9400").message(),
              HasSubstr("--exporter '10.0.0.7:9400': expected http://HOST:PORT"));
  EXPECT_FALSE(CheckHttpUrl("--exporter", "ftp://x").ok());
  EXPECT_FALSE(CheckHttpUrl("--exporter", "http://").ok());
}

TEST(ParseSamplesTest, ReadsTheNamedSeriesWithTheirLabels) {
  const std::string scrape =
      "# HELP vigil_engine_up ...\n"
      "# TYPE vigil_engine_up gauge\n"
      "vigil_engine_up 1\n"
      "vigil_engine_info{node=\"n1\",instance_id=\"abc\",version=\"0.1\",backend=\"sim\"} 1\n"
      "vigil_gpu_health_status{gpu=\"2\",UUID=\"GPU-2\",system=\"driver\"} 20\n"
      "vigil_gpu_health_status{gpu=\"2\",UUID=\"GPU-2\",system=\"pcie\"} -1\n"
      "DCGM_FI_DEV_XID_ERRORS{gpu=\"2\",err_msg=\"say \\\"hi\\\"\\\\\"} 79 1700000000000\n"
      "vigil_gpu_health_status{gpu=\"2\",broken 5\n"
      "vigil_gpu_health_status{gpu=\"3\"} NaNx\n"
      "other_metric{gpu=\"2\"} 7\n";
  const auto samples = ParseSamples(scrape, {"vigil_engine_up", "vigil_engine_info",
                                             "vigil_gpu_health_status", "DCGM_FI_DEV_XID_ERRORS"});
  ASSERT_EQ(samples.size(), 5u);
  EXPECT_EQ(samples[0].name, "vigil_engine_up");
  EXPECT_EQ(samples[0].value, 1);
  EXPECT_EQ(samples[1].labels.at("instance_id"), "abc");
  EXPECT_EQ(samples[2].labels.at("system"), "driver");
  EXPECT_EQ(samples[2].value, 20);
  EXPECT_EQ(samples[3].value, -1);
  EXPECT_EQ(samples[4].labels.at("err_msg"), "say \"hi\"\\");
  EXPECT_EQ(samples[4].value, 79) << "the timestamp after the value is not the value";
}

}  // namespace
}  // namespace vigil::drill
