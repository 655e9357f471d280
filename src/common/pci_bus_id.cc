// Implements the PCI bus id's normal form.
#include "common/pci_bus_id.h"

#include <algorithm>
#include <cctype>

namespace vigil {
namespace {

bool IsHex(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string NormalizePciBusId(std::string_view id) {
  // [DOMAIN:]BUS:DEVICE.FUNCTION
  const size_t dot = id.rfind('.');
  if (dot == std::string_view::npos) return "";
  const std::string_view function = id.substr(dot + 1);
  const std::string_view head = id.substr(0, dot);
  const size_t device_colon = head.rfind(':');
  if (device_colon == std::string_view::npos) return "";
  const std::string_view device = head.substr(device_colon + 1);
  const std::string_view rest = head.substr(0, device_colon);
  const size_t bus_colon = rest.rfind(':');
  const std::string_view bus =
      bus_colon == std::string_view::npos ? rest : rest.substr(bus_colon + 1);
  std::string_view domain =
      bus_colon == std::string_view::npos ? std::string_view("0") : rest.substr(0, bus_colon);
  if (!IsHex(domain) || !IsHex(bus) || !IsHex(device) || !IsHex(function) || bus.size() > 2 ||
      device.size() > 2 || function.size() != 1) {
    return "";
  }
  // NVML writes an 8-digit domain: keep its last four (a domain above 0xffff is not a PCI one).
  while (domain.size() > 4 && domain.front() == '0') domain.remove_prefix(1);
  if (domain.size() > 4) return "";
  const auto pad = [](std::string_view part, size_t width) {
    return std::string(width - std::min(width, part.size()), '0') + Lower(part);
  };
  return pad(domain, 4) + ":" + pad(bus, 2) + ":" + pad(device, 2) + "." + Lower(function);
}

}  // namespace vigil
