// Tests the check and the application of NIC port field injections.
#include "network/port_injection.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::network {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

NicPort Rail() {
  NicPort port{.device = "mlx5_3", .port = 1};
  port.state = PortState::kActive;
  port.phys_state = PhysState::kLinkUp;
  port.rate = PortRate{.gbps = 400, .lanes = 4, .speed = "NDR"};
  port.counters = {{"link_downed", 2}, {"symbol_error", 7}};
  return port;
}

absl::Status Check(const std::string& field, std::optional<double> value,
                   std::optional<int64_t> add = std::nullopt) {
  return CheckPortInjection(Rail(),
                            {.port = "mlx5_3/1", .field = field, .value = value, .add = add});
}

TEST(PortInjectionTest, EachFieldTakesWhatItsFileCanSay) {
  EXPECT_TRUE(Check("state", 1).ok());
  EXPECT_TRUE(Check("phys_state", 2).ok());
  EXPECT_TRUE(Check("rate", 200).ok());
  EXPECT_TRUE(Check("link_downed", std::nullopt, 1).ok());
  EXPECT_TRUE(Check("symbol_error", 500).ok());

  EXPECT_THAT(Check("state", 6).message(), HasSubstr("0 NOP, 1 DOWN"));
  EXPECT_THAT(Check("state", 1.5).message(), HasSubstr("not 1.5"));
  EXPECT_THAT(Check("phys_state", 0).message(), HasSubstr("1 Sleep, 2 Polling"));
  EXPECT_THAT(Check("rate", 0).message(), HasSubstr("Gb/s, above 0"));
  EXPECT_THAT(Check("state", std::nullopt, 1).message(),
              HasSubstr("state is not a counter: give a value"));
  EXPECT_THAT(Check("symbol_error", 6).message(),
              HasSubstr("symbol_error of port mlx5_3/1 is a counter at 7: a lower value would "
                        "make it go backwards"));
  EXPECT_THAT(Check("symbol_error", 9.5).message(), HasSubstr("a whole number"));
  EXPECT_THAT(Check("link_downed", std::nullopt, 0).message(), HasSubstr("positive"));
  EXPECT_EQ(Check("speed", 1).message(),
            "port mlx5_3/1 has no field speed: inject state, phys_state, rate or one of its "
            "counters (link_downed, symbol_error)");
}

TEST(PortInjectionTest, StateFieldsReplaceWhatWasReadAndAreNamedInjected) {
  NicPort port = Rail();
  const std::vector<PortFieldInjection> injections = {
      {.port = "mlx5_3/1", .field = "state", .value = 1},
      {.port = "mlx5_3/1", .field = "rate", .value = 200},
      {.port = "mlx5_4/1", .field = "phys_state", .value = 2},  // another port's
  };
  ApplyStateInjections(injections, &port);
  EXPECT_EQ(port.state, PortState::kDown);
  EXPECT_EQ(port.phys_state, PhysState::kLinkUp);
  EXPECT_EQ(port.rate, (PortRate{.gbps = 200}));
  EXPECT_THAT(port.injected, ElementsAre("rate", "state"));

  NicPort read_again = Rail();
  read_again.injected = port.injected;
  ApplyStateInjections({}, &read_again);  // ended: what is read stands
  EXPECT_EQ(read_again.state, PortState::kActive);
  EXPECT_THAT(read_again.injected, IsEmpty());
}

TEST(PortInjectionTest, ACounterRaisedStaysMonotonicUntilTheRealOneCatchesUp) {
  std::map<std::string, uint64_t> floors;
  NicPort port = Rail();
  const std::vector<PortFieldInjection> add = {
      {.port = "mlx5_3/1", .field = "link_downed", .add = 3}};
  ApplyCounterInjections(add, &port, &floors);
  EXPECT_EQ(port.counters["link_downed"], 5u);  // follows the real 2
  EXPECT_EQ(port.counters["symbol_error"], 7u);
  EXPECT_THAT(port.injected, ElementsAre("link_downed"));

  port = Rail();
  port.counters["link_downed"] = 3;  // the real counter moved
  ApplyCounterInjections(add, &port, &floors);
  EXPECT_EQ(port.counters["link_downed"], 6u);

  // The injection ended: never below 6 until the real counter reaches it.
  port = Rail();
  port.counters["link_downed"] = 4;
  ApplyCounterInjections({}, &port, &floors);
  EXPECT_EQ(port.counters["link_downed"], 6u);
  EXPECT_THAT(port.injected, ElementsAre("link_downed"));
  port.counters["link_downed"] = 6;
  ApplyCounterInjections({}, &port, &floors);
  EXPECT_EQ(port.counters["link_downed"], 6u);
  EXPECT_THAT(port.injected, IsEmpty());
  EXPECT_TRUE(floors.empty());
}

TEST(PortInjectionTest, AValueReplacesACounterEvenUnreadAndAnAddNeedsAReading) {
  std::map<std::string, uint64_t> floors;
  NicPort port = Rail();
  port.counters.erase("symbol_error");  // this read failed
  port.counters.erase("link_downed");
  ApplyCounterInjections({{.port = "mlx5_3/1", .field = "symbol_error", .value = 500},
                          {.port = "mlx5_3/1", .field = "link_downed", .add = 1}},
                         &port, &floors);
  EXPECT_EQ(port.counters["symbol_error"], 500u);
  EXPECT_FALSE(port.counters.contains("link_downed"));  // unknown stays unknown
  EXPECT_THAT(port.injected, ElementsAre("symbol_error"));
}

}  // namespace
}  // namespace vigil::network
