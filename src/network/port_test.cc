// Tests of the parsers of a NIC port's sysfs files: every shape the kernel prints is read, and
// anything else is refused with a line that names the file's text and the expected shape.
#include "network/port.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::network {
namespace {

using ::testing::HasSubstr;

TEST(PortTest, EveryStateTheKernelPrintsIsRead) {
  const std::vector<std::pair<std::string, PortState>> states = {
      {"0: NOP\n", PortState::kNop},       {"1: DOWN\n", PortState::kDown},
      {"2: INIT\n", PortState::kInit},     {"3: ARMED\n", PortState::kArmed},
      {"4: ACTIVE\n", PortState::kActive}, {"5: ACTIVE_DEFER\n", PortState::kActiveDefer}};
  for (const auto& [text, state] : states) {
    auto parsed = ParsePortState(text);
    ASSERT_TRUE(parsed.ok()) << text << parsed.status();
    EXPECT_EQ(*parsed, state);
    EXPECT_EQ(std::string(PortStateName(state)) + "\n", text.substr(3));
  }
}

TEST(PortTest, EveryPhysicalStateTheKernelPrintsIsRead) {
  const std::vector<std::pair<std::string, PhysState>> states = {
      {"1: Sleep", PhysState::kSleep},
      {"2: Polling", PhysState::kPolling},
      {"3: Disabled", PhysState::kDisabled},
      {"4: PortConfigurationTraining", PhysState::kPortConfigurationTraining},
      {"5: LinkUp", PhysState::kLinkUp},
      {"6: LinkErrorRecovery", PhysState::kLinkErrorRecovery},
      {"7: Phy Test", PhysState::kPhyTest}};
  for (const auto& [text, state] : states) {
    auto parsed = ParsePhysState(text + "\n");
    ASSERT_TRUE(parsed.ok()) << text << parsed.status();
    EXPECT_EQ(*parsed, state);
    EXPECT_EQ(PhysStateName(state), text.substr(3));
  }
}

TEST(PortTest, AStateThatIsNotTheKernelsShapeIsRefusedNamingIt) {
  for (const std::string& text :
       std::vector<std::string>{"", "\n", "ACTIVE", "4:ACTIVE", "4: DOWN", "9: ACTIVE", "-1: NOP",
                                "4: ACTIVE extra", "0: ", std::string("4: ACT\0IVE", 10)}) {
    auto parsed = ParsePortState(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_THAT(ParsePortState("4: DOWN\n").status().message(),
              HasSubstr("port state '4: DOWN' is not the kernel's 'NUMBER: NAME'"));
  EXPECT_THAT(ParsePhysState("0: \n").status().message(), HasSubstr("'5: LinkUp'"));
  EXPECT_THAT(ParsePortState(std::string("\x01\xff", 2)).status().message(),
              HasSubstr("'\\x01\\xff'"));
}

TEST(PortTest, WhatTheKernelItselfCallsUnknownIsSaidSoNotCalledGarbled) {
  EXPECT_THAT(ParsePortState("9: UNKNOWN\n").status().message(),
              HasSubstr("the kernel reports port state 9 as unknown"));
  EXPECT_THAT(ParsePhysState("0: <unknown>\n").status().message(),
              HasSubstr("the kernel reports physical state 0 as unknown"));
  EXPECT_THAT(ParseLinkLayer("Unknown\n").status().message(),
              HasSubstr("the kernel reports the link layer as 'Unknown'"));
  EXPECT_EQ(ParsePortState("4: UNKNOWN\n").status().code(), absl::StatusCode::kInvalidArgument)
      << "never a value";
}

TEST(PortTest, RatesAreReadWithTheirWidthAndSpeed) {
  struct Case {
    std::string text;
    PortRate rate;
  };
  const std::vector<Case> cases = {
      {"400 Gb/sec (4X NDR)\n", {.gbps = 400, .lanes = 4, .speed = "NDR"}},
      {"200 Gb/sec (4X HDR)\n", {.gbps = 200, .lanes = 4, .speed = "HDR"}},
      {"100 Gb/sec (2X HDR)\n", {.gbps = 100, .lanes = 2, .speed = "HDR"}},
      {"56 Gb/sec (4X FDR)\n", {.gbps = 56, .lanes = 4, .speed = "FDR"}},
      {"40 Gb/sec (4X FDR10)\n", {.gbps = 40, .lanes = 4, .speed = "FDR10"}},
      {"2.5 Gb/sec (1X SDR)\n", {.gbps = 2.5, .lanes = 1, .speed = "SDR"}},
      {"10 Gb/sec (4X)\n", {.gbps = 10, .lanes = 4, .speed = ""}},  // older kernels' SDR
  };
  for (const Case& c : cases) {
    auto parsed = ParsePortRate(c.text);
    ASSERT_TRUE(parsed.ok()) << c.text << parsed.status();
    EXPECT_EQ(*parsed, c.rate) << c.text;
  }
}

TEST(PortTest, ARateThatIsNotTheKernelsShapeIsRefused) {
  for (const std::string& text : std::vector<std::string>{
           "", "400", "400 Gb/sec", "400 Gb/sec (4X NDR", "400 Gb/sec 4X NDR)", "x Gb/sec (4X NDR)",
           "400 Gb/sec (X NDR)", "400 Gb/sec (0X NDR)", "400 Gb/sec (4X  NDR)",
           "400 Gb/sec (4XNDR)", "400 Mb/sec (4X NDR)", "-400 Gb/sec (4X NDR)",
           ".5 Gb/sec (1X SDR)", "400 Gb/sec (4X N-R)"}) {
    EXPECT_EQ(ParsePortRate(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(PortTest, LinkLayersCountersSpeedsAndCarriers) {
  EXPECT_EQ(*ParseLinkLayer("InfiniBand\n"), LinkLayer::kInfiniBand);
  EXPECT_EQ(*ParseLinkLayer("Ethernet\n"), LinkLayer::kEthernet);
  EXPECT_FALSE(ParseLinkLayer("infiniband\n").ok());

  EXPECT_EQ(*ParseCounter("0\n"), 0u);
  EXPECT_EQ(*ParseCounter("18446744073709551615\n"), UINT64_MAX);
  for (const char* bad : {"", "-1", "18446744073709551616", "12 x", "1e3", "0x10", "N/A"}) {
    EXPECT_FALSE(ParseCounter(bad).ok()) << bad;
  }

  EXPECT_EQ(*ParseNetSpeed("400000\n"), std::optional<int64_t>(400000));
  EXPECT_EQ(*ParseNetSpeed("-1\n"), std::nullopt);
  EXPECT_FALSE(ParseNetSpeed("-2\n").ok());
  EXPECT_FALSE(ParseNetSpeed("fast\n").ok());

  EXPECT_TRUE(*ParseCarrier("1\n"));
  EXPECT_FALSE(*ParseCarrier("0\n"));
  EXPECT_FALSE(ParseCarrier("up\n").ok());
}

}  // namespace
}  // namespace vigil::network
