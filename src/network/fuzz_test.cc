// Fuzz target of the NIC port's sysfs parsers (testing/fuzz.h): every file the kernel writes for a
// port (state, phys_state, rate, link_layer, counters, the netdev's speed and carrier), mutated,
// and random text. For any input: a value that prints back as the kernel would print it, or one
// line that quotes the text without a raw control byte, never a crash (ASan in `make fuzz`).
#include "testing/fuzz.h"

#include <cmath>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "network/port.h"

namespace vigil::network {
namespace {

// What a refusal must look like: one printable line.
void ExpectOneCleanLine(const absl::Status& status, const std::string& input) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << input;
  for (char c : status.message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f)
        << "byte " << int(static_cast<unsigned char>(c)) << " in " << status.message();
  }
}

TEST(NetworkFuzzTest, SysfsFilesParseToWhatTheKernelPrintsOrOneCleanLine) {
  const std::vector<std::string> seeds = {"4: ACTIVE\n",
                                          "1: DOWN\n",
                                          "5: ACTIVE_DEFER\n",
                                          "5: LinkUp\n",
                                          "2: Polling\n",
                                          "7: Phy Test\n",
                                          "400 Gb/sec (4X NDR)\n",
                                          "2.5 Gb/sec (1X SDR)\n",
                                          "10 Gb/sec (4X)\n",
                                          "InfiniBand\n",
                                          "Ethernet\n",
                                          "18446744073709551615\n",
                                          "-1\n",
                                          "400000\n",
                                          "1\n"};
  const testing::FuzzRun run = testing::Fuzz(
      "sysfs port files", seeds, "0123456789: ACTIVEDOWNLinkUpPollingGb/sec(X)HDRNDR.\n-", 50'000,
      [](const std::string& input) -> bool {
        bool parsed = false;
        if (auto state = ParsePortState(input); state.ok()) {
          parsed = true;
          EXPECT_EQ(*ParsePortState(
                        fmt::format("{}: {}\n", static_cast<int>(*state), PortStateName(*state))),
                    *state);
        } else {
          ExpectOneCleanLine(state.status(), input);
        }
        if (auto phys = ParsePhysState(input); phys.ok()) {
          parsed = true;
          EXPECT_GE(static_cast<int>(*phys), 1) << input;
          EXPECT_LE(static_cast<int>(*phys), 7) << input;
        } else {
          ExpectOneCleanLine(phys.status(), input);
        }
        if (auto rate = ParsePortRate(input); rate.ok()) {
          parsed = true;
          EXPECT_GT(rate->lanes, 0u) << input;
          EXPECT_TRUE(std::isfinite(rate->gbps)) << input;
          const std::string printed =
              fmt::format("{}{} Gb/sec ({}X{}{})\n", static_cast<uint64_t>(rate->gbps),
                          rate->gbps != std::floor(rate->gbps) ? ".5" : "", rate->lanes,
                          rate->speed.empty() ? "" : " ", rate->speed);
          auto again = ParsePortRate(printed);
          EXPECT_TRUE(again.ok() && *again == *rate) << input << " printed back as " << printed;
        } else {
          ExpectOneCleanLine(rate.status(), input);
        }
        if (auto layer = ParseLinkLayer(input); layer.ok()) parsed = true;
        if (auto counter = ParseCounter(input); counter.ok()) {
          parsed = true;
        } else {
          ExpectOneCleanLine(counter.status(), input);
        }
        if (auto speed = ParseNetSpeed(input); speed.ok()) {
          parsed = true;
          if (speed->has_value()) {
            EXPECT_GE(**speed, 0) << input;
          }
        }
        if (auto carrier = ParseCarrier(input); carrier.ok()) parsed = true;
        return parsed;
      });
  EXPECT_GT(run.accepted, run.inputs / 100);
}

}  // namespace
}  // namespace vigil::network
