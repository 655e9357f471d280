// Who asked the engine for an act, as the engine established it from the connection — never from
// what the client says about itself — and the acts a client certificate may be granted. Plain
// value types and pure functions: thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace vigil {

struct Principal {
  std::string transport;    // "unix", "tcp", "tls", "inproc" or "engine" (a scenario's own steps)
  int64_t uid = -1;         // over the Unix socket (SO_PEERCRED); -1 otherwise
  int64_t pid = -1;         // likewise; the pid at connect time
  std::string description;  // for logs and audit records: "uid 0 (root) pid 4242", "token"
};

// What a caller asks to do. kRead: every call that changes nothing; the others are privileged.
enum class Permission {
  kRead,    // values, history, health, events, discovery
  kInject,  // injections and scenarios, and clearing them
  kReset,   // a GPU reset
  kClear,   // clearing health incidents
};

inline constexpr std::array<std::pair<Permission, std::string_view>, 4> kPermissionNames = {{
    {Permission::kRead, "read"},
    {Permission::kInject, "inject"},
    {Permission::kReset, "reset"},
    {Permission::kClear, "clear"},
}};

inline std::string_view PermissionName(Permission permission) {
  for (const auto& [value, name] : kPermissionNames) {
    if (value == permission) return name;
  }
  return "unknown";
}

inline std::optional<Permission> ParsePermission(std::string_view name) {
  for (const auto& [value, known] : kPermissionNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

// The engine config's tls_clients entry: a client certificate's identity (a subject alternative
// name — a URI such as a SPIFFE id, or a DNS name — or the subject's common name) and what it may
// do over mutual TLS.
struct TlsClientGrant {
  std::string identity;
  std::set<Permission> may;
  bool operator==(const TlsClientGrant&) const = default;
};

}  // namespace vigil
