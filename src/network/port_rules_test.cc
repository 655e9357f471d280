// Tests of the port judge over time: a down port warns, fails after its grace (longer while its
// link trains), and clears once it stayed up for the recovery window; a port never up is not
// judged; a slower rate warns; each counter rule holds on its window; what cannot be read is
// said, never judged.
#include "network/port_rules.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::network {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class PortRulesTest : public ::testing::Test {
 protected:
  PortRulesTest() {
    policy_.fail_after = absl::Seconds(10);
    policy_.recovery_window = absl::Minutes(10);
    port_.device = "mlx5_3";
    port_.port = 1;
    port_.link_layer = LinkLayer::kInfiniBand;
    port_.rate = PortRate{.gbps = 400, .lanes = 4, .speed = "NDR"};
    for (const char* counter : {"symbol_error", "link_downed", "port_rcv_errors"}) {
      port_.counters[counter] = 0;
    }
  }

  // Sets the state and observes it `after` the last observation.
  void State(PortState state, PhysState phys, absl::Duration after = absl::Seconds(1)) {
    now_ += after;
    port_.state = state;
    port_.phys_state = phys;
    judge_.ObserveState(port_, now_, policy_);
  }
  void Counters(absl::Duration after) {
    now_ += after;
    judge_.ObserveCounters(port_, now_, policy_);
  }
  // The finding with `key_part` in its key; nullptr when none holds.
  std::vector<SourceFinding> Now(std::optional<double> peers = std::nullopt) {
    return judge_.Findings(now_, policy_, peers);
  }
  std::optional<SourceFinding> Finding(std::string_view key_part,
                                       std::optional<double> peers = std::nullopt) {
    for (SourceFinding& finding : Now(peers)) {
      if (finding.key.find(key_part) != std::string::npos) return finding;
    }
    return std::nullopt;
  }

  NetworkPolicy policy_ = DefaultNetworkPolicy();
  NicPort port_;
  PortJudge judge_{"mlx5_3/1"};
  absl::Time now_ = kT0;
};

TEST_F(PortRulesTest, ADownPortWarnsAtOnceFailsAfterItsGraceAndClearsAfterTheRecoveryWindow) {
  State(PortState::kActive, PhysState::kLinkUp);
  EXPECT_THAT(Now(), IsEmpty());
  State(PortState::kDown, PhysState::kDisabled);
  auto down = Finding("network.state.mlx5_3/1");
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->status, HealthStatus::kWarn);
  EXPECT_EQ(down->code, "VIGIL_FR_NET_PORT_DOWN");
  EXPECT_FALSE(down->sticky);
  EXPECT_THAT(down->message, HasSubstr("port mlx5_3/1 is DOWN/Disabled since"));
  EXPECT_THAT(down->message, HasSubstr("it fails the GPU after 10s"));
  now_ += absl::Seconds(10);  // no read since: the grace passes between reads as well
  EXPECT_EQ(Finding("network.state")->status, HealthStatus::kFail);

  State(PortState::kActive, PhysState::kLinkUp);
  down = Finding("network.state");
  ASSERT_TRUE(down.has_value()) << "until the recovery window passes";
  EXPECT_EQ(down->status, HealthStatus::kFail) << "the episode's worst";
  EXPECT_THAT(down->message, HasSubstr("back ACTIVE/LinkUp since"));
  State(PortState::kActive, PhysState::kLinkUp, absl::Minutes(10) - absl::Seconds(1));
  EXPECT_TRUE(Finding("network.state").has_value());
  State(PortState::kActive, PhysState::kLinkUp);
  EXPECT_THAT(Now(), IsEmpty());
}

TEST_F(PortRulesTest, ADownShorterThanTheGraceIsAWarningThatStillWaitsOutTheRecoveryWindow) {
  State(PortState::kActive, PhysState::kLinkUp);
  State(PortState::kDown, PhysState::kPolling);
  State(PortState::kActive, PhysState::kLinkUp, absl::Seconds(3));
  EXPECT_EQ(Finding("network.state")->status, HealthStatus::kWarn);
  // Down again within the window: the same episode, counted.
  State(PortState::kDown, PhysState::kDisabled, absl::Minutes(1));
  State(PortState::kActive, PhysState::kLinkUp, absl::Seconds(2));
  EXPECT_THAT(Finding("network.state")->message, HasSubstr("(down 2 times)"));
}

TEST_F(PortRulesTest, ATrainingLinkFailsOnlyAfterTheLongerGrace) {
  State(PortState::kActive, PhysState::kLinkUp);
  State(PortState::kDown, PhysState::kPolling);
  now_ += absl::Minutes(1);
  EXPECT_EQ(Finding("network.state")->status, HealthStatus::kWarn);
  EXPECT_THAT(Finding("network.state")->message, HasSubstr("(its link is training)"));
  now_ += absl::Minutes(3);
  EXPECT_EQ(Finding("network.state")->status, HealthStatus::kFail);
}

TEST_F(PortRulesTest, APortNeverUpSinceTheStartIsNotJudgedDown) {
  State(PortState::kDown, PhysState::kDisabled);
  now_ += absl::Hours(1);
  EXPECT_THAT(Now(), IsEmpty());
}

TEST_F(PortRulesTest, ASlowerRateThanItsFirstOrItsPeersWarns) {
  State(PortState::kActive, PhysState::kLinkUp);
  EXPECT_FALSE(Finding("network.rate", 400).has_value());
  port_.rate = PortRate{.gbps = 200, .lanes = 2, .speed = "NDR"};
  State(PortState::kActive, PhysState::kLinkUp);
  auto rate = Finding("network.rate");
  ASSERT_TRUE(rate.has_value());
  EXPECT_EQ(rate->status, HealthStatus::kWarn);
  EXPECT_EQ(rate->code, "VIGIL_FR_NET_PORT_DEGRADED");
  EXPECT_EQ(rate->message,
            "port mlx5_3/1 trained at 200 Gb/sec (2X NDR), below its first rate since the engine "
            "started, 400 Gb/sec (4X NDR): a lane or its speed is lost");

  PortJudge fresh("mlx5_4/1");  // came up slow: only its peers show it
  fresh.ObserveState(port_, now_, policy_);
  auto findings = fresh.Findings(now_, policy_, 400);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_THAT(findings[0].message,
              HasSubstr("below the 400 Gb/sec most of the node's other InfiniBand ports"));
  EXPECT_THAT(fresh.Findings(now_, policy_, 200), IsEmpty());
}

TEST_F(PortRulesTest, EachCounterRuleHoldsOnItsWindow) {
  State(PortState::kActive, PhysState::kLinkUp);
  Counters(absl::ZeroDuration());
  EXPECT_THAT(Now(), IsEmpty());
  port_.counters["link_downed"] = 1;  // any increase: WARN, for the hour
  Counters(absl::Seconds(30));
  auto downed = Finding("network.link_downed.");
  ASSERT_TRUE(downed.has_value());
  EXPECT_EQ(downed->status, HealthStatus::kWarn);
  EXPECT_EQ(downed->code, "VIGIL_FR_NET_LINK_DOWNED");
  EXPECT_FALSE(Finding("link_downed_repeated").has_value()) << "one down";
  port_.counters["link_downed"] = 3;  // the third in the hour
  Counters(absl::Minutes(10));
  ASSERT_TRUE(Finding("link_downed_repeated").has_value());
  EXPECT_EQ(Finding("link_downed_repeated")->status, HealthStatus::kFail);
  EXPECT_TRUE(Finding("link_downed_repeated")->sticky);

  // symbol_error: 121 within the hour fails (the IBTA bound), 10 a second over 30 s warns.
  port_.counters["symbol_error"] = 100;
  Counters(absl::Minutes(10));
  EXPECT_FALSE(Finding("symbol_error").has_value());
  port_.counters["symbol_error"] = 121;
  Counters(absl::Minutes(10));
  auto ber = Finding("network.symbol_error_ber.mlx5_3/1");
  ASSERT_TRUE(ber.has_value());
  EXPECT_EQ(ber->status, HealthStatus::kFail);
  EXPECT_EQ(ber->code, "VIGIL_FR_NET_SYMBOL_ERRORS");
  EXPECT_THAT(ber->message, HasSubstr("port mlx5_3/1: symbol_error rose by 121 in 30m30s (the rule "
                                      "symbol_error_ber: more than 120 per 1h)"));
  EXPECT_FALSE(Finding("symbol_error_burst").has_value()) << "121 over 10 minutes is no burst";
  port_.counters["symbol_error"] = 121 + 301;  // over 30 s: more than 10 a second
  Counters(absl::Seconds(30));
  EXPECT_EQ(Finding("symbol_error_burst")->status, HealthStatus::kWarn);
  Counters(absl::Seconds(30));
  EXPECT_FALSE(Finding("symbol_error_burst").has_value()) << "the burst is over";

  // A counter that went back was reset: no increase is made of it.
  port_.counters["symbol_error"] = 0;
  Counters(absl::Seconds(30));
  EXPECT_FALSE(Finding("symbol_error").has_value());
}

TEST_F(PortRulesTest, WhatCannotBeReadIsSaidAndNotJudged) {
  State(PortState::kActive, PhysState::kLinkUp);
  EXPECT_EQ(judge_.Unknown(), "");
  port_.state.reset();
  port_.state_problems = {"state: 'garbage' is not the kernel's 'N: NAME'"};
  judge_.ObserveState(port_, now_ + absl::Seconds(1), policy_);
  EXPECT_EQ(judge_.Unknown(),
            "port mlx5_3/1 cannot be judged: state: 'garbage' is not the kernel's 'N: NAME'");
  EXPECT_THAT(Now(), IsEmpty()) << "an unknown state is not a down port";
}

}  // namespace
}  // namespace vigil::network
