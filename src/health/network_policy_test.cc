// Tests of the NIC ports' policy: the built-in rules and the `network:` config section, its
// changes of built-in rules, new rules, rules turned off, and every kind of bad input.
#include "health/network_policy.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;

const NetworkCounterRule* Find(const NetworkPolicy& policy, std::string_view name) {
  auto it = std::find_if(policy.counters.begin(), policy.counters.end(),
                         [&](const NetworkCounterRule& rule) { return rule.name == name; });
  return it == policy.counters.end() ? nullptr : &*it;
}

TEST(NetworkPolicyTest, TheDefaultsAreThePeersThresholdsWithTheirSources) {
  const NetworkPolicy policy = DefaultNetworkPolicy();
  EXPECT_EQ(policy.state_interval, absl::Seconds(1));
  EXPECT_EQ(policy.counter_interval, absl::Seconds(30));
  const NetworkCounterRule* ber = Find(policy, "symbol_error_ber");
  ASSERT_NE(ber, nullptr);
  EXPECT_EQ(ber->counter, "symbol_error");
  EXPECT_EQ(ber->over, 120);
  EXPECT_EQ(ber->per, absl::Hours(1));
  EXPECT_EQ(ber->status, HealthStatus::kFail);
  const NetworkCounterRule* downed = Find(policy, "link_downed");
  ASSERT_NE(downed, nullptr);
  EXPECT_EQ(downed->over, 0) << "any increase";
  EXPECT_EQ(downed->status, HealthStatus::kWarn);
  for (const NetworkCounterRule& rule : policy.counters) {
    EXPECT_FALSE(rule.source.empty()) << rule.name;
    EXPECT_TRUE(rule.code.starts_with("VIGIL_FR_NET_")) << rule.name;
    EXPECT_FALSE(rule.meaning.empty()) << rule.name;
  }
}

TEST(NetworkPolicyTest, TheConfigChangesAddsAndTurnsOffRules) {
  NetworkPolicy policy = DefaultNetworkPolicy();
  const YAML::Node node = YAML::Load(R"(
state_interval: 500ms
counter_interval: 10s
ports: {mlx5_0/1: [0, 1], mlx5_9/1: []}
state: {fail_after: 0s, recovery_window: 2s, rate_degraded: false}
counters:
  symbol_error_ber: {over: 50}
  discards: {counter: port_rcv_discards, over: 5, per: 1m, status: FAIL, recommended: reboot}
  xmit_discards: off
)");
  ASSERT_TRUE(ApplyNetworkConfig(node, "e.yaml", &policy).ok());
  EXPECT_EQ(policy.state_interval, absl::Milliseconds(500));
  EXPECT_EQ(policy.counter_interval, absl::Seconds(10));
  EXPECT_EQ(policy.ports.at("mlx5_0/1"), (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(policy.ports.at("mlx5_9/1").empty());
  EXPECT_EQ(policy.fail_after, absl::ZeroDuration());
  EXPECT_EQ(policy.recovery_window, absl::Seconds(2));
  EXPECT_EQ(policy.training_fail_after, absl::Minutes(4)) << "unchanged";
  EXPECT_FALSE(policy.rate_degraded);
  EXPECT_EQ(Find(policy, "symbol_error_ber")->over, 50);
  EXPECT_EQ(Find(policy, "symbol_error_ber")->status, HealthStatus::kFail) << "the rest kept";
  const NetworkCounterRule* added = Find(policy, "discards");
  ASSERT_NE(added, nullptr);
  EXPECT_EQ(added->counter, "port_rcv_discards");
  EXPECT_EQ(added->status, HealthStatus::kFail);
  EXPECT_EQ(added->recommended, RecommendedAction::kReboot);
  EXPECT_EQ(added->source, "the engine config");
  EXPECT_EQ(Find(policy, "xmit_discards"), nullptr);
}

TEST(NetworkPolicyTest, BadInputIsOneLineNamingWhereAndWhat) {
  struct Case {
    std::string yaml, says;
  };
  for (const Case& c : std::vector<Case>{
           {"state_interval: 10ms", "e.yaml:1: network.state_interval: out of range"},
           {"counter_interval: soon", "network.counter_interval"},
           {"ports: {mlx5_0: [0]}", "a port is HCA/PORT"},
           {"ports: {mlx5_0/1: 0}", "expected a list of GPU indexes"},
           {"ports: {mlx5_0/1: [-1]}", "a GPU index is 0 .. 1023"},
           {"state: {fail_afterr: 1s}", "fail_afterr"},
           {"state: {rate_degraded: maybe}", "expected true or false"},
           {"counters: {nope: off}", "no such rule to turn off"},
           {"counters: {mine: {over: 1}}", "a new rule needs counter, over and per"},
           {"counters: {link_downed: {status: BAD}}", "expected WARN or FAIL"},
           {"counters: {link_downed: {over: -1}}", "must not be negative"},
           {"counters: {link_downed: {per: 0s}}", "network.counters.link_downed.per: out of range"},
           {"counters: {link_downed: {recommended: panic}}", "use none, restart-app"},
           {"counters: [1]", "expected a mapping of rules by name"},
           {"bogus: 1", "bogus"},
       }) {
    NetworkPolicy policy = DefaultNetworkPolicy();
    const absl::Status status = ApplyNetworkConfig(YAML::Load(c.yaml), "e.yaml", &policy);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(status.message(), HasSubstr(c.says)) << c.yaml;
    EXPECT_EQ(status.message().find('\n'), std::string_view::npos) << c.yaml;
  }
}

}  // namespace
}  // namespace vigil
