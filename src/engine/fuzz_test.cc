// Fuzz target of the engine's config file (testing/fuzz.h): the shipped engine.yaml mutated and
// random YAML. For any input: a config or one error that names the file and the line, never a
// crash (ASan in `make fuzz`) or an exception out of yaml-cpp.
#include "testing/fuzz.h"

#include "common/files.h"
#include "engine/config.h"
#include "gtest/gtest.h"
#include "testing/paths.h"

namespace vigil {
namespace {

TEST(EngineFuzzTest, ConfigFilesParseOrNameTheirProblem) {
  const absl::StatusOr<std::string> shipped =
      ReadFile(testing::SourceDir() + "/deploy/config/engine.yaml");
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  const std::vector<std::string> seeds = {*shipped, "tick_interval: 500ms\nhistory_max_age: 2h\n",
                                          "health:\n  xids:\n    79: {severity: fail}\n    13: "
                                          "{severity: count, count: 3, window: 1h}\n",
                                          "fields:\n  - {id: 150, interval: 5s}\n",
                                          "network:\n  counter_interval: 10s\n  ports: {mlx5_0/1: "
                                          "[0]}\n  state: {fail_after: 0s}\n  counters:\n    "
                                          "symbol_error_ber: {over: 60}\n    rnr: {counter: "
                                          "rnr_nak_retry_err, over: 1, per: 1s}\n"};
  const testing::FuzzRun run = testing::Fuzz(
      "engine config", seeds, ":- \n{}[],#0123456789smh._abcdefghiklmnoprstuvwxyz\"'", 20'000,
      [](const std::string& input) {
        const absl::StatusOr<EngineConfig> config = ParseEngineConfig(input, "engine.yaml");
        if (config.ok()) return true;
        EXPECT_EQ(config.status().message().substr(0, 11), "engine.yaml") << input;
        return false;
      });
  EXPECT_GT(run.accepted, 0u);
}

}  // namespace
}  // namespace vigil
