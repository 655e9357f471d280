// End-to-end tests of the health verdict with the real binary: an injected XID 79 fails GPU 2
// and nothing else, the failure survives kill -9 and a restart on the same state dir (with its
// first-seen time), an operator clears it, a reboot clears it, and benign XIDs do not fail.
#include <signal.h>
#include <stdlib.h>

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

// `vigil health --json`, once the engine has ticked past `after_seq`.
nlohmann::json Health(const EngineProcess& engine, uint64_t after_seq, int* exit_code) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    auto result = Vigil({"health", "--json", "--engine", engine.unix_address});
    *exit_code = result.exit_code;
    auto json = nlohmann::json::parse(result.out);
    if (json["seq"].get<uint64_t>() > after_seq || absl::Now() > deadline) return json;
    absl::SleepFor(absl::Milliseconds(50));  // waiting for the engine's next tick
  }
}

uint64_t Seq(const EngineProcess& engine) {
  return nlohmann::json::parse(
             Vigil({"info", "--json", "--engine", engine.unix_address}).out)["seq"]
      .get<uint64_t>();
}

TEST(HealthCliTest, Xid79FailsGpu2SurvivesKillAndClears) {
  TempDir dir;
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4);
  ASSERT_FALSE(engine->tcp_address.empty()) << engine->process->Stderr();
  int exit_code = 0;
  auto healthy = Health(*engine, 0, &exit_code);
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(healthy["overall"], "PASS");

  ASSERT_EQ(Vigil({"inject", "xid", "--gpu", "2", "--xid", "79", "--engine", engine->unix_address})
                .exit_code,
            0);
  // Read once the injection is in: a tick that begins after the one running now includes it (a
  // seq read before the injection let a tick that did not pass for its verdict).
  const uint64_t before = 1 + Seq(*engine);
  auto failing = Health(*engine, before, &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_EQ(failing["overall"], "FAIL");
  for (const auto& gpu : failing["gpus"]) {
    EXPECT_EQ(gpu["status"], gpu["gpu"] == 2 ? "FAIL" : "PASS") << gpu.dump();
  }
  const auto driver = failing["gpus"][2]["systems"]["driver"];
  EXPECT_EQ(driver["status"], "FAIL");
  ASSERT_EQ(driver["incidents"].size(), 1u);
  EXPECT_EQ(driver["incidents"][0]["code"], "DCGM_FR_FALLEN_OFF_BUS");
  EXPECT_THAT(driver["incidents"][0]["message"].get<std::string>(),
              HasSubstr("fallen off the bus"));
  EXPECT_THAT(driver["incidents"][0]["action"].get<std::string>(), HasSubstr("restart"));
  EXPECT_EQ(driver["incidents"][0]["recommended_action"], "reboot");
  const std::string first_seen = driver["incidents"][0]["first_seen"];

  // kill -9, then a new engine on the same state dir: still FAIL, same first-seen time.
  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 4);
  ASSERT_FALSE(engine->tcp_address.empty()) << engine->process->Stderr();
  EXPECT_THAT(engine->process->Stderr(), HasSubstr("is still FAIL"));
  auto restarted = Health(*engine, 0, &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_EQ(restarted["gpus"][2]["status"], "FAIL");
  EXPECT_EQ(restarted["gpus"][2]["systems"]["driver"]["incidents"][0]["first_seen"], first_seen);
  EXPECT_EQ(restarted["gpus"][0]["status"], "PASS");

  // Clearing is privileged: over TCP without a token it is refused.
  auto refused = Vigil({"health", "clear", "--gpu", "2", "--engine", engine->tcp_address});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("clear over TCP is off"));
  auto cleared = Vigil({"health", "clear", "--gpu", "2", "--engine", engine->unix_address});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_THAT(cleared.out, HasSubstr("Cleared 1 incident(s) on GPU 2"));
  EXPECT_THAT(cleared.out, HasSubstr("now PASS"));
  auto after = Vigil({"health", "--engine", engine->unix_address});
  EXPECT_EQ(after.exit_code, 0) << after.out;
  // The clear is on the audit trail with who did it.
  const auto recent = Vigil(
      {"events", "--recent", "100", "--no-follow", "--json", "--engine", engine->unix_address});
  EXPECT_THAT(recent.out, HasSubstr("HEALTH_CLEARED"));
  EXPECT_THAT(recent.out, HasSubstr("uid "));
}

TEST(HealthCliTest, BenignXidDoesNotFail) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ASSERT_EQ(Vigil({"inject", "xid", "--gpu", "0", "--xid", "43", "--engine", engine.unix_address})
                .exit_code,
            0);
  // Read once the injection is in: a tick that begins after the one running now includes it (a
  // seq read before the injection let a tick that did not pass for its verdict).
  const uint64_t before = 1 + Seq(engine);
  int exit_code = 0;
  auto verdict = Health(engine, before, &exit_code);
  EXPECT_NE(verdict["overall"], "FAIL");
  EXPECT_EQ(exit_code, 0);
}

TEST(HealthCliTest, ARebootClearsPersistedFailures) {
  TempDir dir;
  const std::string boot_file = dir.File("boot_id");
  std::ofstream(boot_file) << "boot-one\n";
  setenv("VIGIL_BOOT_ID_FILE", boot_file.c_str(), 1);  // inherited by the engines below
  auto engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
  ASSERT_EQ(Vigil({"inject", "xid", "--gpu", "1", "--xid", "48", "--engine", engine->unix_address})
                .exit_code,
            0);
  // Read once the injection is in: a tick that begins after the one running now includes it (a
  // seq read before the injection let a tick that did not pass for its verdict).
  const uint64_t before = 1 + Seq(*engine);
  int exit_code = 0;
  EXPECT_EQ(Health(*engine, before, &exit_code)["gpus"][1]["status"], "FAIL");
  engine->process->Signal(SIGKILL);
  engine->process->Wait();
  std::ofstream(boot_file) << "boot-two\n";  // the node rebooted
  engine = std::make_unique<EngineProcess>(dir.path(), "n1", 2);
  EXPECT_THAT(engine->process->Stderr(), HasSubstr("the node rebooted"));
  EXPECT_EQ(Health(*engine, 0, &exit_code)["overall"], "PASS");
  unsetenv("VIGIL_BOOT_ID_FILE");
}

TEST(HealthCliTest, AGpuResetEndsAStickyFailureAndIsPrivilegedAndAudited) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  ASSERT_EQ(Vigil({"inject", "xid", "--gpu", "1", "--xid", "48", "--engine", engine.unix_address})
                .exit_code,
            0);
  // Read once the injection is in: a tick that begins after the one running now includes it (a
  // seq read before the injection let a tick that did not pass for its verdict).
  const uint64_t before = 1 + Seq(engine);
  int exit_code = 0;
  ASSERT_EQ(Health(engine, before, &exit_code)["gpus"][1]["status"], "FAIL");

  auto refused = Vigil({"reset-gpu", "--gpu", "1", "--engine", engine.tcp_address});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("reset over TCP is off"));
  auto wrong = Vigil(
      {"reset-gpu", "--gpu", "1", "--uuid", "GPU-not-this-one", "--engine", engine.unix_address});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("not GPU-not-this-one: not reset"));

  auto reset =
      Vigil({"reset-gpu", "--gpu", "1", "--reason", "drill", "--engine", engine.unix_address});
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  EXPECT_THAT(reset.out, HasSubstr("was reset (simulated)"));
  EXPECT_THAT(reset.out, HasSubstr("GPU 1 is now PASS"));
  EXPECT_EQ(Vigil({"health", "--engine", engine.unix_address}).exit_code, 0);
  const auto recent = Vigil(
      {"events", "--recent", "100", "--no-follow", "--json", "--engine", engine.unix_address});
  EXPECT_THAT(recent.out, HasSubstr("GPU_RESET"));
  EXPECT_THAT(recent.out, ::testing::ContainsRegex("reset requested by uid 0 \\(root\\) pid [0-9]+ "
                                                   "\\(drill\\)"));
  EXPECT_THAT(recent.out, HasSubstr("reset done in"));

  auto missing = Vigil({"reset-gpu", "--engine", engine.unix_address});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--gpu is required"));
}

TEST(HealthCliTest, TableAndBadInput) {
  TempDir dir;
  EngineProcess engine(dir.path(), "n1", 2);
  auto table = Vigil({"health", "--gpu", "1", "--engine", engine.unix_address});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  for (const char* column : {"GPU", "UUID", "STATUS", "PCIE", "MEMORY", "INFOROM", "THERMAL",
                             "POWER", "NVLINK", "DRIVER", "Overall: PASS"}) {
    EXPECT_THAT(table.out, HasSubstr(column));
  }
  auto bad_gpu = Vigil({"health", "--gpu", "7", "--engine", engine.unix_address});
  EXPECT_EQ(bad_gpu.exit_code, 2);
  EXPECT_THAT(bad_gpu.err, HasSubstr("GPU 7 does not exist"));
  auto bad_system =
      Vigil({"health", "clear", "--gpu", "0", "--system", "disk", "--engine", engine.unix_address});
  EXPECT_EQ(bad_system.exit_code, 2);
  auto unreachable = Vigil({"health", "--engine", "unix://" + dir.File("none.sock")});
  EXPECT_EQ(unreachable.exit_code, 2);
  EXPECT_THAT(unreachable.err, HasSubstr("unreachable"));
}

}  // namespace
}  // namespace vigil::testing
