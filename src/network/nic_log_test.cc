// Tests of the mlx5 line parser on lines as the driver prints them: real captured lines where a
// public source has one (cited), else lines built from the driver's own format strings; lines that
// say nothing of health, and lines that are not the driver's, give nothing.
#include "network/nic_log.h"

#include "gtest/gtest.h"

namespace vigil::network {
namespace {

struct Case {
  std::string message;
  std::string bus_id, netdev;
  NicLogKind kind;
  std::string text;
};

TEST(NicLogTest, TheDriversLinesAreReadWithTheirHcaAndMeaning) {
  for (const Case& c : std::vector<Case>{
           // Real: bigstack-oss/cubecos issue 733 (a ConnectX link flapping), as the kernel log
           // holds it (the journal's "kernel:" prefix is not part of the record).
           {"mlx5_core 0000:01:00.1 eth1: Link up", "0000:01:00.1", "eth1", NicLogKind::kLinkUp,
            "Link up"},
           // en_main.c's other carrier line, the same shape.
           {"mlx5_core 0000:e1:00.0 ens8f0np0: Link down", "0000:e1:00.0", "ens8f0np0",
            NicLogKind::kLinkDown, "Link down"},
           // health.c's poll_health, with mlx5_core_err's "func:line:(pid N): " prefix.
           {"mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - "
            "reached miss count",
            "0000:41:00.0", "", NicLogKind::kFatal,
            "device's health compromised - reached miss count"},
           {"mlx5_core 0000:41:00.0: poll_health:861:(pid 0): Fatal error 3 detected",
            "0000:41:00.0", "", NicLogKind::kFatal, "Fatal error 3 detected"},
           {"mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): synd 0x8: unrecoverable "
            "hardware error",
            "0000:41:00.0", "", NicLogKind::kFatal, "synd 0x8: unrecoverable hardware error"},
           // cmd.c's wait_func: "%s(0x%x) timeout. Will cause a leak of a command resource".
           {"mlx5_core 0000:56:00.0: wait_func:1189:(pid 72061): ACCESS_REG(0x805) timeout. Will "
            "cause a leak of a command resource",
            "0000:56:00.0", "", NicLogKind::kFatal,
            "ACCESS_REG(0x805) timeout. Will cause a leak of a command resource"},
           // events.c's port_module: the error form (mlx5_core_err) and the info form.
           {"mlx5_core 0000:63:00.1: mlx5_port_module_event:1131:(pid 0): Port module "
            "event[error]: module 0, Cable error, High Temperature",
            "0000:63:00.1", "", NicLogKind::kModule,
            "Port module event[error]: module 0, Cable error, High Temperature"},
           {"mlx5_core 0000:63:00.1: Port module event: module 1, Cable unplugged", "0000:63:00.1",
            "", NicLogKind::kModule, "Port module event: module 1, Cable unplugged"},
           {"mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient "
            "power on the PCIe slot (27W).",
            "0000:5c:00.0", "", NicLogKind::kPower,
            "Detected insufficient power on the PCIe slot (27W)."},
           {"mlx5_core 0000:65:00.0 eth0: NETDEV WATCHDOG: CPU: 5: transmit queue 0 timed out 5032 "
            "ms",
            "0000:65:00.0", "eth0", NicLogKind::kTxTimeout,
            "NETDEV WATCHDOG: CPU: 5: transmit queue 0 timed out 5032 ms"},
       }) {
    const std::optional<NicLogLine> line = ParseNicLogLine(c.message);
    ASSERT_TRUE(line.has_value()) << c.message;
    EXPECT_EQ(line->pci_bus_id, c.bus_id) << c.message;
    EXPECT_EQ(line->netdev, c.netdev) << c.message;
    EXPECT_EQ(line->kind, c.kind) << c.message;
    EXPECT_EQ(line->text, c.text) << c.message;
  }
}

TEST(NicLogTest, LinesThatSayNothingOfHealthOrAreNotTheDriversGiveNothing) {
  for (const std::string message : {
           // Real: geerlingguy/arm-nas issue 16 (ConnectX-5): a cable plugged in, slot power fine.
           "mlx5_core 0004:01:00.0: Port module event: module 0, Cable plugged",
           "mlx5_core 0004:01:00.0: mlx5_pcie_event:294:(pid 542): PCIe slot advertised "
           "sufficient power (75W).",
           "mlx5_core 0000:01:00.0: firmware version: 28.39.1002",
           "mlx5_core: no bus id here: Link down",
           "mlx5_core 0000:01:00.0 two words: Link down",
           "NVRM: Xid (PCI:0000:3a:00): 79, GPU has fallen off the bus.",
           "mlx4_core 0000:01:00.0: Link down",
           "",
       }) {
    EXPECT_FALSE(ParseNicLogLine(message).has_value()) << message;
  }
}

}  // namespace
}  // namespace vigil::network
