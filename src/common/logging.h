// Process-wide logging set-up: spdlog to stderr (stdout is kept for --json output), and gRPC's
// own log lines routed through the same logger. Call InitLogging once, early in main, before
// any thread starts; after that spdlog's logging calls are thread-safe.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace vigil {

// level: trace, debug, info, warn, error, off. Returns InvalidArgument for anything else.
absl::Status InitLogging(std::string_view level);

}  // namespace vigil
