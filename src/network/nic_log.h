// The mlx5 driver's kernel-log lines about a NIC, parsed: what each means for the ports of its
// HCA. The shapes are the driver's (drivers/net/ethernet/mellanox/mlx5/core: mlx5_core.h's
// `mlx5_core_err` prefix "func:line:(pid N): ", health.c's poll_health and print_health_info,
// events.c's port_module and mlx5_pcie_event, en_main.c's carrier lines, cmd.c's timeouts;
// docs/network.md cites each). A device line reads "mlx5_core BUS_ID: [func:line:(pid N): ]TEXT",
// a netdev line "mlx5_core BUS_ID IFNAME: TEXT". Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vigil::network {

enum class NicLogKind : uint8_t {
  kFatal,      // the device's health is compromised, a firmware fatal error, a command leak
  kModule,     // a port module (cable, transceiver) error or a cable unplugged
  kLinkDown,   // the netdev's carrier went down (Ethernet/RoCE ports only)
  kLinkUp,     // ... and came back
  kPower,      // the PCIe slot gives the NIC too little power
  kTxTimeout,  // a transmit queue timed out (the netdev watchdog)
};
std::string_view NicLogKindName(NicLogKind kind);  // "fatal", "module", ...

struct NicLogLine {
  std::string pci_bus_id;  // normalised: "0000:5e:00.0"
  std::string netdev;      // a netdev line's interface; "" for a device line
  NicLogKind kind = NicLogKind::kFatal;
  std::string text;  // the driver's words, without the prefix (at most 300 bytes)
};

// nullopt for a line that is not the mlx5 driver's, or one of its lines that says nothing about
// the NIC's health ("Port module event: module 0, Cable plugged", a firmware version).
std::optional<NicLogLine> ParseNicLogLine(std::string_view message);

}  // namespace vigil::network
