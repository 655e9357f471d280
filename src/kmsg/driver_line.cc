// Implements the driver-line parser with a small cursor over the message: every step checks what
// is left, so truncated or mutated lines fail without reading past the end.
#include "kmsg/driver_line.h"

#include <cctype>

#include "common/strings.h"
#include "fmt/format.h"

namespace vigil::kmsg {
namespace {

class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}
  bool Take(std::string_view prefix) {
    if (!text_.starts_with(prefix)) return false;
    text_.remove_prefix(prefix.size());
    return true;
  }
  void SkipSpaces() {
    while (!text_.empty() && text_.front() == ' ') text_.remove_prefix(1);
  }
  // A decimal number of at most `max_digits` digits.
  std::optional<uint64_t> Number(size_t max_digits = 10) {
    size_t digits = 0;
    uint64_t value = 0;
    while (digits < text_.size() && digits <= max_digits &&
           std::isdigit(static_cast<unsigned char>(text_[digits]))) {
      value = value * 10 + static_cast<uint64_t>(text_[digits] - '0');
      ++digits;
    }
    if (digits == 0 || digits > max_digits) return std::nullopt;
    text_.remove_prefix(digits);
    return value;
  }
  // Everything up to (not including) `delimiter`; nullopt when it does not occur.
  std::optional<std::string_view> Until(char delimiter) {
    const size_t at = text_.find(delimiter);
    if (at == std::string_view::npos) return std::nullopt;
    const std::string_view taken = text_.substr(0, at);
    text_.remove_prefix(at + 1);
    return taken;
  }
  std::string_view rest() const { return text_; }
  void Consume(size_t count) { text_.remove_prefix(std::min(count, text_.size())); }

 private:
  std::string_view text_;
};

bool IsHex(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The parenthesised location after "Xid" / "SXid": "(PCI:0000:3b:00)", "(0000:01:00)" (old
// drivers), "(PCI:0000:01:00 GPU-I:05)" or "(PCI:0000:01:00 GPU-I:05 GPU-CI:02)". Sets the bus id
// and, for MIG, the instances (`xid` null: an SXid, which has none).
bool ParseLocation(Cursor& cursor, std::string* bus_id, DriverXid* xid) {
  if (!cursor.Take("(")) return false;
  cursor.Take("PCI:");
  const std::optional<std::string_view> inside = cursor.Until(')');
  if (!inside.has_value()) return false;
  std::string_view address = *inside, extra;
  if (const size_t space = address.find(' '); space != std::string_view::npos) {
    extra = address.substr(space + 1);
    address = address.substr(0, space);
  }
  const std::optional<std::string> normalized = NormalizeBusId(address);
  if (!normalized.has_value()) return false;
  *bus_id = *normalized;
  if (extra.empty()) return true;
  if (xid == nullptr) return false;
  Cursor mig(extra);
  if (!mig.Take("GPU-I:")) return false;
  const std::optional<uint64_t> instance = mig.Number(4);
  if (!instance.has_value()) return false;
  xid->gpu_instance = static_cast<uint32_t>(*instance);
  if (mig.Take(" GPU-CI:")) {
    const std::optional<uint64_t> compute = mig.Number(4);
    if (!compute.has_value()) return false;
    xid->compute_instance = static_cast<uint32_t>(*compute);
  }
  return mig.rest().empty();
}

// ": CODE" then "," or the end.
std::optional<uint32_t> ParseCode(Cursor& cursor) {
  if (!cursor.Take(": ") && !cursor.Take(":")) return std::nullopt;
  const std::optional<uint64_t> code = cursor.Number(5);
  if (!code.has_value() || *code == 0 || *code > 65535) return std::nullopt;
  if (!cursor.rest().empty() && !cursor.Take(",")) return std::nullopt;
  cursor.SkipSpaces();
  return static_cast<uint32_t>(*code);
}

DriverLine ParseXid(Cursor cursor) {
  DriverXid xid;
  if (!ParseLocation(cursor, &xid.bus_id, &xid)) return {};
  const std::optional<uint32_t> code = ParseCode(cursor);
  if (!code.has_value()) return {};
  xid.code = *code;
  // Up to R565: "pid=1234, name=python3, " or "pid='<unknown>', name=<unknown>, "; older drivers
  // "pid=1234, "; from R570 neither.
  if (cursor.Take("pid=")) {
    if (cursor.Take("'<unknown>'")) {
      // unknown
    } else if (const std::optional<uint64_t> pid = cursor.Number(10); pid.has_value()) {
      xid.pid = static_cast<int64_t>(*pid);
    } else {
      return {};
    }
    if (!cursor.rest().empty() && !cursor.Take(",")) return {};
    cursor.SkipSpaces();
    if (cursor.Take("name=")) {
      // A process name is at most 15 characters (the kernel's comm) and ends at ", ".
      const size_t end = cursor.rest().find(", ");
      const std::string_view name = cursor.rest().substr(0, end);
      if (name != "<unknown>") xid.process = std::string(name.substr(0, 64));
      cursor.Consume(end == std::string_view::npos ? name.size() : end + 2);
    }
  }
  xid.text = std::string(cursor.rest());
  return xid;
}

DriverLine ParseSxid(Cursor cursor) {
  DriverSxid sxid;
  const std::optional<uint64_t> index = cursor.Number(4);
  if (!index.has_value() || !cursor.Take(": SXid ")) return {};
  sxid.nvswitch = static_cast<uint32_t>(*index);
  if (!ParseLocation(cursor, &sxid.bus_id, nullptr)) return {};
  const std::optional<uint32_t> code = ParseCode(cursor);
  if (!code.has_value()) return {};
  sxid.code = *code;
  if (cursor.rest().starts_with("Severity ")) {
    sxid.kind = SxidLineKind::kSeverity;
  } else if (cursor.rest().starts_with("Data {")) {
    sxid.kind = SxidLineKind::kData;
  } else {
    if (cursor.Take("Fatal")) {
      sxid.severity = SxidSeverity::kFatal;
    } else if (cursor.Take("Non-fatal")) {
      sxid.severity = SxidSeverity::kNonFatal;
    } else if (cursor.Take("Correctable")) {
      sxid.severity = SxidSeverity::kCorrectable;
    }
    if (sxid.severity != SxidSeverity::kUnknown) {
      if (!cursor.rest().empty() && !cursor.Take(",")) return {};
      cursor.SkipSpaces();
    }
    if (Cursor link(cursor.rest()); link.Take("Link ")) {
      if (const std::optional<uint64_t> number = link.Number(3); number.has_value()) {
        sxid.link = static_cast<uint32_t>(*number);
      }
    }
  }
  sxid.text = std::string(cursor.rest());
  return sxid;
}

}  // namespace

std::optional<std::string> NormalizeBusId(std::string_view bus_id) {
  // DOMAIN:BUS:DEVICE[.FUNCTION]
  const size_t first = bus_id.find(':');
  if (first == std::string_view::npos) return std::nullopt;
  const size_t second = bus_id.find(':', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  const std::string_view domain = bus_id.substr(0, first);
  const std::string_view bus = bus_id.substr(first + 1, second - first - 1);
  std::string_view device = bus_id.substr(second + 1), function = "0";
  if (const size_t dot = device.find('.'); dot != std::string_view::npos) {
    function = device.substr(dot + 1);
    device = device.substr(0, dot);
  }
  if (domain.size() < 4 || domain.size() > 8 || !IsHex(domain) || bus.size() != 2 || !IsHex(bus) ||
      device.size() != 2 || !IsHex(device) || function.size() != 1 || function[0] < '0' ||
      function[0] > '7') {
    return std::nullopt;
  }
  return fmt::format("{:0>8}:{}:{}.{}", ToUpper(domain), ToUpper(bus), ToUpper(device), function);
}

// "NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus." (printed beside the Xid line, and alone
// by R570 drivers) and the probe routine's "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID:
// 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to
// commands." (one record): XID 79 for that bus id.
DriverLine ParseFallenOffTheBus(std::string_view message) {
  Cursor cursor(message);
  std::string_view tail;  // what follows the bus id
  bool probe = false;
  if (cursor.Take("NVRM: GPU ")) {
    tail = ": GPU has fallen off the bus.";
  } else if (cursor.Take("NVRM: The NVIDIA GPU ")) {
    tail = "\n";
    probe = true;
  } else {
    return {};
  }
  const std::string_view rest = cursor.rest();
  const size_t at = rest.find(tail);
  if (at == std::string_view::npos || at > 16) return {};
  const std::optional<std::string> bus_id = NormalizeBusId(rest.substr(0, at));
  if (!bus_id.has_value()) return {};
  if (probe && rest.substr(at).find("fallen off the bus and is not responding to commands") ==
                   std::string_view::npos) {
    return {};
  }
  DriverXid xid;
  xid.bus_id = *bus_id;
  xid.code = 79;
  xid.from_fallen_off_bus_message = true;
  xid.text = "GPU has fallen off the bus.";
  return xid;
}

DriverLine ParseDriverLine(std::string_view message) {
  Cursor cursor(message);
  if (cursor.Take("NVRM: Xid ")) return ParseXid(cursor);
  if (cursor.Take("nvidia-nvswitch")) return ParseSxid(cursor);
  return ParseFallenOffTheBus(message);
}

}  // namespace vigil::kmsg
