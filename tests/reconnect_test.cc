// End-to-end test of the way back after an engine restart, with the real binaries: the engine is
// killed (-9), stays away long enough for every client's backoff to grow, and starts again on the
// same address; the exporter and the health check, left running, serve the new instance's data
// soon after it is up — on the Unix socket and on TCP. The bound here is generous (the goal, 1 s
// after the new engine's first tick, is measured by `make bench`: BM_ReconnectAfterRestart).
#include <signal.h>

#include "absl/time/clock.h"
#include "daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

std::string InstanceOf(const std::string& engine) {
  const CommandResult info = Vigil({"info", "--json", "--engine", engine});
  if (info.exit_code != 0) return "";
  return nlohmann::json::parse(info.out)["instance_id"];
}

class ReconnectTest : public ::testing::TestWithParam<bool> {};

TEST_P(ReconnectTest, ClientsServeTheNewEngineSoonAfterARestart) {
  const bool tcp = GetParam();
  TempDir dir;
  const std::vector<std::string> listen = {"--listen", "127.0.0.1:" + std::to_string(FreePort())};
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2, listen);
  const std::string address = tcp ? engine->tcp_address : engine->unix_address;
  ASSERT_FALSE(address.empty()) << engine->process->Stderr();
  HttpDaemon exporter("exporter", dir.path(), address, {"--node-name", "n1"});
  HttpDaemon healthcheck("healthcheck", dir.path(), address, {"--node-name", "n1"});
  ASSERT_GT(exporter.port(), 0) << exporter.process().Stderr();
  ASSERT_GT(healthcheck.port(), 0) << healthcheck.process().Stderr();
  const std::string first = InstanceOf(address);
  ASSERT_FALSE(first.empty());
  auto serves = [](const HttpDaemon& daemon, const std::string& path, const std::string& text) {
    return daemon.Get(path).find(text) != std::string::npos;
  };
  ASSERT_TRUE(Eventually([&] { return serves(exporter, "/metrics", first); }));
  ASSERT_TRUE(Eventually([&] { return serves(healthcheck, "/status", first); }));

  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  ASSERT_TRUE(Eventually([&] { return serves(exporter, "/metrics", "vigil_engine_up 0"); }));
  // Part of the scenario, not a wait for something to happen: the engine stays away for 4 s,
  // long enough for reconnect backoffs that are not capped for a local engine to pass 2 s.
  absl::SleepFor(absl::Seconds(4));

  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2, listen);
  const absl::Time ready = absl::Now();
  const std::string second = InstanceOf(address);
  ASSERT_FALSE(second.empty()) << engine->process->Stderr();
  ASSERT_NE(second, first);
  // Generous against a loaded CI machine (the sanitizer build: the goal is 1 s after the first
  // tick), and under the 2.3 s + up to 2 s that the clients' stacked backoffs (their own, 100 ms
  // doubling to 5 s, and gRPC's, to 2 s) left after 4 s away before they were tuned for a
  // node-local engine.
  const absl::Duration bound = absl::Milliseconds(2500);
  EXPECT_TRUE(Eventually([&] { return serves(exporter, "/metrics", second); }, bound,
                         absl::Milliseconds(20)))
      << "exporter: " << exporter.process().Stderr();
  EXPECT_TRUE(Eventually([&] { return serves(healthcheck, "/status", second); }, bound,
                         absl::Milliseconds(20)))
      << "healthcheck: " << healthcheck.process().Stderr();
  EXPECT_LT(absl::Now() - ready, bound);
}

INSTANTIATE_TEST_SUITE_P(Transports, ReconnectTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Tcp" : "UnixSocket"; });

}  // namespace
}  // namespace vigil::testing
