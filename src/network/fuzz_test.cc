// Fuzz targets of the network module's parsers (testing/fuzz.h). The NIC port's sysfs files (state,
// phys_state, rate, link_layer, counters, the netdev's speed and carrier), mutated, and random
// text: for any input, a value that prints back as the kernel would print it, or one line that
// quotes the text without a raw control byte. The mlx5 driver's kernel-log lines: for any input,
// nothing, or a line whose bus id is in sysfs's form and whose text is a part of the input no
// longer than 300 bytes. Never a crash (ASan in `make fuzz`).
#include "testing/fuzz.h"

#include <cmath>

#include "common/pci_bus_id.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "network/nic_log.h"
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

TEST(NetworkFuzzTest, Mlx5LinesGiveNothingOrAnHcaAndTheDriversWords) {
  const std::vector<std::string> seeds = {
      "mlx5_core 0000:01:00.1 eth1: Link up",
      "mlx5_core 0000:e1:00.0 ens8f0np0: Link down",
      "mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached "
      "miss count",
      "mlx5_core 0000:41:00.0: poll_health:861:(pid 0): Fatal error 3 detected",
      "mlx5_core 0000:63:00.1: Port module event: module 1, Cable unplugged",
      "mlx5_core 0000:63:00.1: mlx5_port_module_event:1131:(pid 0): Port module event[error]: "
      "module 0, Cable error, High Temperature",
      "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on "
      "the PCIe slot (27W).",
      "mlx5_core 0000:65:00.0 eth0: NETDEV WATCHDOG: CPU: 5: transmit queue 0 timed out 5032 ms",
      "mlx5_core 0000:56:00.0: wait_func:1189:(pid 72061): ACCESS_REG(0x805) timeout. Will cause "
      "a leak of a command resource"};
  const testing::FuzzRun run = testing::Fuzz(
      "mlx5 kernel-log lines", seeds, "mlx5_core 0123456789abcdef:.()pid LinkupdownPort", 50'000,
      [](const std::string& input) -> bool {
        const std::optional<NicLogLine> line = ParseNicLogLine(input);
        if (!line.has_value()) return false;
        EXPECT_EQ(NormalizePciBusId(line->pci_bus_id), line->pci_bus_id) << input;
        EXPECT_LE(line->text.size(), 300u) << input;
        EXPECT_NE(input.find(line->text), std::string::npos) << input;
        EXPECT_EQ(line->netdev.find(' '), std::string::npos) << input;
        return true;
      });
  EXPECT_GT(run.accepted, run.inputs / 100);
}

}  // namespace
}  // namespace vigil::network
