// Tests for scenario parsing: the shipped examples, each kind of mistake (with its line), and a
// fuzz-style test of random and truncated files (no crash, always a clear error).
#include "inject/scenario.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/paths.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const ScenarioLimits kLimits{.gpu_count = 8, .max_injection = absl::Hours(1)};

std::vector<std::pair<std::string, std::string>> ShippedScenarios() {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(testing::SourceDir()) / "scenarios")) {
    std::ifstream file(entry.path());
    std::stringstream text;
    text << file.rdbuf();
    files.emplace_back(entry.path().filename().string(), text.str());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The simulated node's rails (--sim-nics 8): mlx5_0/1 .. mlx5_7/1.
absl::Status SimRail(const PortInjectionRequest& request) {
  for (int rail = 0; rail < 8; ++rail) {
    if (request.port == fmt::format("mlx5_{}/1", rail)) return absl::OkStatus();
  }
  return absl::NotFoundError("the node has no NIC port " + request.port);
}

TEST(ScenarioTest, ShippedExamplesAreValid) {
  const auto files = ShippedScenarios();
  ASSERT_GE(files.size(), 6u);
  ScenarioLimits limits = kLimits;
  limits.check_port = SimRail;
  for (const auto& [name, text] : files) {
    auto plan = ParseScenario(text, name, limits);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_FALSE(plan->steps.empty()) << name;
    EXPECT_NE(plan->name, "unnamed") << name;
  }
}

TEST(ScenarioTest, ParsesEveryKindOfStepInTimeOrder) {
  auto plan = ParseScenario(R"(name: drill
description: all kinds
steps:
  - at: 30s
    clear: all
  - at: 0s
    inject: {gpu: 2, field: DCGM_FI_DEV_POWER_USAGE, value: 950, for: 20s}
  - at: 5s
    inject: {gpu: 2, field: 240, add: 1000}
  - at: 10s
    xid: {gpu: 2, xid: 79}
  - at: 20s
    clear: {gpu: 2, field: DCGM_FI_DEV_POWER_USAGE}
)",
                            "drill.yaml", kLimits);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->name, "drill");
  ASSERT_EQ(plan->steps.size(), 5u);
  EXPECT_EQ(plan->steps[0].action, ScenarioStep::Action::kInjectField);
  EXPECT_EQ(plan->steps[0].value, 950);
  EXPECT_EQ(plan->steps[0].duration, absl::Seconds(20));
  EXPECT_EQ(plan->steps[0].line, 6);
  EXPECT_EQ(plan->steps[1].add, 1000);
  EXPECT_EQ(plan->steps[1].field, 240u);
  EXPECT_EQ(plan->steps[2].action, ScenarioStep::Action::kInjectXid);
  EXPECT_EQ(plan->steps[2].xid, 79u);
  EXPECT_EQ(plan->steps[3].action, ScenarioStep::Action::kClearField);
  EXPECT_EQ(plan->steps[4].action, ScenarioStep::Action::kClearAll);
  EXPECT_EQ(plan->length, absl::Seconds(30));
}

TEST(ScenarioTest, PortStepsAreCheckedByTheEngineAndRefusedWhereItHasNoPorts) {
  constexpr char kFlap[] = R"(steps:
  - at: 0s
    inject: {port: mlx5_3/1, field: state, value: 1, for: 20s}
  - at: 30s
    inject: {port: mlx5_3/1, field: link_downed, add: 2}
  - at: 40s
    clear: {port: mlx5_3/1, field: state}
)";
  std::vector<PortInjectionRequest> checked;
  ScenarioLimits limits = kLimits;
  limits.check_port = [&](const PortInjectionRequest& request) {
    checked.push_back(request);
    return absl::OkStatus();
  };
  auto plan = ParseScenario(kFlap, "flap.yaml", limits);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps.size(), 3u);
  EXPECT_EQ(plan->steps[0].action, ScenarioStep::Action::kInjectPort);
  EXPECT_EQ(plan->steps[0].port, "mlx5_3/1");
  EXPECT_EQ(plan->steps[0].port_field, "state");
  EXPECT_EQ(plan->steps[0].value, 1);
  EXPECT_EQ(plan->steps[0].duration, absl::Seconds(20));
  EXPECT_EQ(plan->steps[1].add, 2);
  EXPECT_EQ(plan->steps[2].action, ScenarioStep::Action::kClearPort);
  ASSERT_EQ(checked.size(), 2u);  // the injections; a clear of what is not there is harmless
  EXPECT_EQ(checked[1].field, "link_downed");

  limits.check_port = [](const PortInjectionRequest&) {
    return absl::InvalidArgumentError("state takes 0 to 5");
  };
  plan = ParseScenario(kFlap, "flap.yaml", limits);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "flap.yaml:3: steps[0].inject: state takes 0 to 5");

  plan = ParseScenario(kFlap, "flap.yaml", kLimits);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("this engine reads no NIC ports"));
}

struct BadCase {
  const char* yaml;
  const char* message;
};

class ScenarioErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ScenarioErrorTest, RefusedWithLineAndReason) {
  auto plan = ParseScenario(GetParam().yaml, "s.yaml", kLimits);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(GetParam().message));
  EXPECT_THAT(std::string(plan.status().message()), StartsWith("s.yaml"));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ScenarioErrorTest,
    ::testing::Values(
        BadCase{"", "empty"}, BadCase{"steps: []\n", "needs a list of steps"},
        BadCase{"name: x\n", "needs a list of steps"},
        BadCase{"stpes:\n  - at: 0s\n", "s.yaml:1: (top level): unknown key 'stpes'"},
        BadCase{"steps:\n  - xid: {gpu: 0, xid: 79}\n",
                "s.yaml:2: steps[0]: every step needs `at`"},
        BadCase{"steps:\n  - at: soon\n    xid: {gpu: 0, xid: 79}\n", "s.yaml:2: steps[0].at"},
        BadCase{"steps:\n  - at: -1s\n    xid: {gpu: 0, xid: 79}\n", "not a duration"},
        BadCase{"steps:\n  - at: 48h\n    xid: {gpu: 0, xid: 79}\n", "longest scenario"},
        BadCase{"steps:\n  - at: 0s\n", "exactly one of inject, xid, clear"},
        BadCase{"steps:\n  - at: 0s\n    xid: {gpu: 0, xid: 79}\n    clear: all\n", "exactly one"},
        BadCase{"steps:\n  - at: 0s\n    xid: {gpu: 8, xid: 79}\n",
                "s.yaml:3: steps[0].xid.gpu: GPU 8 does not exist"},
        BadCase{"steps:\n  - at: 0s\n    xid: {gpu: 0, xid: 0}\n", "1 to 999"},
        BadCase{"steps:\n  - at: 0s\n    xid: {gpu: 0}\n", "needs `xid`"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: DCGM_FI_DEV_GPU_TMP, value: 1}\n",
                "s.yaml:3: steps[0].inject.field: unknown field 'DCGM_FI_DEV_GPU_TMP'"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 150, value: 1.5}\n",
                "takes an integer"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 150, add: 1}\n",
                "not a cumulative counter"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 310, add: 0}\n",
                "must be positive"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 150}\n",
                "exactly one of `value` and `add`"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 54, value: 1}\n",
                "cannot be injected"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 150, value: 1, for: 2h}\n",
                "at most 1h"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 150, value: hot}\n",
                "expected a number"},
        BadCase{"steps:\n  - at: 0s\n    inject: {gpu: 0, field: 150, valeu: 1}\n",
                "unknown key 'valeu'"},
        BadCase{"steps:\n  - at: 0s\n    clear: some\n", "clear: all"},
        BadCase{
            "steps:\n  - at: 0s\n    inject: {gpu: 0, port: mlx5_0/1, field: state, value: 1}\n",
            "name a `gpu` or a NIC `port`, not both"},
        BadCase{"steps:\n  - at: 0s\n    clear: {port: mlx5_0/1, field: state}\n",
                "reads no NIC ports"},
        BadCase{"steps: [\n", "YAML syntax error"},
        BadCase{"steps:\n  - at: 0s\n    inject: [1, 2]\n", "expected a mapping"}));

// Random bytes, random truncations and random single-character edits of valid files: the parser
// must never crash or hang, and every refusal must name the file.
TEST(ScenarioFuzzTest, RandomAndTruncatedFilesNeverCrash) {
  std::mt19937_64 rng(20261129);
  std::vector<std::string> corpus;
  for (const auto& [name, text] : ShippedScenarios()) corpus.push_back(text);
  const std::string alphabet = "abcdefgxyz:{}[],- \n\t#0123456789.'\"&*!|>%@`";
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const std::string& base = corpus[rng() % corpus.size()];
    switch (i % 3) {
      case 0:  // truncated
        text = base.substr(0, rng() % (base.size() + 1));
        break;
      case 1:  // a few random edits
        text = base;
        for (int e = 0; e < 1 + static_cast<int>(rng() % 4); ++e) {
          text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
        }
        break;
      default:  // noise
        for (size_t n = rng() % 200; n > 0; --n) text.push_back(alphabet[rng() % alphabet.size()]);
    }
    auto plan = ParseScenario(text, "fuzz.yaml", kLimits);
    if (plan.ok()) {
      ++accepted;
      EXPECT_FALSE(plan->steps.empty());
    } else {
      ++refused;
      EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(plan.status().message()), StartsWith("fuzz.yaml")) << text;
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace vigil
