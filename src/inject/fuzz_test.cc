// Fuzz target of scenario files (testing/fuzz.h): the shipped scenarios mutated and random YAML.
// For any input: a plan within the limits, or one error that names the file, never a crash
// (ASan in `make fuzz`) or an exception out of yaml-cpp.
#include "testing/fuzz.h"

#include <filesystem>

#include "common/files.h"
#include "gtest/gtest.h"
#include "inject/scenario.h"
#include "testing/paths.h"

namespace vigil {
namespace {

TEST(InjectFuzzTest, ScenariosParseWithinTheLimitsOrNameTheirProblem) {
  std::vector<std::string> seeds;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::SourceDir() + "/scenarios")) {
    const absl::StatusOr<std::string> text = ReadFile(entry.path().string());
    ASSERT_TRUE(text.ok()) << text.status();
    seeds.push_back(*text);
  }
  ASSERT_FALSE(seeds.empty());
  const ScenarioLimits limits{.gpu_count = 8, .max_steps = 50};
  const testing::FuzzRun run = testing::Fuzz(
      "scenario", seeds, ":- \n{}[],#0123456789smh._abcdefghiklmnoprstuvwxyz\"'", 20'000,
      [&](const std::string& input) {
        const absl::StatusOr<ScenarioPlan> plan = ParseScenario(input, "s.yaml", limits);
        if (!plan.ok()) {
          EXPECT_EQ(plan.status().message().substr(0, 6), "s.yaml") << input;
          return false;
        }
        EXPECT_FALSE(plan->steps.empty()) << input;
        EXPECT_LE(plan->steps.size(), limits.max_steps) << input;
        return true;
      });
  EXPECT_GT(run.accepted, 0u);
}

}  // namespace
}  // namespace vigil
