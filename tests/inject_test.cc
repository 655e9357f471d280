// End-to-end tests of fault injection with the real binary: the injected value reaches
// subscribers flagged and goes away on time, authorisation per transport and user, the audit
// trail on `vigil events`, list and clear, scenarios, and restarts dropping injections.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process.h"
#include "testing/temp_dir.h"

namespace vigil::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kNobody = 65534;

std::string WriteFile(const TempDir& dir, const std::string& name, const std::string& text,
                      mode_t mode = 0644) {
  const std::string path = dir.File(name);
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(InjectTest, InjectedValueReachesDmonFlaggedThenTheRealValueReturns) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  Process dmon({VigilBinary(), "dmon", "-e", "155", "-i", "1", "-c", "7", "--json", "--engine",
                engine.unix_address},
               dir.path());
  ASSERT_TRUE(Eventually([&] { return !dmon.Stdout().empty(); })) << dmon.Stderr();  // streaming
  auto injected = Vigil({"inject", "field", "--gpu", "1", "--field", "DCGM_FI_DEV_POWER_USAGE",
                         "--value", "900", "--for", "3s", "--engine", engine.unix_address});
  ASSERT_EQ(injected.exit_code, 0) << injected.err;
  EXPECT_THAT(injected.out, HasSubstr("inj-1: GPU 1 DCGM_FI_DEV_POWER_USAGE set to 900"));
  ASSERT_EQ(dmon.Wait(absl::Seconds(30)), 0) << dmon.Stderr();
  int flagged = 0, real_after = 0;
  for (const auto& tick : JsonLines(dmon.Stdout())) {
    const auto& value = tick["values"][0];
    if (value["injected"].get<bool>()) {
      ++flagged;
      EXPECT_EQ(value["value"].get<double>(), 900.0);
      EXPECT_EQ(real_after, 0) << "the injected value came back after the real one";
    } else if (flagged > 0) {
      ++real_after;
      EXPECT_NE(value["value"].get<double>(), 900.0);
    }
  }
  EXPECT_GE(flagged, 2);
  EXPECT_LE(flagged, 4);  // 3 s at one tick a second
  EXPECT_GE(real_after, 1);
}

TEST(InjectTest, TcpNeedsTheTokenAndTheUnixSocketNeedsRoot) {
  TempDir dir;
  const std::string token = WriteFile(dir, "token", "0123456789abcdef0123456789abcdef\n", 0600);
  const std::string wrong = WriteFile(dir, "wrong", "fedcba9876543210fedcba9876543210\n", 0600);
  // The token's checks; over plain TCP by the operator's choice (TLS: tests/tls_test.cc).
  EngineProcess engine(dir.path(), "n1", 2,
                       {"--inject-token-file", token, "--insecure-token-over-plaintext"});
  ASSERT_FALSE(engine.tcp_address.empty()) << engine.process->Stderr();
  const std::vector<std::string> inject = {
      "inject", "field",   "--gpu", "0",        "--field",
      "150",    "--value", "95",    "--engine", engine.tcp_address};

  auto without = Vigil(inject);
  EXPECT_EQ(without.exit_code, 2);
  EXPECT_THAT(without.err, HasSubstr("or the engine's injection token: pass --token-file"));
  std::vector<std::string> with_wrong = inject;
  with_wrong.insert(with_wrong.end(), {"--token-file", wrong});
  EXPECT_EQ(Vigil(with_wrong).exit_code, 2);
  std::vector<std::string> with_token = inject;
  with_token.insert(with_token.end(), {"--token-file", token});
  auto allowed = Vigil(with_token);
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.out, HasSubstr("by token from ipv4:127.0.0.1:"));

  // Read-only calls stay open to everyone.
  EXPECT_EQ(Vigil({"inject", "list", "--engine", engine.tcp_address}).exit_code, 0);

  if (geteuid() != 0) GTEST_SKIP() << "checking other users needs root";
  chmod(dir.path().c_str(), 0755);  // let `nobody` reach the socket
  auto as_nobody = Vigil(
      {"inject", "xid", "--gpu", "0", "--xid", "79", "--engine", engine.unix_address}, kNobody);
  EXPECT_EQ(as_nobody.exit_code, 2);
  EXPECT_THAT(as_nobody.err, HasSubstr("uid 65534"));
  EXPECT_THAT(as_nobody.err, HasSubstr("injection.allowed_uids"));
  EXPECT_EQ(Vigil({"discovery", "--engine", engine.unix_address}, kNobody).exit_code, 0);
  auto as_root =
      Vigil({"inject", "xid", "--gpu", "0", "--xid", "79", "--engine", engine.unix_address});
  EXPECT_EQ(as_root.exit_code, 0) << as_root.err;
  EXPECT_THAT(as_root.out, HasSubstr("by uid 0 (root)"));
}

TEST(InjectTest, TcpInjectionIsOffWithoutATokenFile) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 1);
  auto refused =
      Vigil({"inject", "xid", "--gpu", "0", "--xid", "79", "--engine", engine.tcp_address});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("inject over TCP is off on this engine"));
}

TEST(InjectTest, ConfiguredUidsMayInjectOverTheUnixSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a command as another user";
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  const std::string config = WriteFile(dir, "engine.yaml", "injection:\n  allowed_uids: [65534]\n");
  EngineProcess engine(dir.path(), "n1", 1, {"--config", config});
  auto allowed = Vigil(
      {"inject", "xid", "--gpu", "0", "--xid", "43", "--engine", engine.unix_address}, kNobody);
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.out, HasSubstr("uid 65534 (nobody)"));
}

TEST(InjectTest, ListClearAndTheAuditTrail) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 4);
  // Asking for recent events too, so nothing is missed while the stream connects.
  Process events(
      {VigilBinary(), "events", "--json", "--recent", "100", "--engine", engine.unix_address},
      dir.path());
  ASSERT_EQ(Vigil({"inject", "field", "--gpu", "1", "--field", "DCGM_FI_DEV_GPU_TEMP", "--value",
                   "97", "--for", "10m", "--engine", engine.unix_address})
                .exit_code,
            0);
  ASSERT_EQ(Vigil({"inject", "field", "--gpu", "2", "--field", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                   "--add", "3", "--engine", engine.unix_address})
                .exit_code,
            0);
  ASSERT_EQ(Vigil({"inject", "xid", "--gpu", "3", "--xid", "79", "--engine", engine.unix_address})
                .exit_code,
            0);

  auto list = Vigil({"inject", "list", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(list.exit_code, 0);
  const auto injections = nlohmann::json::parse(list.out)["injections"];
  ASSERT_EQ(injections.size(), 2u);  // an XID is an event, not something that stays active
  EXPECT_EQ(injections[0]["id"], "inj-1");
  EXPECT_EQ(injections[0]["field"], "DCGM_FI_DEV_GPU_TEMP");
  EXPECT_EQ(injections[0]["value"], 97.0);
  EXPECT_EQ(injections[0]["uid"], static_cast<int>(geteuid()));
  EXPECT_EQ(injections[1]["mode"], "add");
  auto text = Vigil({"inject", "list", "--engine", engine.unix_address});
  for (const char* column : {"ID", "GPU", "FIELD/XID", "VALUE", "WHO", "STARTED", "EXPIRES"}) {
    EXPECT_THAT(text.out, HasSubstr(column));
  }

  auto missing = Vigil({"inject", "clear", "inj-99", "--engine", engine.unix_address});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("no active injection inj-99"));
  auto clear = Vigil({"inject", "clear", "--all", "--engine", engine.unix_address});
  ASSERT_EQ(clear.exit_code, 0) << clear.err;
  EXPECT_THAT(clear.out, HasSubstr("inj-1"));
  EXPECT_THAT(clear.out, HasSubstr("inj-2"));
  EXPECT_EQ(
      nlohmann::json::parse(
          Vigil({"inject", "list", "--json", "--engine", engine.unix_address}).out)["injections"]
          .size(),
      0u);

  // The audit trail: who injected what, and who cleared it. The health transitions these
  // faults cause interleave at tick boundaries, whose timing is not this test's business.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::vector<nlohmann::json> seen;
  while (absl::Now() < deadline) {
    seen.clear();
    for (auto& event : JsonLines(events.Stdout())) {
      if (event["kind"] != "HEALTH_TRANSITION") seen.push_back(std::move(event));
    }
    if (seen.size() >= 5) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(seen.size(), 5u) << events.Stdout();
  EXPECT_EQ(seen[0]["kind"], "INJECTION_STARTED");
  EXPECT_THAT(seen[0]["message"].get<std::string>(), HasSubstr("DCGM_FI_DEV_GPU_TEMP = 97"));
  EXPECT_THAT(seen[0]["who"].get<std::string>(), HasSubstr("uid "));
  EXPECT_EQ(seen[2]["kind"], "XID");
  EXPECT_EQ(seen[2]["xid"], 79);
  EXPECT_TRUE(seen[2]["injected"].get<bool>());
  EXPECT_EQ(seen[3]["kind"], "INJECTION_CLEARED");
  EXPECT_EQ(seen[4]["kind"], "INJECTION_CLEARED");
  events.Signal(SIGTERM);
}

TEST(InjectTest, ScenarioRunsInTheEngineEvenAfterTheClientLeaves) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 4);
  const std::string scenario = WriteFile(dir, "drill.yaml", R"(name: drill
steps:
  - at: 0s
    inject: {gpu: 2, field: DCGM_FI_DEV_POWER_USAGE, value: 950, for: 1m}
  - at: 2s
    xid: {gpu: 2, xid: 79}
)");
  auto started = Vigil({"inject", "scenario", scenario, "--engine", engine.unix_address});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  EXPECT_THAT(started.out, HasSubstr("scn-1: scenario 'drill' started"));
  // The CLI has exited; the engine carries on.
  auto dmon = Vigil(
      {"dmon", "-e", "155,230", "-i", "2", "-c", "4", "--json", "--engine", engine.unix_address});
  ASSERT_EQ(dmon.exit_code, 0) << dmon.err;
  const auto last = JsonLines(dmon.out).back()["values"];
  EXPECT_EQ(last[0]["value"], 950.0);
  EXPECT_EQ(last[1]["value"], 79);
  EXPECT_TRUE(last[1]["injected"].get<bool>());

  const std::string bad = WriteFile(dir, "bad.yaml",
                                    "steps:\n  - at: 0s\n    xid: {gpu: 2, xid: 79}\n"
                                    "  - at: 1s\n    inject: {gpu: 2, field: DCGM_FI_DEV_PWR, "
                                    "value: 1}\n");
  auto refused = Vigil({"inject", "scenario", bad, "--engine", engine.unix_address});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("bad.yaml:5: steps[1].inject.field: unknown field"));
  auto list = nlohmann::json::parse(
      Vigil({"inject", "list", "--json", "--engine", engine.unix_address}).out);
  EXPECT_EQ(list["scenarios"].size(), 1u);  // the bad one never started
}

TEST(InjectTest, BadInjectionRequestsAreRefusedBeforeAnythingChanges) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"inject", "field", "--gpu", "5", "--field", "150", "--value", "1"}, "GPU 5 does not exist"},
      {{"inject", "field", "--gpu", "0", "--field", "DCGM_FI_NOPE", "--value", "1"},
       "unknown field"},
      {{"inject", "field", "--gpu", "0", "--field", "150", "--value", "hot"}, "not a number"},
      {{"inject", "field", "--gpu", "0", "--field", "150", "--value", "80.5"}, "takes an integer"},
      {{"inject", "field", "--gpu", "0", "--field", "54", "--value", "1"}, "string field"},
      {{"inject", "field", "--gpu", "0", "--field", "150", "--value", "1", "--for", "-5s"},
       "--for"},
      {{"inject", "field", "--gpu", "0", "--field", "150"}, "exactly one of --value"},
      {{"inject", "field", "--gpu", "0", "--field", "150", "--add", "3"},
       "not a cumulative counter"},
      {{"inject", "field", "--gpu", "0", "--field", "156", "--value", "0"}, "go backwards"},
      {{"inject", "xid", "--gpu", "0", "--xid", "0"}, "--xid"},
      {{"inject", "scenario", dir.File("missing.yaml")}, "cannot read"},
      {{"inject", "clear"}, "an id"},
  };
  for (auto [args, expected] : cases) {
    args.insert(args.end(), {"--engine", engine.unix_address});
    auto result = Vigil(args);
    EXPECT_EQ(result.exit_code, 2) << expected << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr(expected));
  }
  auto list = nlohmann::json::parse(
      Vigil({"inject", "list", "--json", "--engine", engine.unix_address}).out);
  EXPECT_TRUE(list["injections"].empty());
}

TEST(InjectTest, RestartDropsInjectionsAndSaysSo) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 1);
  ASSERT_EQ(Vigil({"inject", "field", "--gpu", "0", "--field", "150", "--value", "99", "--engine",
                   engine->unix_address})
                .exit_code,
            0);
  engine->process->Signal(SIGTERM);
  ASSERT_EQ(engine->process->Wait(), 0);
  EXPECT_THAT(engine->process->Stderr(), HasSubstr("dropping 1 active injection"));
  EngineProcess restarted(dir.path(), "n1", 1);
  EXPECT_THAT(restarted.process->Stderr(), HasSubstr("not persisted"));
  auto list = nlohmann::json::parse(
      Vigil({"inject", "list", "--json", "--engine", restarted.unix_address}).out);
  EXPECT_TRUE(list["injections"].empty());
}

}  // namespace
}  // namespace vigil::testing
