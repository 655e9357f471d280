// Engine addresses as users write them (--engine, VIGIL_ENGINE): "unix:///path/to.sock",
// "unix:/path", "/path/to.sock", "HOST:PORT", "[::1]:PORT", and "tls://HOST:PORT" (TLS to the
// engine's TCP listener). Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace vigil {

inline constexpr std::string_view kDefaultEngineAddress = "unix:///run/vigil/vigil.sock";

struct EngineAddress {
  std::string target;   // what gRPC dials: "unix:/path" or "host:port"
  std::string display;  // what messages show: the address as the user wrote it
  bool is_unix = false;
  bool tls = false;  // tls://
};

// InvalidArgument with the accepted forms when `text` is none of them.
absl::StatusOr<EngineAddress> ParseEngineAddress(std::string_view text);

}  // namespace vigil
