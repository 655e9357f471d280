// Helpers for absl::Status in a code base that uses std::string_view (Debian 12's abseil has its
// own absl::string_view). Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "fmt/format.h"

namespace vigil {

inline std::string_view MessageOf(const absl::Status& status) {
  return {status.message().data(), status.message().size()};
}

// The same code with "context: " in front of the message.
inline absl::Status WithContext(const absl::Status& status, std::string_view context) {
  return absl::Status(status.code(), fmt::format("{}: {}", context, MessageOf(status)));
}

}  // namespace vigil
