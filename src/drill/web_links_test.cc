// Tests of the drill's web links against a local HTTP server that answers as the real links do
// — and as broken or foreign ones do: another engine's exporter, a status that is not an object,
// alerts pending and firing, an Alertmanager holding a silenced alert.
#include "drill/web_links.h"

#include <map>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace vigil::drill {
namespace {

using ::testing::HasSubstr;

// Serves whatever body a test sets for a path (404 for the others).
class CannedServer {
 public:
  CannedServer() {
    server_.Get(".*", [this](const httplib::Request& request, httplib::Response& response) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = bodies_.find(request.path);
      if (it == bodies_.end()) {
        response.status = 404;
        return;
      }
      response.set_content(it->second, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~CannedServer() {
    server_.stop();
    thread_.join();
  }
  void Set(const std::string& path, std::string body) {
    std::lock_guard<std::mutex> lock(mutex_);
    bodies_[path] = std::move(body);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::map<std::string, std::string> bodies_;
};

Target TheTarget() {
  return Target{.node = "n1", .instance_id = "abc", .gpu = 2, .uuid = "GPU-2", .xid = 79};
}

TEST(WebLinksTest, TheExporterFollowsItsEngineAndShowsTheStatus) {
  CannedServer server;
  auto link = NewExporterLink(server.url());
  Target target = TheTarget();
  server.Set(
      "/metrics",
      "vigil_engine_up 1\n"
      "vigil_engine_info{node=\"n2\",instance_id=\"xyz\",version=\"0.1\",backend=\"sim\"} 1\n"
      "vigil_gpu_health_status{gpu=\"2\",UUID=\"GPU-2\",system=\"driver\"} 0\n");
  const absl::Status foreign = link->Preflight(target, false);
  EXPECT_THAT(foreign.message(),
              HasSubstr("follows engine xyz of node n2, not this node's engine (abc of node n1)"));
  server.Set(
      "/metrics",
      "vigil_engine_up 1\n"
      "vigil_engine_info{node=\"n1\",instance_id=\"abc\",version=\"0.1\",backend=\"sim\"} 1\n"
      "vigil_engine_seq 41\n"
      "vigil_gpu_health_status{gpu=\"2\",UUID=\"GPU-2\",system=\"driver\",injected=\"true\"} 20\n"
      "vigil_gpu_health_status{gpu=\"2\",UUID=\"GPU-2\",system=\"pcie\"} 0\n"
      "DCGM_FI_DEV_XID_ERRORS{gpu=\"2\",UUID=\"GPU-2\"} 48\n");
  EXPECT_TRUE(link->Preflight(target, false).ok());
  target.fault = v1::HEALTH_STATUS_FAIL;
  auto seen = link->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_FALSE(seen->shown) << "the XID series holds another code";
  EXPECT_EQ(seen->seq, 41u);
  EXPECT_THAT(seen->detail, HasSubstr("DCGM_FI_DEV_XID_ERRORS 48"));
  server.Set("/metrics", "vigil_engine_up 0\n");
  seen = link->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_FALSE(seen->shown);
  EXPECT_THAT(seen->detail, HasSubstr("vigil_engine_up 0"));
  server.Set("/metrics", "not a scrape at all {{{\n\n");
  EXPECT_FALSE(link->Preflight(target, false).ok());
}

TEST(WebLinksTest, AHealthCheckThatAnswersNonsenseIsAProblemNotACrash) {
  CannedServer server;
  auto link = NewHealthcheckLink(server.url());
  const Target target = TheTarget();
  for (const char* body : {"[1,2,3]", "\"just a string\"", "{\"engine\":[],\"gpus\":{}}",
                           "{\"fresh\":\"yes\",\"gpus\":[{\"gpu\":\"2\"}]}", "not json"}) {
    server.Set("/status", body);
    EXPECT_FALSE(link->Preflight(target, false).ok()) << body;
    auto seen = link->Look(target, Want::kFault, {});
    EXPECT_TRUE(!seen.ok() || !seen->shown) << body;
  }
  server.Set("/status",
             R"({"fresh":true,"seq":7,"engine":{"instance_id":"abc","node":"n1"},
                 "gpus":[{"gpu":2,"status":"FAIL"}]})");
  EXPECT_TRUE(link->Preflight(target, false).ok());
  auto seen = link->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->shown);
  EXPECT_EQ(seen->seq, 7u);
}

TEST(WebLinksTest, AlertsAboutTheNodeAndGpuFireOrAreHeld) {
  CannedServer server;
  const Target target = TheTarget();
  auto prometheus = NewPrometheusLink(server.url(), {"VigilGpuHealthFail"});
  server.Set("/api/v1/alerts", R"({"status":"success","data":{"alerts":[
      {"labels":{"alertname":"VigilGpuHealthFail","node":"n1","gpu":"2"},"state":"pending",
       "activeAt":"2026-12-01T00:00:00Z"},
      {"labels":{"alertname":"VigilGpuHealthFail","node":"n1","gpu":"3"},"state":"firing"},
      {"labels":{"alertname":"Other","node":"n1","gpu":"2"},"state":"firing"}]}})");
  EXPECT_TRUE(prometheus->Preflight(target, false).ok())
      << "another GPU's alert, and an alert not named, are not this drill's";
  auto seen = prometheus->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_FALSE(seen->shown);
  EXPECT_THAT(seen->detail, HasSubstr("VigilGpuHealthFail{gpu=\"2\",node=\"n1\"} pending since"));
  server.Set("/api/v1/alerts", R"({"data":{"alerts":[
      {"labels":{"alertname":"VigilGpuHealthFail","node":"n1","gpu":"2"},"state":"firing"}]}})");
  EXPECT_THAT(prometheus->Preflight(target, false).message(), HasSubstr("already has"));
  seen = prometheus->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->shown);
  // Nothing, and no rule of that name: the detail says so.
  server.Set("/api/v1/alerts", R"({"data":{"alerts":[]}})");
  server.Set("/api/v1/rules", R"({"data":{"groups":[{"rules":[{"name":"Other"}]}]}})");
  seen = prometheus->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_THAT(seen->detail, HasSubstr("Prometheus has no alerting rule named VigilGpuHealthFail"));
  server.Set("/api/v1/alerts", R"({"data":"nonsense"})");
  seen = prometheus->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_FALSE(seen->shown);

  auto alertmanager = NewAlertmanagerLink(server.url(), {});
  server.Set("/api/v2/alerts", R"([
      {"labels":{"alertname":"VigilGpuHealthFail","node":"n1","gpu":"2","injected":"true"},
       "status":{"state":"suppressed"},"receivers":[{"name":"drill"}]}])");
  seen = alertmanager->Look(target, Want::kFault, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->shown) << "a silenced alert is still held";
  EXPECT_THAT(seen->detail, HasSubstr("to drill suppressed"));
  server.Set("/api/v2/alerts", "[]");
  seen = alertmanager->Look(target, Want::kRecovered, {});
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->shown);
}

}  // namespace
}  // namespace vigil::drill
