// End-to-end test of the Grafana dashboard (deploy/grafana/vigil.json): a real Prometheus scrapes
// the real exporter on simulated GPUs, and every query of the dashboard — its variables', then
// each panel's with the variables filled in as Grafana would — runs against it and must return
// data without error, and each legend names every series. A panel that errors, shows "No data"
// on a healthy node or a blank legend fails here; two exporters, one per --compat release, feed it.
#include <fstream>
#include <regex>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon.h"
#include "dgx_sysfs.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/eventually.h"
#include "testing/paths.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using nlohmann::json;

// An instant query; its result array, or a string saying why there is none.
struct QueryResult {
  json result = json::array();
  std::string error;
};
QueryResult Query(httplib::Client& prometheus, const std::string& expr) {
  httplib::Params params{{"query", expr}};
  auto response = prometheus.Post("/api/v1/query", params);
  if (!response) return {.error = "no answer from Prometheus"};
  const json body = json::parse(response->body, nullptr, false);
  if (body.is_discarded()) return {.error = "not JSON: " + response->body};
  if (body.value("status", "") != "success") {
    return {.error = body.value("errorType", "") + ": " + body.value("error", "")};
  }
  return {.result = body["data"]["result"]};
}

// Fills Grafana's variables in `expr` as it would: $name and ${name}, the built-in intervals.
std::string Fill(std::string expr, const std::map<std::string, std::string>& values) {
  for (const auto& [name, value] : values) {
    for (const std::string& form : {"${" + name + "}", "$" + name}) {
      for (size_t at = expr.find(form); at != std::string::npos; at = expr.find(form, at)) {
        expr.replace(at, form.size(), value);
        at += value.size();
      }
    }
  }
  return expr;
}

// Whether every {{name}} of `legend` is a label the series has: Grafana writes a missing or empty
// label as its bare name ("hostname GPU 0"), which no one reading the legend should see.
bool LegendNamesEverything(const std::string& legend, const json& labels) {
  static const std::regex kName(R"(\{\{\s*([^{}]+?)\s*\}\})");
  for (auto name = std::sregex_iterator(legend.begin(), legend.end(), kName);
       name != std::sregex_iterator(); ++name) {
    const std::string label = (*name)[1].str();
    if (!labels.contains(label) || labels[label].get<std::string>().empty()) return false;
  }
  return true;
}

TEST(DashboardTest, EveryPanelQueryReturnsDataFromARealPrometheus) {
  std::ifstream file(SourceDir() + "/deploy/grafana/vigil.json");
  ASSERT_TRUE(file.good());
  const json dashboard = json::parse(file, nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded()) << "deploy/grafana/vigil.json is not JSON";

  TempDir dir;
  // A node with NIC ports, so the network row has data too.
  FakeSysfs sysfs(dir.File("sys"));
  LayOutDgx(&sysfs);
  EngineProcess engine(dir.path(), "n1", 2, {"--sysfs-root", sysfs.root()});
  // Two exporters, one for each release --compat matches: the panels and their legends must work
  // with either spelling of the node label.
  HttpDaemon exporter("exporter", dir.path(), engine.unix_address,
                      {"--node-name", "node-a", "--compat", "4.8.2"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  HttpDaemon newer("exporter", dir.path(), engine.unix_address,
                   {"--node-name", "node-b", "--compat", "4.8.3"});
  ASSERT_GT(newer.port(), 0) << newer.process().Stderr();
  const int port = FreePort();
  const std::string config = dir.File("prometheus.yml");
  std::ofstream(config) << fmt::format(
      "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: vigil\n"
      "    static_configs:\n      - targets: ['127.0.0.1:{}', '127.0.0.1:{}']\n",
      exporter.port(), newer.port());
  Process prometheus(
      {"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.File("tsdb"),
       fmt::format("--web.listen-address=127.0.0.1:{}", port)},
      dir.path());
  httplib::Client client("127.0.0.1", port);
  // Enough scrapes for the rate panels' windows to hold two samples.
  ASSERT_TRUE(Eventually(
      [&] {
        const QueryResult counts = Query(client, "count_over_time(vigil_engine_up[30s])");
        if (counts.result.size() != 2) return false;
        for (const json& series : counts.result) {
          if (std::stoi(series["value"][1].get<std::string>()) < 4) return false;
        }
        return true;
      },
      absl::Seconds(40)))
      << prometheus.Stderr();

  // The variables, in order: each query's values fill the next ones.
  std::map<std::string, std::string> values = {{"__rate_interval", "30s"}, {"__interval", "15s"}};
  int variables = 0;
  for (const json& variable : dashboard["templating"]["list"]) {
    if (variable["type"] != "query") continue;
    ++variables;
    const std::string definition = Fill(variable["query"]["query"], values);
    std::smatch match;
    ASSERT_TRUE(
        std::regex_match(definition, match, std::regex(R"(label_values\((.*),\s*([a-zA-Z_]+)\))")))
        << variable["name"] << ": " << definition;
    const QueryResult found = Query(client, match[1].str());
    ASSERT_TRUE(found.error.empty()) << variable["name"] << ": " << found.error;
    std::set<std::string> labels;
    for (const json& series : found.result) {
      if (series["metric"].contains(match[2].str()))
        labels.insert(series["metric"][match[2].str()]);
    }
    ASSERT_FALSE(labels.empty()) << variable["name"] << ": no values from " << definition;
    // All selected, as the dashboard's "All" does for a regex matcher.
    values[variable["name"]] = absl::StrJoin(labels, "|");
  }
  EXPECT_EQ(variables, 2);

  int queries = 0;
  const std::function<void(const json&)> check = [&](const json& panels) {
    for (const json& panel : panels) {
      if (panel.contains("panels")) check(panel["panels"]);
      if (!panel.contains("targets")) continue;
      for (const json& target : panel["targets"]) {
        const std::string expr = Fill(target["expr"], values);
        const QueryResult answer = Query(client, expr);
        ++queries;
        EXPECT_TRUE(answer.error.empty()) << panel["title"] << ": " << expr << ": " << answer.error;
        EXPECT_FALSE(answer.result.empty()) << panel["title"] << ": no data for " << expr;
        if (!target.contains("legendFormat")) continue;
        for (const json& series : answer.result) {
          EXPECT_TRUE(LegendNamesEverything(target["legendFormat"], series["metric"]))
              << panel["title"] << ": legend " << target["legendFormat"] << " of "
              << series["metric"].dump();
        }
      }
    }
  };
  check(dashboard["panels"]);
  EXPECT_GE(queries, 21);  // every panel of the dashboard was checked
  prometheus.Signal(SIGTERM);
  prometheus.Wait();
}

}  // namespace
}  // namespace vigil::testing
