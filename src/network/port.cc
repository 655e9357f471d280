// Implements the NIC port's names and the parsers of its sysfs files.
#include "network/port.h"

#include <array>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::network {
namespace {

// The kernel's names, indexed by the number it prints before them.
constexpr std::array<std::string_view, 6> kPortStateNames = {"NOP",   "DOWN",   "INIT",
                                                             "ARMED", "ACTIVE", "ACTIVE_DEFER"};
constexpr std::array<std::string_view, 8> kPhysStateNames = {"",
                                                             "Sleep",
                                                             "Polling",
                                                             "Disabled",
                                                             "PortConfigurationTraining",
                                                             "LinkUp",
                                                             "LinkErrorRecovery",
                                                             "Phy Test"};

// The file's text without the one trailing newline sysfs writes (and without surrounding blanks).
std::string_view Line(std::string_view text) { return Trim(text); }

bool ConsumePrefix(std::string_view* text, std::string_view prefix) {
  if (!text->starts_with(prefix)) return false;
  text->remove_prefix(prefix.size());
  return true;
}

bool ConsumeSuffix(std::string_view* text, std::string_view suffix) {
  if (!text->ends_with(suffix)) return false;
  text->remove_suffix(suffix.size());
  return true;
}

// A decimal number of at most `max`, digits only.
std::optional<uint32_t> SmallNumber(std::string_view text, uint32_t max) {
  const std::optional<uint64_t> number = ParseUint64(text);
  if (!number.has_value() || text.empty() || !absl::ascii_isdigit(text[0]) || *number > max) {
    return std::nullopt;
  }
  return static_cast<uint32_t>(*number);
}

// Where `text` is not printable, the error must not copy it raw into a log line.
std::string Quoted(std::string_view text) { return "'" + Printable(text, 64) + "'"; }

// "N: NAME" where names[N] == NAME.
absl::StatusOr<uint32_t> ParseNumberedName(std::string_view text, const auto& names,
                                           std::string_view what, std::string_view example) {
  const std::string_view line = Line(text);
  const size_t colon = line.find(": ");
  const std::optional<uint32_t> number =
      colon == std::string_view::npos ? std::nullopt : SmallNumber(line.substr(0, colon), 255);
  // The kernel's own word for a number outside its table (state_show: "UNKNOWN";
  // phys_state_show: "<unknown>"): the shape is right, the value is not known.
  if (number.has_value() &&
      (line.substr(colon + 2) == "UNKNOWN" || line.substr(colon + 2) == "<unknown>")) {
    return absl::InvalidArgumentError(
        fmt::format("the kernel reports {} {} as unknown ({})", what, *number, Quoted(line)));
  }
  if (!number.has_value() || *number >= names.size() || names[*number].empty() ||
      line.substr(colon + 2) != names[*number]) {
    return absl::InvalidArgumentError(fmt::format(
        "{} {} is not the kernel's 'NUMBER: NAME' (such as '{}')", what, Quoted(line), example));
  }
  return *number;
}

}  // namespace

std::string_view PortStateName(PortState state) {
  return kPortStateNames[static_cast<size_t>(state)];
}

std::string_view PhysStateName(PhysState state) {
  return kPhysStateNames[static_cast<size_t>(state)];
}

std::string_view LinkLayerName(LinkLayer layer) {
  return layer == LinkLayer::kInfiniBand ? "InfiniBand" : "Ethernet";
}

absl::StatusOr<PortState> ParsePortState(std::string_view text) {
  auto number = ParseNumberedName(text, kPortStateNames, "port state", "4: ACTIVE");
  if (!number.ok()) return number.status();
  return static_cast<PortState>(*number);
}

absl::StatusOr<PhysState> ParsePhysState(std::string_view text) {
  auto number = ParseNumberedName(text, kPhysStateNames, "physical state", "5: LinkUp");
  if (!number.ok()) return number.status();
  return static_cast<PhysState>(*number);
}

absl::StatusOr<PortRate> ParsePortRate(std::string_view text) {
  // rate_show: "%d%s Gb/sec (%dX%s)\n" with "%s" ".5" or "", then the width and " SPEED" (older
  // kernels print no speed name for SDR).
  const std::string_view line = Line(text);
  auto refuse = [&] {
    return absl::InvalidArgumentError(fmt::format(
        "rate {} is not the kernel's 'RATE Gb/sec (WIDTHX SPEED)' (such as '200 Gb/sec (4X HDR)')",
        Quoted(line)));
  };
  std::string_view rest = line;
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return refuse();
  std::string_view number = rest.substr(0, space);
  const bool half = ConsumeSuffix(&number, ".5");
  const std::optional<uint32_t> whole = SmallNumber(number, 100000);
  if (!whole.has_value()) return refuse();
  rest.remove_prefix(space);
  if (!ConsumePrefix(&rest, " Gb/sec (") || !ConsumeSuffix(&rest, ")")) {
    return refuse();
  }
  const size_t x = rest.find('X');
  const std::optional<uint32_t> lanes =
      x == std::string_view::npos ? std::nullopt : SmallNumber(rest.substr(0, x), 32);
  if (!lanes.has_value() || *lanes == 0) return refuse();
  PortRate rate{.lanes = *lanes};
  rest.remove_prefix(x + 1);
  if (!rest.empty()) {
    if (!ConsumePrefix(&rest, " ") || rest.empty()) return refuse();
    for (char c : rest) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) return refuse();
    }
    rate.speed = std::string(rest);
  }
  rate.gbps = *whole + (half ? 0.5 : 0.0);
  return rate;
}

absl::StatusOr<LinkLayer> ParseLinkLayer(std::string_view text) {
  const std::string_view line = Line(text);
  if (line == "InfiniBand") return LinkLayer::kInfiniBand;
  if (line == "Ethernet") return LinkLayer::kEthernet;
  if (line == "Unknown") {  // link_layer_show, for a driver that does not say
    return absl::InvalidArgumentError("the kernel reports the link layer as 'Unknown'");
  }
  return absl::InvalidArgumentError(
      fmt::format("link layer {} is neither 'InfiniBand' nor 'Ethernet'", Quoted(line)));
}

absl::StatusOr<uint64_t> ParseCounter(std::string_view text) {
  const std::string_view line = Line(text);
  const std::optional<uint64_t> value = ParseUint64(line);
  if (!value.has_value() || line.empty() || !absl::ascii_isdigit(line[0])) {
    return absl::InvalidArgumentError(
        fmt::format("counter {} is not an unsigned 64-bit decimal", Quoted(line)));
  }
  return *value;
}

absl::StatusOr<std::optional<int64_t>> ParseNetSpeed(std::string_view text) {
  const std::string_view line = Line(text);
  const std::optional<int64_t> speed = ParseInt64(line);
  if (!speed.has_value() || *speed < -1 || line.empty() ||
      (line[0] != '-' && !absl::ascii_isdigit(line[0]))) {
    return absl::InvalidArgumentError(
        fmt::format("speed {} is not Mb/s (or -1 for unknown)", Quoted(line)));
  }
  if (*speed == -1) return std::optional<int64_t>();
  return speed;
}

absl::StatusOr<bool> ParseCarrier(std::string_view text) {
  const std::string_view line = Line(text);
  if (line == "1") return true;
  if (line == "0") return false;
  return absl::InvalidArgumentError(fmt::format("carrier {} is neither 1 nor 0", Quoted(line)));
}

std::string NicPort::Name() const { return fmt::format("{}/{}", device, port); }

}  // namespace vigil::network
