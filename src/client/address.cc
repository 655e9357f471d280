// Implements ParseEngineAddress.
#include "client/address.h"

#include "common/strings.h"
#include "fmt/format.h"

namespace vigil {
namespace {

absl::Status Invalid(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      fmt::format("--engine '{}' {}: use unix:///path/to.sock, HOST:PORT (e.g. 127.0.0.1:5555) or "
                  "tls://HOST:PORT",
                  text, why));
}

}  // namespace

absl::StatusOr<EngineAddress> ParseEngineAddress(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  if (trimmed.empty()) return Invalid(text, "is empty");
  EngineAddress address{.display = std::string(trimmed)};
  std::string_view path;
  if (trimmed.starts_with("unix://")) {
    path = trimmed.substr(7);
  } else if (trimmed.starts_with("unix:")) {
    path = trimmed.substr(5);
  } else if (trimmed.starts_with("/")) {
    path = trimmed;
  }
  if (!path.empty() || trimmed.starts_with("unix:")) {
    if (path.empty() || path.front() != '/') return Invalid(text, "needs an absolute socket path");
    if (path.size() > 107) return Invalid(text, "has a socket path over 107 bytes");
    address.target = fmt::format("unix:{}", path);
    address.is_unix = true;
    return address;
  }
  std::string_view host_port = trimmed;
  if (host_port.starts_with("tls://")) {
    host_port.remove_prefix(6);
    address.tls = true;
  }
  const size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return Invalid(text, "has no port");
  const std::string_view host = host_port.substr(0, colon);
  if (host.find("://") != std::string_view::npos) return Invalid(text, "has an unknown scheme");
  if (host.find(':') != std::string_view::npos && !(host.front() == '[' && host.back() == ']')) {
    return Invalid(text, "has an IPv6 host without brackets");
  }
  const std::optional<uint64_t> port = ParseUint64(host_port.substr(colon + 1));
  if (!port || *port == 0 || *port > 65535) return Invalid(text, "has no valid port (1-65535)");
  address.target = std::string(host_port);
  return address;
}

}  // namespace vigil
