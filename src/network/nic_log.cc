// Implements the mlx5 line parser: the prefix, then the body matched against the driver's own
// format strings.
#include "network/nic_log.h"

#include <array>
#include <cctype>
#include <utility>

#include "common/pci_bus_id.h"

namespace vigil::network {
namespace {

constexpr std::string_view kDriver = "mlx5_core ";

// Drops mlx5_core_err's "func:line:(pid N): " where the body starts with it.
std::string_view WithoutFunctionPrefix(std::string_view body) {
  const size_t pid = body.find(":(pid ");
  if (pid == std::string_view::npos) return body;
  const size_t end = body.find("): ", pid);
  if (end == std::string_view::npos) return body;
  // func:line: the function's name and a line number, no space.
  const std::string_view head = body.substr(0, pid);
  const size_t colon = head.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == head.size() ||
      head.find(' ') != std::string_view::npos) {
    return body;
  }
  for (char c : head.substr(colon + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return body;
  }
  return body.substr(end + 3);
}

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// The body's meaning, by the driver's format strings; nullopt where it says nothing of health.
std::optional<NicLogKind> Classify(std::string_view body) {
  // health.c: poll_health, "device's health compromised - reached miss count" and "Fatal error %u
  // detected"; print_health_info's syndrome "unrecoverable hardware error"; cmd.c's "%s(0x%x)
  // timeout. Will cause a leak of a command resource" (the firmware stopped answering).
  if (Contains(body, "device's health compromised") ||
      (body.starts_with("Fatal error ") && Contains(body, " detected")) ||
      Contains(body, "unrecoverable hardware error") ||
      Contains(body, "timeout. Will cause a leak of a command resource")) {
    return NicLogKind::kFatal;
  }
  // events.c: port_module, "Port module event[error]: module %u, %s, %s" and, at info level,
  // "Port module event: module %u, %s" with "Cable plugged" (not a fault) or "Cable unplugged".
  if (body.starts_with("Port module event[error]:")) return NicLogKind::kModule;
  if (body.starts_with("Port module event:")) {
    if (Contains(body, "Cable unplugged") || Contains(body, "Cable error") ||
        Contains(body, "Cable disabled")) {
      return NicLogKind::kModule;
    }
    return std::nullopt;
  }
  // en_main.c: mlx5e_update_carrier's netdev_info "Link up" / "Link down".
  if (body == "Link down") return NicLogKind::kLinkDown;
  if (body == "Link up") return NicLogKind::kLinkUp;
  // events.c: mlx5_pcie_event, "Detected insufficient power on the PCIe slot (%uW)."
  if (body.starts_with("Detected insufficient power on the PCIe slot")) return NicLogKind::kPower;
  // en_main.c: mlx5e_tx_timeout's "TX timeout detected"; the netdev watchdog since v6.8.
  if (Contains(body, "TX timeout detected") || Contains(body, "NETDEV WATCHDOG")) {
    return NicLogKind::kTxTimeout;
  }
  return std::nullopt;
}

}  // namespace

std::string_view NicLogKindName(NicLogKind kind) {
  switch (kind) {
    case NicLogKind::kFatal:
      return "fatal";
    case NicLogKind::kModule:
      return "module";
    case NicLogKind::kLinkDown:
      return "link-down";
    case NicLogKind::kLinkUp:
      return "link-up";
    case NicLogKind::kPower:
      return "power";
    case NicLogKind::kTxTimeout:
      return "tx-timeout";
  }
  return "fatal";
}

std::optional<NicLogLine> ParseNicLogLine(std::string_view message) {
  if (!message.starts_with(kDriver)) return std::nullopt;
  std::string_view rest = message.substr(kDriver.size());
  const size_t colon_space = rest.find(": ");
  if (colon_space == std::string_view::npos) return std::nullopt;
  // "BUS_ID" (a device line) or "BUS_ID IFNAME" (a netdev line) before ": ".
  const std::string_view who = rest.substr(0, colon_space);
  const size_t space = who.find(' ');
  NicLogLine line;
  line.pci_bus_id = NormalizePciBusId(who.substr(0, space));
  if (line.pci_bus_id.empty()) return std::nullopt;
  if (space != std::string_view::npos) {
    line.netdev = std::string(who.substr(space + 1));
    if (line.netdev.empty() || Contains(line.netdev, " ")) return std::nullopt;
  }
  std::string_view body = WithoutFunctionPrefix(rest.substr(colon_space + 2));
  while (!body.empty() && (body.back() == '\n' || body.back() == ' ')) body.remove_suffix(1);
  const std::optional<NicLogKind> kind = Classify(body);
  if (!kind.has_value()) return std::nullopt;
  line.kind = *kind;
  line.text = std::string(body.substr(0, 300));
  return line;
}

}  // namespace vigil::network
