// Tests for engine config parsing: defaults, overrides, and each kind of bad input.
#include "engine/config.h"

#include "common/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/paths.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

TEST(EngineConfigTest, EmptyMeansDefaults) {
  auto config = ParseEngineConfig("", "e.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tick_interval, absl::Seconds(1));
  EXPECT_EQ(config->history_max_age, absl::Hours(24));
  EXPECT_TRUE(config->interval_overrides.empty());
  EXPECT_EQ(config->EffectiveGpuReadTimeout(), absl::Milliseconds(500));
}

// The shipped config shows every setting at its default: it parses, and its network section is
// the built-in policy.
TEST(EngineConfigTest, TheShippedConfigIsTheDefaults) {
  const absl::StatusOr<std::string> shipped =
      ReadFile(testing::SourceDir() + "/deploy/config/engine.yaml");
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  auto config = ParseEngineConfig(*shipped, "deploy/config/engine.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  const NetworkPolicy defaults = DefaultNetworkPolicy();
  EXPECT_EQ(config->network.state_interval, defaults.state_interval);
  EXPECT_EQ(config->network.counter_interval, defaults.counter_interval);
  EXPECT_EQ(config->network.fail_after, defaults.fail_after);
  EXPECT_EQ(config->network.training_fail_after, defaults.training_fail_after);
  EXPECT_EQ(config->network.recovery_window, defaults.recovery_window);
  EXPECT_EQ(config->network.rate_degraded, defaults.rate_degraded);
  EXPECT_EQ(config->network.counters.size(), defaults.counters.size());
  EXPECT_EQ(config->tick_interval, EngineConfig{}.tick_interval);
}

TEST(EngineConfigTest, ReadsEverySetting) {
  auto config = ParseEngineConfig(R"(
sampling:
  tick_interval: 100ms
  history_max_age: 2h
  gpu_read_timeout: 80ms
  intervals:
    DCGM_FI_DEV_POWER_USAGE: 500ms
    310: 10s
subscribers:
  queue_depth: 4
sim:
  mig: ["0:1g.10gb,1g.10gb,2g.20gb", "1:7g.80gb"]
)",
                                  "e.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tick_interval, absl::Milliseconds(100));
  EXPECT_EQ(config->history_max_age, absl::Hours(2));
  EXPECT_EQ(config->interval_overrides.at(155), absl::Milliseconds(500));
  EXPECT_EQ(config->interval_overrides.at(310), absl::Seconds(10));
  EXPECT_EQ(config->subscriber_queue_depth, 4u);
  EXPECT_EQ(config->EffectiveGpuReadTimeout(), absl::Milliseconds(80));
  ASSERT_EQ(config->sim_mig.size(), 2u);
  EXPECT_EQ(config->sim_mig[1].gpu, 1u);
  EXPECT_EQ(config->sim_mig[0].profiles.size(), 3u);
}

TEST(EngineConfigTest, TheGpuReadTimeoutDefaultsToNoMoreThanATick) {
  auto config = ParseEngineConfig("sampling:\n  tick_interval: 200ms\n", "e.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->EffectiveGpuReadTimeout(), absl::Milliseconds(200));
}

struct BadCase {
  const char* yaml;
  const char* message;
};

class EngineConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(EngineConfigErrorTest, NamesLineAndProblem) {
  auto config = ParseEngineConfig(GetParam().yaml, "e.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EngineConfigErrorTest,
    ::testing::Values(
        BadCase{"samplng:\n  tick_interval: 1s\n", "e.yaml:1: (top level): unknown key 'samplng'"},
        BadCase{"sampling:\n  tick_interval: fast\n", "e.yaml:2: sampling.tick_interval: 'fast'"},
        BadCase{"sampling:\n  tick_interval: 1ms\n", "out of range"},
        BadCase{"sampling:\n  history_max_age: 48h\n", "out of range"},
        BadCase{"sampling:\n  gpu_read_timeout: 2s\n", "2s is out of range (1ms .. the tick"},
        BadCase{"sampling:\n  gpu_read_timeout: 0s\n", "out of range"},
        BadCase{"sampling:\n  intervals:\n    DCGM_FI_BOGUS: 1s\n",
                "e.yaml:3: sampling.intervals.DCGM_FI_BOGUS: unknown field"},
        BadCase{"sampling:\n  intervals:\n    150: 0s\n", "out of range"},
        BadCase{"sampling:\n  intervals:\n    DCGM_FI_DEV_INFOROM_CONFIG_VALID: 5s\n",
                "e.yaml:3: sampling.intervals.DCGM_FI_DEV_INFOROM_CONFIG_VALID: 5s is shorter "
                "than this field allows (30s)"},
        BadCase{"sampling:\n  intervals: [1, 2]\n", "expected a mapping"},
        BadCase{"subscribers:\n  queue_depth: many\n", "expected an integer"},
        BadCase{"subscribers:\n  queue_depth: 0\n", "out of range"},
        BadCase{"sampling: [\n", "YAML syntax error"},
        BadCase{"sim:\n  mig: 0:1g.10gb\n", "e.yaml:2: sim.mig: expected a list"},
        BadCase{"sim:\n  mig:\n    - 0:8g.90gb\n",
                "e.yaml:3: sim.mig: --mig '0:8g.90gb': unknown profile"},
        BadCase{"sim:\n  gpus: 4\n", "e.yaml:2: sim: unknown key 'gpus'"},
        BadCase{"- 1\n- 2\n", "expected a mapping"}));

}  // namespace
}  // namespace vigil
